"""Outbox statements: replies to send, and what became of them.

Every transition is one conditional UPDATE (``WHERE id = $n AND state = 'pending'``): under
READ COMMITTED a second transaction on the same row waits for the first and then re-checks
the condition on the row as committed, so a row leaves ``pending`` once, whoever tries.
A transition that logs an event locks the row's session first, the order every write of a
session's events takes (session, then its rows), so it cannot deadlock with a turn.

``due`` is a read, not a claim: two senders may get the same rows. Before sending one, a
sender claims it (``claim``: ``claimed_by`` its store's owner until ``claimed_until``), a
claim that outlives the transaction (``FOR UPDATE SKIP LOCKED`` locks would end with it,
before the send): of two senders racing for a row, one gets it. A chat whose oldest pending
row another owner has claimed is not due, until the claim runs out (its sender died) or a
transition out of the send attempt (sent, retry, failed, progress, redirect) ends it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import asyncpg

from .._errors import OutboxNotFound, OutboxNotPending, SessionNotFound
from .._pipeline_rows import OUTBOX_COLUMNS, STATUS_RANK, dump_list, to_outbox
from .._pipeline_types import PARKED_AT, PARKED_ERROR, OutboxItem
from .._resend import Resend, plan
from .._rows import dump_json, load_json
from ._db import noted_events, noted_locked
from ._sql_sessions import add_event

_RANK_OF_CURRENT = (
    "CASE delivery_state "
    + " ".join(f"WHEN '{state}' THEN {rank}" for state, rank in STATUS_RANK.items())
    + " ELSE 0 END"
)
_APPLY_STATUS = (
    "UPDATE outbox SET delivery_state = $1::text,"
    " error = CASE WHEN $1::text = 'failed' THEN coalesce($2::text, 'delivery failed')"
    " ELSE error END"
    " WHERE id = (SELECT outbox_id FROM outbox_platform_ids"
    "   WHERE channel = $3 AND account = $4 AND platform_id = $5)"
    f" AND {_RANK_OF_CURRENT} < $6 RETURNING id, session_id"
)
_STATUS_SESSIONS = (
    "SELECT DISTINCT o.session_id FROM unnest($1::text[], $2::text[], $3::text[])"
    " AS s (channel, account, platform_id) JOIN outbox_platform_ids AS p"
    " USING (channel, account, platform_id) JOIN outbox AS o ON o.id = p.outbox_id"
    " WHERE o.session_id IS NOT NULL"
)


async def park(conn: asyncpg.Connection, session_id: str) -> int:
    """Park the session's pending rows (see ``PARKED_AT``); how many. Their claims end: the
    platform refused the attempt, so its outcome is known."""
    status: str = await conn.execute(
        "UPDATE outbox SET next_attempt_at = $1, error = $2, claimed_by = NULL,"
        " claimed_until = NULL WHERE session_id = $3"
        " AND state = 'pending' AND next_attempt_at < $1",
        PARKED_AT,
        PARKED_ERROR,
        session_id,
    )
    return int(status.split()[-1])


async def unpark(conn: asyncpg.Connection, session_id: str, now: float) -> int:
    """Make the session's parked rows due now, in their order; how many."""
    status: str = await conn.execute(
        "UPDATE outbox SET next_attempt_at = $1, error = NULL WHERE session_id = $2"
        " AND state = 'pending' AND next_attempt_at >= $3",
        now,
        session_id,
        PARKED_AT,
    )
    return int(status.split()[-1])


async def insert(conn: asyncpg.Connection, values: dict[str, Any], now: float) -> OutboxItem:
    """Insert one row of a session that exists; SessionNotFound otherwise.

    ``FOR KEY SHARE`` waits for a concurrent ``delete_session`` of the session: once that
    commits the session is not found, instead of a foreign key error from the INSERT.
    """
    row = await conn.fetchrow(
        "INSERT INTO outbox (session_id, channel, account, chat_id, payload, next_attempt_at,"
        " error, created_at) SELECT $1, $2, $3, $4, $5,"
        " coalesce($7::double precision, $6), $8::text, $6"
        " WHERE EXISTS (SELECT 1 FROM sessions WHERE session_id = $1 FOR KEY SHARE)"
        f" RETURNING {OUTBOX_COLUMNS}",
        values["session_id"],
        values["channel"],
        values["account"],
        values["chat_id"],
        values["payload"],
        now,
        values["due"],
        values["error"],
    )
    if row is None:
        raise SessionNotFound(values["session_id"])
    return to_outbox(row)


async def status_sessions(
    conn: asyncpg.Connection, statuses: Sequence[dict[str, Any]]
) -> list[str]:
    """The sessions whose rows ``statuses`` would move (to lock them before the rows)."""
    if not statuses:
        return []
    rows = await conn.fetch(
        _STATUS_SESSIONS,
        [status["channel"] for status in statuses],
        [status["account"] for status in statuses],
        [status["platform_id"] for status in statuses],
    )
    return [str(row[0]) for row in rows]


async def apply_statuses(
    conn: asyncpg.Connection, statuses: Sequence[dict[str, Any]]
) -> list[tuple[str, dict[str, Any], bool]]:
    """Set ``delivery_state`` of the rows that sent these platform ids; others are ignored.

    Returns ``(session_id, event detail, unreachable)`` of each row that moved, for the
    session's log (``unreachable``: the status says the user cannot be reached).
    One statement per status, in order: a later status of the same row sees the earlier one.
    """
    moved: list[tuple[str, dict[str, Any], bool]] = []
    for status in statuses:
        row = await conn.fetchrow(
            _APPLY_STATUS,
            status["state"],
            status["error"],
            status["channel"],
            status["account"],
            status["platform_id"],
            status["rank"],
        )
        if row is None:
            continue
        again = await _resend(conn, row[0], status) if status["resend_at"] else None
        if row[1] is not None:
            detail: dict[str, Any] = {"outbox_id": row[0], "state": status["state"]}
            if status["state"] == "failed":
                detail["error"] = status["error"] or "delivery failed"
            detail |= {} if again is None else again.detail()
            moved.append((str(row[1]), detail, bool(status["unreachable"])))
    return moved


_RESEND = (
    "UPDATE outbox SET state = 'pending', next_attempt_at = $2,"
    " error = coalesce($3::text, 'delivery failed'), payload = $4, platform_ids = $5,"
    " delivery_state = NULL, sent_at = NULL, claimed_by = NULL, claimed_until = NULL"
    " WHERE id = $1 AND state = 'sent'"
)


async def _resend(
    conn: asyncpg.Connection, outbox_id: int, status: dict[str, Any]
) -> Resend | None:
    """Send a ``sent`` row again from the part that failed (``StatusIn.resend_at``); the
    status's UPDATE already holds the row's lock."""
    row = await conn.fetchrow(
        "SELECT payload, platform_ids, attempts FROM outbox WHERE id = $1 AND state = 'sent'",
        outbox_id,
    )
    if row is None:
        return None
    again = plan(json.loads(row[1]), row[2], status["platform_id"], status["resend_at"])
    if again is None:
        return None
    payload = _set_key(row[0], "skip_parts", again.part)
    error = status["error"]
    await conn.execute(_RESEND, outbox_id, again.due, error, payload, dump_list(again.kept))
    await conn.execute(
        "DELETE FROM outbox_platform_ids WHERE channel = $1 AND account = $2"
        " AND outbox_id = $3 AND platform_id = ANY($4::text[])",
        status["channel"],
        status["account"],
        outbox_id,
        again.dropped,
    )
    return again


# Every transition out of a send attempt ends the row's claim.
_UNCLAIM = "claimed_by = NULL, claimed_until = NULL"


def _free(owner: int, at: int) -> str:
    """A row nobody else is sending: unclaimed, claimed by ``$owner``, or a claim that ran out
    before ``$at`` (the store's clock, the one claims are made by). On the head row of a chat:
    while another owner's claim runs, the whole chat waits behind it."""
    return (
        f"(claimed_by IS NULL OR claimed_by = ${owner} OR claimed_until < ${at} OR NOT EXISTS"
        f" (SELECT 1 FROM leases WHERE leases.owner = outbox.claimed_by AND expires_at >= ${at}))"
    )


async def claim_many(
    conn: asyncpg.Connection, outbox_ids: Sequence[int], owner: str, until: float, now: float
) -> list[int]:
    """Claim each pending row for ``owner`` until ``until`` (unclaimed, its own, or a claim
    that ran out), in one statement: the ids claimed, in the order given. Under READ COMMITTED
    a second claimant waits for the first and re-checks the row as committed, so of two at
    once one gets it; the rows are locked in id order, so they wait instead of deadlocking."""
    rows = await conn.fetch(
        "WITH mine AS (SELECT id FROM outbox WHERE id = ANY($3::bigint[])"
        f" AND state = 'pending' AND {_free(1, 4)} ORDER BY id FOR UPDATE)"
        " UPDATE outbox SET claimed_by = $1, claimed_until = $2 FROM mine"
        f" WHERE outbox.id = mine.id AND outbox.state = 'pending' AND {_free(1, 4)}"
        " RETURNING outbox.id",
        owner,
        until,
        list(outbox_ids),
        now,
    )
    claimed = {row[0] for row in rows}
    return [i for i in outbox_ids if i in claimed]


async def _refusal(conn: asyncpg.Connection, outbox_id: int) -> OutboxNotFound | OutboxNotPending:
    state = await conn.fetchval("SELECT state FROM outbox WHERE id = $1", outbox_id)
    return OutboxNotFound(outbox_id) if state is None else OutboxNotPending(outbox_id, state)


async def _lock_session_of(conn: asyncpg.Connection, outbox_id: int) -> None:
    """Lock the session of the row (if it has one), before the row itself."""
    session_id = await conn.fetchval(
        "SELECT session_id FROM sessions WHERE session_id ="
        " (SELECT session_id FROM outbox WHERE id = $1) FOR NO KEY UPDATE",
        outbox_id,
    )
    if session_id is not None:
        noted_locked((session_id,))


async def sent(
    conn: asyncpg.Connection, outbox_id: int, platform_ids: Sequence[str], now: float
) -> None:
    """Mark a pending row sent, index its platform ids (see ``_index_platform_ids``) and log
    the session's ``status`` event, all in one call of ``gateway_outbox_sent`` (schema 5): the
    session's lock, then one statement. Alone, it needs no transaction around it."""
    row = await conn.fetchrow(
        "SELECT sent_session FROM gateway_outbox_sent($1, $2, $3, $4, $5)",
        outbox_id,
        now,
        dump_list(list(platform_ids)),
        sorted(set(platform_ids)),
        dump_json({"outbox_id": outbox_id, "state": "sent"}),
    )
    if row is None:
        raise await _refusal(conn, outbox_id)
    if row[0] is not None:
        noted_events((str(row[0]),))


async def sent_many(
    conn: asyncpg.Connection, marks: Sequence[tuple[int, Sequence[str]]], now: float
) -> set[int]:
    """``sent`` of each (row id, platform ids) in one call of ``gateway_outbox_sent_many``
    (schema 8); the ids of the rows marked (a row missing or no longer pending is not). The ids
    must be distinct."""
    ids = [outbox_id for outbox_id, _ in marks]
    owned = sorted({(str(p), i) for i, platform_ids in marks for p in platform_ids})
    records = await conn.fetch(
        "SELECT sent_id, sent_session FROM gateway_outbox_sent_many($1, $2, $3, $4, $5, $6)",
        ids,
        now,
        [dump_list(list(platform_ids)) for _, platform_ids in marks],
        [dump_json({"outbox_id": outbox_id, "state": "sent"}) for outbox_id in ids],
        [platform_id for platform_id, _ in owned],
        [outbox_id for _, outbox_id in owned],
    )
    noted_events(str(r[1]) for r in records if r[1] is not None)
    return {int(r[0]) for r in records}


async def refusal(conn: asyncpg.Connection, outbox_id: int) -> OutboxNotFound | OutboxNotPending:
    """Why a write of this row found it missing or not pending."""
    return await _refusal(conn, outbox_id)


async def _locked_pending(conn: asyncpg.Connection, outbox_id: int) -> asyncpg.Record:
    """Lock a pending row for a change of its payload; refuse one missing or not pending."""
    row = await conn.fetchrow(
        "SELECT payload, channel, account FROM outbox WHERE id = $1 AND state = 'pending'"
        " FOR NO KEY UPDATE",
        outbox_id,
    )
    if row is None:
        raise await _refusal(conn, outbox_id)
    return row


def _set_key(payload: str, key: str, value: object) -> str:
    """``payload`` with ``key`` set, as ``dump_json`` writes it (SQLite's json_set does too)."""
    return dump_json({**load_json(payload), key: value})


async def progress(
    conn: asyncpg.Connection, outbox_id: int, skip_parts: int, platform_ids: Sequence[str]
) -> None:
    """Record the parts of a split reply already delivered; the row stays pending."""
    row = await _locked_pending(conn, outbox_id)
    await conn.execute(
        f"UPDATE outbox SET payload = $1, platform_ids = $2, {_UNCLAIM} WHERE id = $3",
        _set_key(row[0], "skip_parts", skip_parts),
        dump_list(list(platform_ids)),
        outbox_id,
    )
    await _index_platform_ids(conn, row[1], row[2], outbox_id, platform_ids)


async def _index_platform_ids(
    conn: asyncpg.Connection,
    channel: str,
    account: str,
    outbox_id: int,
    platform_ids: Sequence[str],
) -> None:
    """Delivery statuses find the row through these (a repeated id moves to the newer row).

    Distinct and sorted: one statement may not upsert a key twice, and two transactions
    upserting the same ids take their locks in the same order.
    """
    ids = sorted(set(platform_ids))
    if not ids:
        return
    await conn.execute(
        "INSERT INTO outbox_platform_ids (channel, account, platform_id, outbox_id)"
        " SELECT $1, $2, platform_id, $3 FROM unnest($4::text[]) AS platform_id"
        ' ORDER BY platform_id COLLATE "C"'
        " ON CONFLICT (channel, account, platform_id) DO UPDATE SET outbox_id = excluded.outbox_id",
        channel,
        account,
        outbox_id,
        ids,
    )


async def retry(
    conn: asyncpg.Connection, outbox_id: int, next_attempt_at: float, error: str
) -> None:
    """Count a failed try; the row stays pending until ``next_attempt_at``."""
    found = await conn.fetchval(
        "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = $1, error = $2,"
        f" {_UNCLAIM} WHERE id = $3 AND state = 'pending' RETURNING id",
        next_attempt_at,
        error,
        outbox_id,
    )
    if found is None:
        raise await _refusal(conn, outbox_id)


async def redirect(conn: asyncpg.Connection, outbox_id: int, chat_id: str, error: str) -> None:
    """Point a pending row at another chat, under its row lock, so it is sent exactly once."""
    row = await _locked_pending(conn, outbox_id)
    await conn.execute(
        "UPDATE outbox SET chat_id = $1, payload = $2, attempts = attempts + 1, error = $3,"
        f" {_UNCLAIM} WHERE id = $4",
        chat_id,
        _set_key(row[0], "chat_id", chat_id),
        error,
        outbox_id,
    )


async def failed(
    conn: asyncpg.Connection, outbox_id: int, error: str, state: str, now: float
) -> None:
    """End a pending row in ``state`` (failed, dead or uncertain), logged as a ``status``."""
    await _lock_session_of(conn, outbox_id)
    row = await conn.fetchrow(
        f"UPDATE outbox SET state = $1, attempts = attempts + 1, error = $2, {_UNCLAIM}"
        " WHERE id = $3 AND state = 'pending' RETURNING session_id",
        state,
        error,
        outbox_id,
    )
    if row is None:
        raise await _refusal(conn, outbox_id)
    if row[0] is not None:
        detail = {"outbox_id": outbox_id, "state": "failed", "error": error, "outcome": state}
        await add_event(conn, row[0], "status", detail, now)


# The oldest pending row of its chat: a newer reply never overtakes one waiting for a retry.
_HEAD_OF_CHAT = (
    "state = 'pending' AND NOT EXISTS (SELECT 1 FROM outbox AS earlier"
    " WHERE earlier.state = 'pending' AND earlier.channel = outbox.channel"
    " AND earlier.account = outbox.account AND earlier.chat_id = outbox.chat_id"
    " AND earlier.id < outbox.id)"
)


async def due(
    conn: asyncpg.Connection, now: float, limit: int, owner: str, at: float
) -> list[OutboxItem]:
    """The oldest pending row of each chat, if due by ``now`` and no other owner's claim on it
    runs at ``at``, in id order."""
    rows = await conn.fetch(
        f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE {_HEAD_OF_CHAT} AND next_attempt_at <= $1"
        f" AND {_free(2, 3)} ORDER BY id LIMIT $4",
        now,
        owner,
        at,
        limit,
    )
    return [to_outbox(row) for row in rows]


async def next_due(conn: asyncpg.Connection, owner: str, at: float) -> float | None:
    """The earliest ``next_attempt_at`` of the rows ``due`` could return (claims as there)."""
    value = await conn.fetchval(
        f"SELECT min(next_attempt_at) FROM outbox WHERE {_HEAD_OF_CHAT} AND {_free(1, 2)}",
        owner,
        at,
    )
    return None if value is None else float(value)


# ``due`` beside ``next_due`` after $3 (the pass's now), both without the channels $5: one row
# with the earliest later time and no row of ``due`` when none is due, else one per due row,
# each with that time.
_OTHER_CHANNELS = "NOT (channel = ANY($5::text[]))"
_NEXT_AFTER = (
    f"SELECT min(next_attempt_at) AS next_due FROM outbox WHERE {_HEAD_OF_CHAT}"
    f" AND next_attempt_at > $3 AND {_free(1, 2)} AND {_OTHER_CHANNELS}"
)
_DUE = (
    f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE {_HEAD_OF_CHAT} AND next_attempt_at <= $3"
    f" AND {_free(1, 2)} AND {_OTHER_CHANNELS} ORDER BY id LIMIT $4"
)
_SCHEDULE = (
    f"SELECT {', '.join('d.' + c for c in OUTBOX_COLUMNS.split(', '))}, n.next_due FROM"
    f" ({_NEXT_AFTER}) AS n LEFT JOIN LATERAL ({_DUE}) AS d ON true ORDER BY d.id"
)


async def schedule(
    conn: asyncpg.Connection,
    now: float,
    limit: int,
    owner: str,
    at: float,
    skip_channels: Sequence[str] = (),
) -> tuple[list[OutboxItem], float | None]:
    """``due`` and the earliest ``next_attempt_at`` after ``now`` of the rows ``due`` could
    return later, in one statement (so one snapshot)."""
    rows = await conn.fetch(_SCHEDULE, owner, at, now, limit, list(skip_channels))
    nxt = rows[0]["next_due"]
    due = [to_outbox(row) for row in rows if row[0] is not None]
    return due, None if nxt is None else float(nxt)


async def of_session(conn: asyncpg.Connection, session_id: str) -> list[OutboxItem]:
    """A session's rows in id order."""
    rows = await conn.fetch(
        f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE session_id = $1 ORDER BY id", session_id
    )
    return [to_outbox(row) for row in rows]


async def list_dead(conn: asyncpg.Connection, limit: int, offset: int) -> list[OutboxItem]:
    """Rows that could not be sent (``failed``: refused for good; ``dead``: out of attempts),
    newest first."""
    rows = await conn.fetch(
        f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE state IN ('failed', 'dead') ORDER BY id DESC"
        " LIMIT $1 OFFSET $2",
        limit,
        offset,
    )
    return [to_outbox(row) for row in rows]


async def purge_sent_chunk(conn: asyncpg.Connection, cutoff: float, chunk_size: int) -> int:
    """Delete up to ``chunk_size`` rows sent before ``cutoff``; return the count.

    No ORDER BY, SKIP LOCKED: as the inbox's purge (the platform ids go with their rows).
    """
    status = await conn.execute(
        "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox"
        " WHERE state = 'sent' AND sent_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
        cutoff,
        chunk_size,
    )
    return int(status.split()[-1])
