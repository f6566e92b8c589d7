"""Record what the intake parsed out of one delivery, in the caller's single transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .._errors import DeliveryNotFound, OlderDeliveries
from .._intake_rows import LAST_USER_MESSAGE_AT, Arrival, Rows, prepare
from .._pipeline_rows import dump_ids
from .._pipeline_types import SessionInbox
from . import _sql_attachments as attachments
from . import _sql_inbox as inbox
from . import _sql_outbox as outbox
from ._sql_quarantine import insert_many as insert_quarantine
from ._sql_sessions import add_event, insert_session

__all__ = ["Rows", "prepare", "record", "record_many"]


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
    memberships = list(rows.memberships)
    for sid, status, unreachable in outbox.apply_statuses(conn, rows.statuses):
        add_event(conn, sid, "status", status, now)
        if unreachable:  # the user cannot be reached: as a block, for the session that sent
            memberships.append(("true", now, sid))
    conn.executemany(
        "UPDATE sessions SET metadata = json_set(metadata, '$.blocked', json(?)),"
        " updated_at = ? WHERE session_id = ?",
        memberships,
    )
    for blocked, _, member in memberships:
        _membership_changed(conn, str(member), blocked == "true", now)
    if source is not None:
        if rows.failure is not None:
            channel, account, body, received_at = source
            insert_quarantine(conn, [(channel, account, body, rows.failure, received_at)])
        conn.execute("DELETE FROM deliveries WHERE id = ?", (delivery_id,))
    return list(fresh)


def _membership_changed(conn: sqlite3.Connection, sid: str, blocked: bool, now: float) -> None:
    """A block parks the session's pending replies; an unblock makes them due again."""
    if blocked:
        add_event(conn, sid, "user_blocked", {"parked": outbox.park(conn, sid)}, now)
    else:
        add_event(conn, sid, "user_unblocked", {"released": outbox.unpark(conn, sid, now)}, now)


def _arrived(
    conn: sqlite3.Connection, sid: str, dedup_key: str, arrival: Arrival, now: float
) -> None:
    """A new inbound message: link its uploads, record its platform files, log its event."""
    if arrival.links:
        attachments.link(conn, sid, arrival.links, dedup_key, now)
    for values in arrival.attachments:
        attachments.insert(conn, {**values, "session_id": sid}, now)
    add_event(conn, sid, "message", arrival.detail, now)
    conn.execute(_WROTE_AT, (arrival.wrote_at, sid))


_WROTE_AT = (
    f"UPDATE sessions SET metadata = json_set(metadata, '$.{LAST_USER_MESSAGE_AT}',"
    f" max(coalesce(json_extract(metadata, '$.{LAST_USER_MESSAGE_AT}'), 0), ?))"
    " WHERE session_id = ?"
)


def record_many(
    conn: sqlite3.Connection,
    items: Sequence[tuple[int, Rows]],
    now: float,
    oldest_first: bool = False,
) -> list[SessionInbox]:
    """``record`` for several deliveries in the caller's one transaction; one already gone
    (another intake recorded it) is skipped: ``record`` refuses it before writing anything.
    Each session with new rows comes back with them, and whether they are all its pending
    rows, so that the dispatcher need not read them again."""
    if oldest_first:
        _check_oldest(conn, [delivery_id for delivery_id, _ in items])
    fresh: dict[str, None] = {}
    for delivery_id, rows in items:
        try:
            fresh.update(dict.fromkeys(record(conn, delivery_id, rows, now)))
        except DeliveryNotFound:
            continue
    keys = [str(row[1]) for _, rows in items for row in rows.inbox]
    return inbox.recorded(conn, list(fresh), keys)


def _check_oldest(conn: sqlite3.Connection, ids: list[int]) -> None:
    """OlderDeliveries if a stored delivery older than the newest of ``ids`` is not one."""
    older = conn.execute(
        "SELECT min(id) FROM deliveries"
        " WHERE id < ? AND id NOT IN (SELECT value FROM json_each(?))",
        (max(ids), dump_ids(ids)),
    ).fetchone()[0]
    if older is not None:
        raise OlderDeliveries(older)
