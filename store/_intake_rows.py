"""What the intake parsed out of a delivery, checked and turned into rows before any I/O.

Both backends' ``_sql_intake`` write these rows, each in its own transaction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ._args import outside_text, storable_text
from ._checks import check_agent, check_text, json_object, session_values
from ._ids import make_session_id
from ._pipeline_rows import STATUS_RANK
from ._pipeline_types import (
    DELIVERY_STATES,
    AttachmentIn,
    InboxIn,
    MembershipIn,
    ParsedDelivery,
    StatusIn,
)


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
    """The rest of a new inbound message: its ``message`` event, its attachments, and when the
    user wrote it (``metadata.last_user_message_at``, the latest of them is kept)."""

    detail: dict[str, Any]
    attachments: list[dict[str, Any]]
    links: tuple[str, ...]
    wrote_at: float


LAST_USER_MESSAGE_AT = "last_user_message_at"  # session metadata: Unix seconds


def wrote_at(event: dict[str, Any], now: float) -> float:
    """When the user wrote: the platform's timestamp, never later than the recording."""
    stamp = event.get("timestamp")
    try:
        sent = datetime.fromisoformat(stamp).timestamp() if isinstance(stamp, str) else now
    except ValueError:
        sent = now
    return min(sent, now)


def _arrival(item: InboxIn, now: float) -> Arrival:
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
        "agent": None,  # the frame's fields are the same for every role (CONTRACT.md)
        "kind": event.get("kind"),
        "message_id": event.get("message_id"),
        "sender_name": event.get("sender_name"),
        "attachments": [*links, *(row["id"] for row in rows)],
    }
    return Arrival(detail, rows, links, wrote_at(event, now))


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
        "error": None if item.error is None else storable_text(item.error),
        "rank": STATUS_RANK[item.state],
        "resend_at": _resend_at(item),
        "unreachable": _unreachable(item),
    }


def _resend_at(item: StatusIn) -> list[float]:
    times = item.resend_at
    if not isinstance(times, tuple) or not all(_is_time(t) for t in times):
        raise ValueError("StatusIn.resend_at must be a tuple of finite numbers")
    if times and item.state != "failed":
        raise ValueError("StatusIn.resend_at is for a failed status only")
    return [float(t) for t in times]


def _unreachable(item: StatusIn) -> bool:
    if not isinstance(item.unreachable, bool):
        raise ValueError("StatusIn.unreachable must be a bool")
    if item.unreachable and item.state != "failed":
        raise ValueError("StatusIn.unreachable is for a failed status only")
    return item.unreachable


def _is_time(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


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
    failure = None if parsed.failure is None else outside_text("parsed.failure", parsed.failure)
    inbox_rows = [_inbox_row(item, now) for item in parsed.inbox]
    arrivals = [_arrival(item, now) for item in parsed.inbox]
    membership_rows = [_membership_row(item, now) for item in parsed.memberships]
    sessions: dict[str, dict[str, Any]] = {}
    chats: list[InboxIn | MembershipIn] = [*parsed.inbox, *parsed.memberships]
    for chat in chats:
        agent = starting_agent if chat.starting_agent is None else check_agent(chat.starting_agent)
        values = session_values(chat.channel, chat.account, chat.chat_id, agent, None)
        sessions.setdefault(values["session_id"], values)
    return Rows(
        sessions=sessions,
        inbox=inbox_rows,
        arrivals=arrivals,
        statuses=[_status_row(item) for item in parsed.statuses],
        memberships=membership_rows,
        failure=failure,
    )
