"""New inbound messages of many deliveries at once: the intake's common case in few statements.

A delivery that holds only messages without files (no delivery status, block, attachment or
parse failure) writes three kinds of rows per message: its inbox row, its ``message`` event
and its session's ``metadata.last_user_message_at``. For a run of such deliveries those are
three statements in all (plus one UPDATE if a time moved), not three per message, with the
same rows, ids in the same order and the same seqs as one message after the other would give.
The caller's transaction holds every session's row lock already (``_sql_intake``).
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from .._intake_rows import LAST_USER_MESSAGE_AT, Rows
from .._rows import dump_json, load_json
from ._db import holds_lock, noted_events
from ._sql_sessions import lock_row

# Ids drawn in the given order; a dedup key seen before (or earlier in the list) is skipped.
_INSERT_INBOX = (
    "INSERT INTO inbox (session_id, dedup_key, event, next_attempt_at, created_at)"
    " SELECT session_id, dedup_key, event, at, at FROM unnest($1::text[], $2::text[],"
    " $3::text[], $4::float8[]) WITH ORDINALITY AS given (session_id, dedup_key, event, at, n)"
    " ORDER BY n ON CONFLICT (dedup_key) DO NOTHING RETURNING dedup_key"
)
# Each session's events numbered after its last seq, in the given order. Sent after the
# sessions' locks, so the snapshot counts what their previous holders committed.
_MESSAGE_EVENTS = (
    "INSERT INTO session_events (session_id, kind, detail, created_at, seq)"
    " SELECT e.session_id, 'message', e.detail, $3, coalesce((SELECT max(seq)"
    " FROM session_events AS s WHERE s.session_id = e.session_id), 0)"
    " + row_number() OVER (PARTITION BY e.session_id ORDER BY e.n)"
    " FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS e (session_id, detail, n)"
    " ORDER BY e.n"
)
_SET_METADATA = (
    "UPDATE sessions SET metadata = given.metadata FROM unnest($1::text[], $2::text[])"
    " AS given (session_id, metadata) WHERE sessions.session_id = given.session_id"
)


def only_messages(rows: Rows) -> bool:
    """Whether ``record_messages`` can write this delivery."""
    if rows.statuses or rows.memberships or rows.failure is not None:
        return False
    return all(not arrival.links and not arrival.attachments for arrival in rows.arrivals)


async def record_messages(conn: asyncpg.Connection, run: Sequence[Rows], now: float) -> list[str]:
    """Write the messages of ``run`` (each ``only_messages``); the sessions that got a new
    inbox row, in order."""
    inbox = [row for rows in run for row in rows.inbox]
    if not inbox:
        return []
    arrivals = [arrival for rows in run for arrival in rows.arrivals]
    columns = ([row[i] for row in inbox] for i in range(4))
    inserted = {row[0] for row in await conn.fetch(_INSERT_INBOX, *columns)}
    new = []  # (session_id, arrival) of each row inserted, the first of a repeated key only
    for (session_id, dedup_key, _, _), arrival in zip(inbox, arrivals, strict=True):
        if dedup_key in inserted:
            inserted.discard(dedup_key)
            new.append((str(session_id), arrival))
    if not new:
        return []
    sessions = list(dict.fromkeys(session_id for session_id, _ in new))
    for session_id in sessions:
        if not holds_lock(session_id):
            await lock_row(conn, session_id)
    details = [dump_json(arrival.detail) for _, arrival in new]
    await conn.execute(_MESSAGE_EVENTS, [session_id for session_id, _ in new], details, now)
    noted_events(sessions)
    latest: dict[str, float] = {}
    for session_id, arrival in new:
        latest[session_id] = max(latest.get(session_id, arrival.wrote_at), arrival.wrote_at)
    await set_wrote_at(conn, latest)
    return sessions


async def set_wrote_at(conn: asyncpg.Connection, latest: dict[str, float]) -> None:
    """Keep the latest ``metadata.last_user_message_at`` of each session (a missing session is
    skipped), merged in Python as ``_sql_intake`` merges ``blocked``: the stored text stays as
    ``dump_json`` writes it, as on SQLite."""
    stored = await conn.fetch(
        "SELECT session_id, metadata FROM sessions WHERE session_id = ANY($1::text[])",
        list(latest),
    )
    changed: list[tuple[str, str]] = []
    for session_id, text in stored:
        metadata = load_json(text)
        previous = metadata.get(LAST_USER_MESSAGE_AT)
        if isinstance(previous, int | float) and previous >= latest[session_id]:
            continue
        metadata[LAST_USER_MESSAGE_AT] = latest[session_id]
        changed.append((str(session_id), dump_json(metadata)))
    if changed:
        await conn.execute(_SET_METADATA, [c[0] for c in changed], [c[1] for c in changed])
