"""Record what the intake parsed out of one delivery, in the caller's single transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._checks import check_text, json_object, session_values
from .._errors import DeliveryNotFound
from .._ids import make_session_id
from .._pipeline_types import (
    DELIVERY_STATES,
    AttachmentIn,
    InboxIn,
    MembershipIn,
    ParsedDelivery,
    StatusIn,
)
from . import _sql_attachments as attachments
from . import _sql_inbox as inbox
from . import _sql_outbox as outbox
from ._sql_quarantine import insert_many as insert_quarantine
from ._sql_sessions import add_event, insert_session


@dataclass(frozen=True, slots=True)
class Rows:
    """A ParsedDelivery checked and turned into rows, before the transaction opens."""

    sessions: dict[str, dict[str, Any]]  # session id -> its row, should it be new
    inbox: list[tuple[object, ...]]
    arrivals: list[Arrival]  # one per inbox row: what else is written if the row is new
    statuses: list[dict[str, Any]]
    memberships: list[tuple[object, ...]]
    failure: str | None


@dataclass(frozen=True, slots=True)
class Arrival:
    """The rest of a new inbound message: its ``message`` event and its attachments."""

    detail: dict[str, Any]
    attachments: list[dict[str, Any]]
    links: tuple[str, ...]


def _arrival(item: InboxIn) -> Arrival:
    event = item.event
    rows = []
    for attachment in item.attachments:
        if not isinstance(attachment, AttachmentIn):
            raise ValueError("InboxIn.attachments holds AttachmentIn items")
        rows.append(
            {
                "id": check_text("AttachmentIn.id", attachment.id),
                "name": attachment.name,
                "content_type": check_text("AttachmentIn.content_type", attachment.content_type),
                "size": 0,
                "state": "pending",
                "source": check_text("AttachmentIn.source", attachment.source),
                "message_key": item.dedup_key,
                "media_ref": json_object("AttachmentIn.media_ref", attachment.media_ref),
            }
        )
    links = tuple(check_text("InboxIn.links", link) for link in item.links)
    detail = {
        "role": "user",
        "text": event.get("text"),
        "kind": event.get("kind"),
        "message_id": event.get("message_id"),
        "sender_name": event.get("sender_name"),
        "attachments": [*links, *(row["id"] for row in rows)],
    }
    return Arrival(detail, rows, links)


def _inbox_row(item: InboxIn, now: float) -> tuple[object, ...]:
    if not isinstance(item, InboxIn):
        raise ValueError(f"parsed.inbox holds InboxIn items, got {type(item).__name__}")
    for name in ("channel", "chat_id", "dedup_key"):
        check_text(f"InboxIn.{name}", getattr(item, name))
    if not isinstance(item.account, str):  # "" for a channel without accounts (the web)
        raise ValueError("InboxIn.account must be a string")
    sid = make_session_id(item.channel, item.account, item.chat_id)
    return (sid, item.dedup_key, json_object("InboxIn.event", item.event), now)


def _status_row(item: StatusIn) -> dict[str, Any]:
    if not isinstance(item, StatusIn):
        raise ValueError(f"parsed.statuses holds StatusIn items, got {type(item).__name__}")
    if item.state not in DELIVERY_STATES:
        raise ValueError(f"StatusIn.state must be one of {DELIVERY_STATES}, got {item.state!r}")
    return {
        "channel": check_text("StatusIn.channel", item.channel),
        "account": check_text("StatusIn.account", item.account),
        "platform_id": check_text("StatusIn.platform_message_id", item.platform_message_id),
        "state": item.state,
        "error": item.error,
        "rank": outbox.STATUS_RANK[item.state],
    }


def _membership_row(item: MembershipIn, now: float) -> tuple[object, ...]:
    if not isinstance(item, MembershipIn) or not isinstance(item.blocked, bool):
        raise ValueError("parsed.memberships holds MembershipIn items with a bool 'blocked'")
    for name in ("channel", "account", "chat_id"):
        check_text(f"MembershipIn.{name}", getattr(item, name))
    sid = make_session_id(item.channel, item.account, item.chat_id)
    return ("true" if item.blocked else "false", now, sid)


def prepare(parsed: ParsedDelivery, starting_agent: str, now: float) -> Rows:
    """Check ``parsed`` and build its rows; ValueError naming the field at fault."""
    if not isinstance(parsed, ParsedDelivery):
        raise ValueError(f"parsed must be a ParsedDelivery, got {type(parsed).__name__}")
    if parsed.failure is not None:
        check_text("parsed.failure", parsed.failure)
    inbox_rows = [_inbox_row(item, now) for item in parsed.inbox]
    arrivals = [_arrival(item) for item in parsed.inbox]
    membership_rows = [_membership_row(item, now) for item in parsed.memberships]
    sessions: dict[str, dict[str, Any]] = {}
    chats: list[InboxIn | MembershipIn] = [*parsed.inbox, *parsed.memberships]
    for chat in chats:
        values = session_values(chat.channel, chat.account, chat.chat_id, starting_agent, None)
        sessions.setdefault(values["session_id"], values)
    return Rows(
        sessions=sessions,
        inbox=inbox_rows,
        arrivals=arrivals,
        statuses=[_status_row(item) for item in parsed.statuses],
        memberships=membership_rows,
        failure=parsed.failure,
    )


def record(conn: sqlite3.Connection, delivery_id: int | None, rows: Rows, now: float) -> list[str]:
    """Apply ``rows``, quarantine the body on failure, delete the delivery."""
    source = None
    if delivery_id is not None:
        source = conn.execute(
            "SELECT channel, account, body, received_at FROM deliveries WHERE id = ?",
            (delivery_id,),
        ).fetchone()
        if source is None:
            raise DeliveryNotFound(delivery_id)
    for values in rows.sessions.values():
        insert_session(conn, values, now)  # get-or-create: an existing session is kept as is
    fresh: dict[str, None] = {}  # an ordered set
    for row, arrival in zip(rows.inbox, rows.arrivals, strict=True):
        sid = inbox.insert(conn, row)
        if sid is not None:
            fresh[sid] = None
            _arrived(conn, sid, str(row[1]), arrival, now)
    for sid, status in outbox.apply_statuses(conn, rows.statuses):
        add_event(conn, sid, "status", status, now)
    conn.executemany(
        "UPDATE sessions SET metadata = json_set(metadata, '$.blocked', json(?)),"
        " updated_at = ? WHERE session_id = ?",
        rows.memberships,
    )
    if source is not None:
        if rows.failure is not None:
            channel, account, body, received_at = source
            insert_quarantine(conn, [(channel, account, body, rows.failure, received_at)])
        conn.execute("DELETE FROM deliveries WHERE id = ?", (delivery_id,))
    return list(fresh)


def _arrived(
    conn: sqlite3.Connection, sid: str, dedup_key: str, arrival: Arrival, now: float
) -> None:
    """A new inbound message: link its uploads, record its platform files, log its event."""
    if arrival.links:
        attachments.link(conn, sid, arrival.links, dedup_key)
    for values in arrival.attachments:
        attachments.insert(conn, {**values, "session_id": sid}, now)
    add_event(conn, sid, "message", arrival.detail, now)


def record_many(
    conn: sqlite3.Connection, items: Sequence[tuple[int, Rows]], now: float
) -> list[str]:
    """``record`` for several deliveries in the caller's one transaction; one already gone
    (another intake recorded it) is skipped: ``record`` refuses it before writing anything."""
    fresh: dict[str, None] = {}
    for delivery_id, rows in items:
        try:
            fresh.update(dict.fromkeys(record(conn, delivery_id, rows, now)))
        except DeliveryNotFound:
            continue
    return list(fresh)
