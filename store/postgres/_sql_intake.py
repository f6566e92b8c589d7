"""Record what the intake parsed out of deliveries, in the caller's single transaction.

The rows are checked and built by ``store._intake_rows.prepare`` (one validation for both
backends); this module writes them. Several intakes may record at once, so a transaction
takes its locks in one order: the deliveries (by id), then every session it writes to (by id,
bytewise, ``FOR NO KEY UPDATE`` as ``_sql_sessions`` takes it to log an event), then their
rows. A delivery is locked before it is applied and deleted with it: a second intake that
read the same delivery waits, then finds it gone and skips it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import asyncpg

from .._errors import DeliveryNotFound, OlderDeliveries
from .._intake_rows import Arrival, Rows, prepare
from .._pipeline_rows import to_session_inboxes
from .._pipeline_types import SessionInbox
from .._rows import dump_json, load_json
from . import _sql_attachments as attachments
from . import _sql_inbox as inbox
from . import _sql_outbox as outbox
from ._db import noted_locked
from ._sql_arrivals import only_messages, record_messages, set_wrote_at
from ._sql_quarantine import insert_many as insert_quarantine
from ._sql_sessions import add_event

__all__ = ["Rows", "prepare", "record", "record_many"]

_LOCK_SESSIONS = (
    "SELECT session_id FROM sessions WHERE session_id = ANY($1::text[])"
    ' ORDER BY session_id COLLATE "C" FOR NO KEY UPDATE'
)
_DELETE_AND_READ = (
    "WITH gone AS (DELETE FROM deliveries WHERE id = ANY($2::bigint[])) " + inbox.RECORDED
)
_ATTEMPTS = 3  # a session deleted between its insert and its lock is inserted again
# The sessions that do not exist yet, in one statement (an existing one is kept as is), in
# session id order as the lock that follows takes them.
_INSERT_SESSIONS = (
    "INSERT INTO sessions (session_id, channel, account, chat_id, active_agent, metadata,"
    " created_at, updated_at) SELECT session_id, channel, account, chat_id, active_agent,"
    " metadata, $7, $7 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],"
    " $6::text[]) WITH ORDINALITY AS given (session_id, channel, account, chat_id, active_agent,"
    " metadata, n) ORDER BY n ON CONFLICT (session_id) DO NOTHING"
)
_SESSION_FIELDS = ("session_id", "channel", "account", "chat_id", "active_agent", "metadata")


# The deliveries given, locked in id order, each row with the oldest stored delivery below $2
# that is not one of them (NULL with $2 = 0: no check).
_LOCK_DELIVERIES = (
    "SELECT id, channel, account, body, received_at, (SELECT min(other.id) FROM deliveries AS"
    " other WHERE other.id < $2 AND NOT other.id = ANY($1::bigint[])) FROM deliveries"
    " WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE"
)


async def _lock_deliveries(
    conn: asyncpg.Connection, ids: Iterable[int], oldest_first: bool = False
) -> dict[int, asyncpg.Record]:
    """Lock the deliveries still stored, in id order; their rows by id. ``oldest_first``:
    OlderDeliveries if a stored delivery older than the newest of ``ids`` is not one."""
    given = sorted(set(ids))
    below = given[-1] if oldest_first and given else 0
    rows = await conn.fetch(_LOCK_DELIVERIES, given, below)
    if rows and rows[0][5] is not None:
        raise OlderDeliveries(int(rows[0][5]))
    return {int(row[0]): row for row in rows}


async def _lock_sessions(
    conn: asyncpg.Connection, new: dict[str, dict[str, Any]], others: Iterable[str], now: float
) -> None:
    """Create the sessions of ``new`` that do not exist, then lock them and ``others``."""
    wanted = sorted({*new, *others})
    if not wanted:
        return
    missing = sorted(new)
    for _ in range(_ATTEMPTS):
        if missing:
            rows = [new[session_id] for session_id in missing]
            fields = ([row[name] for row in rows] for name in _SESSION_FIELDS)
            await conn.execute(_INSERT_SESSIONS, *fields, now)
        locked = {row[0] for row in await conn.fetch(_LOCK_SESSIONS, wanted)}
        noted_locked(locked)
        missing = [session_id for session_id in sorted(new) if session_id not in locked]
        if not missing:
            return


async def record(
    conn: asyncpg.Connection, delivery_id: int | None, rows: Rows, now: float
) -> list[str]:
    """Apply ``rows``, quarantine the body on failure, delete the delivery."""
    source = None
    if delivery_id is not None:
        source = (await _lock_deliveries(conn, [delivery_id])).get(delivery_id)
        if source is None:
            raise DeliveryNotFound(delivery_id)
    touched = await outbox.status_sessions(conn, rows.statuses)
    await _lock_sessions(conn, rows.sessions, touched, now)
    return await _apply(conn, delivery_id, source, rows, now)


async def record_many(
    conn: asyncpg.Connection,
    items: Sequence[tuple[int, Rows]],
    now: float,
    oldest_first: bool = False,
) -> list[SessionInbox]:
    """``record`` for several deliveries in the caller's one transaction; one already gone
    (another intake recorded it) is skipped before anything of it is written. Each session
    with new rows comes back with them, and whether they are all its pending rows."""
    given = (delivery_id for delivery_id, _ in items)
    sources = await _lock_deliveries(conn, given, oldest_first)
    todo: list[tuple[int, asyncpg.Record, Rows]] = []
    for delivery_id, rows in items:
        source = sources.pop(delivery_id, None)  # a repeated id is gone the second time
        if source is not None:
            todo.append((delivery_id, source, rows))
    sessions: dict[str, dict[str, Any]] = {}
    statuses: list[dict[str, Any]] = []
    for _, _, rows in todo:
        for session_id, values in rows.sessions.items():
            sessions.setdefault(session_id, values)
        statuses += rows.statuses
    await _lock_sessions(conn, sessions, await outbox.status_sessions(conn, statuses), now)
    fresh: dict[str, None] = {}  # an ordered set
    run: list[Rows] = []  # deliveries of messages only, written together when the run ends
    for delivery_id, source, rows in todo:
        if only_messages(rows):
            run.append(rows)
            continue
        fresh.update(dict.fromkeys(await record_messages(conn, run, now)))
        run = []
        fresh.update(dict.fromkeys(await _apply(conn, delivery_id, source, rows, now, False)))
    fresh.update(dict.fromkeys(await record_messages(conn, run, now)))
    # The deliveries applied go, and the rows recorded are read back, in one statement.
    done = [delivery_id for delivery_id, _, _ in todo]
    keys = [str(row[1]) for _, _, rows in todo for row in rows.inbox]
    read = await conn.fetch(_DELETE_AND_READ, keys, done)
    return to_session_inboxes(list(fresh), read)


async def _apply(
    conn: asyncpg.Connection,
    delivery_id: int | None,
    source: asyncpg.Record | None,
    rows: Rows,
    now: float,
    delete: bool = True,
) -> list[str]:
    """Write ``rows`` of one delivery whose sessions exist and are locked; delete the delivery
    unless ``delete`` is false (the caller deletes it)."""
    fresh: dict[str, None] = {}
    for row, arrival in zip(rows.inbox, rows.arrivals, strict=True):
        session_id = await inbox.insert(conn, row)
        if session_id is not None:
            fresh[session_id] = None
            await _arrived(conn, session_id, str(row[1]), arrival, now)
    memberships = list(rows.memberships)
    for session_id, status, unreachable in await outbox.apply_statuses(conn, rows.statuses):
        await add_event(conn, session_id, "status", status, now)
        if unreachable:  # the user cannot be reached: as a block, for the session that sent
            memberships.append(("true", now, session_id))
    await _set_blocked(conn, memberships, now)
    for blocked, _, member in memberships:
        await _membership_changed(conn, str(member), blocked == "true", now)
    if source is not None:
        if rows.failure is not None:
            channel, account, body, received_at = source[1:5]
            await insert_quarantine(conn, [(channel, account, body, rows.failure, received_at)])
        if delete:
            await conn.execute("DELETE FROM deliveries WHERE id = $1", delivery_id)
    return list(fresh)


async def _arrived(
    conn: asyncpg.Connection, session_id: str, dedup_key: str, arrival: Arrival, now: float
) -> None:
    """A new inbound message: link its uploads, record its platform files, log its event."""
    if arrival.links:
        await attachments.link(conn, session_id, arrival.links, dedup_key, now)
    for values in arrival.attachments:
        await attachments.insert(conn, {**values, "session_id": session_id}, now)
    await add_event(conn, session_id, "message", arrival.detail, now)
    await set_wrote_at(conn, {session_id: arrival.wrote_at})


async def _membership_changed(
    conn: asyncpg.Connection, session_id: str, blocked: bool, now: float
) -> None:
    """A block parks the session's pending replies; an unblock makes them due again."""
    if blocked:
        parked = await outbox.park(conn, session_id)
        await add_event(conn, session_id, "user_blocked", {"parked": parked}, now)
    else:
        released = await outbox.unpark(conn, session_id, now)
        await add_event(conn, session_id, "user_unblocked", {"released": released}, now)


async def _set_blocked(
    conn: asyncpg.Connection, memberships: Sequence[tuple[object, ...]], now: float
) -> None:
    """Set ``metadata.blocked`` of each ``("true" | "false", now, session_id)`` row, in order.

    Merged here rather than with jsonb, which would rewrite the stored text (key order,
    spacing): the metadata stays exactly as ``dump_json`` writes it, as on SQLite.
    """
    if not memberships:
        return
    order = list(dict.fromkeys(str(row[2]) for row in memberships))
    found = await conn.fetch(
        "SELECT session_id, metadata FROM sessions WHERE session_id = ANY($1::text[])", order
    )
    metadata = {str(row[0]): load_json(row[1]) for row in found}
    for blocked, _, session_id in memberships:
        if session_id in metadata:
            metadata[str(session_id)]["blocked"] = blocked == "true"
    await conn.executemany(
        "UPDATE sessions SET metadata = $1, updated_at = $2 WHERE session_id = $3",
        [(dump_json(metadata[sid]), now, sid) for sid in order if sid in metadata],
    )
