"""Outbox statements: replies to send, and what became of them."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from .._errors import OutboxNotFound, OutboxNotPending, SessionNotFound
from .._pipeline_rows import OUTBOX_COLUMNS, STATUS_RANK, dump_list, to_outbox
from .._pipeline_types import PARKED_AT, PARKED_ERROR, OutboxItem
from .._resend import Resend, plan
from ._sql_sessions import add_event

_RANK_OF_CURRENT = (
    "CASE delivery_state "
    + " ".join(f"WHEN '{state}' THEN {rank}" for state, rank in STATUS_RANK.items())
    + " ELSE 0 END"
)
_APPLY_STATUS = (
    "UPDATE outbox SET delivery_state = :state,"
    " error = CASE WHEN :state = 'failed' THEN coalesce(:error, 'delivery failed') ELSE error END"
    " WHERE id = (SELECT outbox_id FROM outbox_platform_ids"
    "   WHERE channel = :channel AND account = :account AND platform_id = :platform_id)"
    f" AND {_RANK_OF_CURRENT} < :rank RETURNING id, session_id"
)


# Every way out of a send attempt ends the sender's claim on the row (see ``claim``).
_UNCLAIMED = "claimed_by = NULL, claimed_until = NULL"

# A row nobody else is sending: unclaimed, claimed by this store, or its claim has run out, or
# its claimer's lease has (a process killed mid-send: its sends go on elsewhere at once).
_FREE = (
    "(claimed_by IS NULL OR claimed_by = :owner OR claimed_until < :at OR NOT EXISTS"
    " (SELECT 1 FROM leases WHERE leases.owner = outbox.claimed_by AND expires_at >= :at))"
)


def insert(conn: sqlite3.Connection, values: dict[str, Any], now: float) -> OutboxItem:
    """Insert one row of a session that exists; SessionNotFound otherwise."""
    row = conn.execute(
        "INSERT INTO outbox (session_id, channel, account, chat_id, payload, next_attempt_at,"
        " error, created_at) SELECT :session_id, :channel, :account, :chat_id, :payload,"
        " coalesce(:due, :now), :error, :now"
        " WHERE EXISTS (SELECT 1 FROM sessions WHERE session_id = :session_id)"
        f" RETURNING {OUTBOX_COLUMNS}",
        {**values, "now": now},
    ).fetchone()
    if row is None:
        raise SessionNotFound(values["session_id"])
    return to_outbox(row)


def apply_statuses(
    conn: sqlite3.Connection, statuses: Sequence[dict[str, Any]]
) -> list[tuple[str, dict[str, Any], bool]]:
    """Set ``delivery_state`` of the rows that sent these platform ids; others are ignored.

    Returns ``(session_id, event detail, unreachable)`` of each row that moved, for the
    session's log (``unreachable``: the status says the user cannot be reached).
    """
    moved: list[tuple[str, dict[str, Any], bool]] = []
    for status in statuses:
        row = conn.execute(_APPLY_STATUS, status).fetchone()
        if row is None:
            continue
        again = _resend(conn, row[0], status) if status["resend_at"] else None
        if row[1] is not None:
            detail: dict[str, Any] = {"outbox_id": row[0], "state": status["state"]}
            if status["state"] == "failed":
                detail["error"] = status["error"] or "delivery failed"
            detail |= {} if again is None else again.detail()
            moved.append((row[1], detail, bool(status["unreachable"])))
    return moved


_RESEND = (
    "UPDATE outbox SET state = 'pending', next_attempt_at = :due,"
    " error = coalesce(:error, 'delivery failed'),"
    " payload = json_set(payload, '$.skip_parts', :part), platform_ids = :kept,"
    f" delivery_state = NULL, sent_at = NULL, {_UNCLAIMED}"
    " WHERE id = :id AND state = 'sent'"
)


def _resend(conn: sqlite3.Connection, outbox_id: int, status: dict[str, Any]) -> Resend | None:
    """Send a ``sent`` row again from the part that failed (``StatusIn.resend_at``)."""
    row = conn.execute(
        "SELECT platform_ids, attempts FROM outbox WHERE id = ? AND state = 'sent'", (outbox_id,)
    ).fetchone()
    if row is None:
        return None
    again = plan(json.loads(row[0]), row[1], status["platform_id"], status["resend_at"])
    if again is None:
        return None
    values = {"id": outbox_id, "due": again.due, "part": again.part, "error": status["error"]}
    conn.execute(_RESEND, values | {"kept": dump_list(again.kept)})
    conn.execute(
        "DELETE FROM outbox_platform_ids WHERE channel = ? AND account = ? AND outbox_id = ?"
        " AND platform_id IN (SELECT value FROM json_each(?))",
        (status["channel"], status["account"], outbox_id, dump_list(again.dropped)),
    )
    return again


def _refusal(conn: sqlite3.Connection, outbox_id: int) -> OutboxNotFound | OutboxNotPending:
    row = conn.execute("SELECT state FROM outbox WHERE id = ?", (outbox_id,)).fetchone()
    return OutboxNotFound(outbox_id) if row is None else OutboxNotPending(outbox_id, row[0])


def sent(conn: sqlite3.Connection, outbox_id: int, platform_ids: Sequence[str], now: float) -> None:
    """Mark a pending row sent: one UPDATE, then the id lookup rows."""
    row = conn.execute(
        "UPDATE outbox SET state = 'sent', sent_at = ?, platform_ids = ?,"
        f" attempts = attempts + 1, error = NULL, {_UNCLAIMED}"
        " WHERE id = ? AND state = 'pending' RETURNING channel, account, session_id",
        (now, dump_list(list(platform_ids)), outbox_id),
    ).fetchone()
    if row is None:
        raise _refusal(conn, outbox_id)
    _index_platform_ids(conn, row[0], row[1], outbox_id, platform_ids)
    if row[2] is not None:
        add_event(conn, row[2], "status", {"outbox_id": outbox_id, "state": "sent"}, now)


def progress(
    conn: sqlite3.Connection, outbox_id: int, skip_parts: int, platform_ids: Sequence[str]
) -> None:
    """Record the parts of a split reply already delivered; the row stays pending."""
    row = conn.execute(
        "UPDATE outbox SET payload = json_set(payload, '$.skip_parts', ?), platform_ids = ?,"
        f" {_UNCLAIMED} WHERE id = ? AND state = 'pending' RETURNING channel, account",
        (skip_parts, dump_list(list(platform_ids)), outbox_id),
    ).fetchone()
    if row is None:
        raise _refusal(conn, outbox_id)
    _index_platform_ids(conn, row[0], row[1], outbox_id, platform_ids)


def _index_platform_ids(
    conn: sqlite3.Connection,
    channel: str,
    account: str,
    outbox_id: int,
    platform_ids: Sequence[str],
) -> None:
    """Delivery statuses find the row through these (a repeated id moves to the newer row)."""
    conn.executemany(
        "INSERT INTO outbox_platform_ids (channel, account, platform_id, outbox_id)"
        " VALUES (?, ?, ?, ?) ON CONFLICT (channel, account, platform_id)"
        " DO UPDATE SET outbox_id = excluded.outbox_id",
        [(channel, account, platform_id, outbox_id) for platform_id in platform_ids],
    )


def retry(conn: sqlite3.Connection, outbox_id: int, next_attempt_at: float, error: str) -> None:
    """Count a failed try; the row stays pending until ``next_attempt_at``."""
    cursor = conn.execute(
        f"UPDATE outbox SET attempts = attempts + 1, next_attempt_at = ?, error = ?, {_UNCLAIMED}"
        " WHERE id = ? AND state = 'pending'",
        (next_attempt_at, error, outbox_id),
    )
    if cursor.rowcount == 0:
        raise _refusal(conn, outbox_id)


def redirect(conn: sqlite3.Connection, outbox_id: int, chat_id: str, error: str) -> None:
    """Point a pending row at another chat, in one statement, so it is sent exactly once."""
    cursor = conn.execute(
        "UPDATE outbox SET chat_id = ?, payload = json_set(payload, '$.chat_id', ?),"
        f" attempts = attempts + 1, error = ?, {_UNCLAIMED} WHERE id = ? AND state = 'pending'",
        (chat_id, chat_id, error, outbox_id),
    )
    if cursor.rowcount == 0:
        raise _refusal(conn, outbox_id)


def failed(conn: sqlite3.Connection, outbox_id: int, error: str, state: str, now: float) -> None:
    """End a pending row in ``state`` (failed, dead or uncertain), logged as a ``status``."""
    row = conn.execute(
        f"UPDATE outbox SET state = ?, attempts = attempts + 1, error = ?, {_UNCLAIMED}"
        " WHERE id = ? AND state = 'pending' RETURNING session_id",
        (state, error, outbox_id),
    ).fetchone()
    if row is None:
        raise _refusal(conn, outbox_id)
    if row[0] is not None:
        detail = {"outbox_id": outbox_id, "state": "failed", "error": error, "outcome": state}
        add_event(conn, row[0], "status", detail, now)


# The oldest pending row of its chat: a newer reply never overtakes one waiting for a retry.
_HEAD_OF_CHAT = (
    "state = 'pending' AND NOT EXISTS (SELECT 1 FROM outbox AS earlier"
    " WHERE earlier.state = 'pending' AND earlier.channel = outbox.channel"
    " AND earlier.account = outbox.account AND earlier.chat_id = outbox.chat_id"
    " AND earlier.id < outbox.id)"
)


def claim(conn: sqlite3.Connection, outbox_id: int, owner: str, until: float, now: float) -> bool:
    """Claim a pending row for ``owner`` until ``until``; False if it is not pending or
    another owner's claim runs until ``now`` or later. One UPDATE by primary key."""
    cursor = conn.execute(
        "UPDATE outbox SET claimed_by = :owner, claimed_until = :until"
        f" WHERE id = :id AND state = 'pending' AND {_FREE}",
        {"owner": owner, "until": until, "id": outbox_id, "at": now},
    )
    return cursor.rowcount > 0


def claim_many(
    conn: sqlite3.Connection, outbox_ids: Sequence[int], owner: str, until: float, now: float
) -> list[int]:
    """``claim`` of each row in turn: the ids claimed."""
    return [i for i in outbox_ids if claim(conn, i, owner, until, now)]


def due(
    conn: sqlite3.Connection,
    now: float,
    limit: int,
    owner: str,
    at: float,
    skip_channels: Sequence[str] = (),
) -> list[OutboxItem]:
    """The oldest pending row of each chat, if due by ``now``, in id order; none of the
    channels ``skip_channels``.

    A chat whose oldest pending row another owner has claimed (a claim running until ``at``,
    the store's clock, or later) is left out: that sender has it, and the rest of the chat
    waits behind it. The claim is a filter on the head row itself, after the same index walk.
    """
    rows = conn.execute(
        f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE {_HEAD_OF_CHAT} AND next_attempt_at <= :now"
        f" AND {_FREE}{_other_channels(skip_channels)} ORDER BY id LIMIT :limit",
        {"now": now, "limit": limit, "owner": owner, "at": at, "skip": _skip(skip_channels)},
    ).fetchall()
    return [to_outbox(row) for row in rows]


def next_due(
    conn: sqlite3.Connection,
    owner: str,
    at: float,
    after: float | None = None,
    skip_channels: Sequence[str] = (),
) -> float | None:
    """The earliest ``next_attempt_at`` of the rows ``due`` could return (claims as there);
    with ``after``, the earliest later than it."""
    later = "" if after is None else " AND next_attempt_at > :after"
    value: float | None = conn.execute(
        f"SELECT min(next_attempt_at) FROM outbox WHERE {_HEAD_OF_CHAT} AND {_FREE}{later}"
        f"{_other_channels(skip_channels)}",
        {"owner": owner, "at": at, "after": after, "skip": _skip(skip_channels)},
    ).fetchone()[0]
    return value


def _skip(skip_channels: Sequence[str]) -> str | None:
    return dump_list([*skip_channels]) if skip_channels else None


def _other_channels(skip_channels: Sequence[str]) -> str:
    """The clause leaving out ``skip_channels`` (none when there is none: the usual pass)."""
    return " AND channel NOT IN (SELECT value FROM json_each(:skip))" if skip_channels else ""


def park(conn: sqlite3.Connection, session_id: str) -> int:
    """Park the session's pending rows (see ``PARKED_AT``); how many. Their claims end: the
    platform refused the attempt, so its outcome is known."""
    return conn.execute(
        "UPDATE outbox SET next_attempt_at = ?, error = ?, claimed_by = NULL,"
        " claimed_until = NULL WHERE session_id = ?"
        " AND state = 'pending' AND next_attempt_at < ?",
        (PARKED_AT, PARKED_ERROR, session_id, PARKED_AT),
    ).rowcount


def unpark(conn: sqlite3.Connection, session_id: str, now: float) -> int:
    """Make the session's parked rows due now, in their order; how many."""
    return conn.execute(
        "UPDATE outbox SET next_attempt_at = ?, error = NULL WHERE session_id = ?"
        " AND state = 'pending' AND next_attempt_at >= ?",
        (now, session_id, PARKED_AT),
    ).rowcount


def of_session(conn: sqlite3.Connection, session_id: str) -> list[OutboxItem]:
    """A session's rows in id order."""
    rows = conn.execute(
        f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE session_id = ? ORDER BY id", (session_id,)
    ).fetchall()
    return [to_outbox(row) for row in rows]


def list_dead(conn: sqlite3.Connection, limit: int, offset: int) -> list[OutboxItem]:
    """Rows that could not be sent (``failed``: refused for good; ``dead``: out of attempts),
    newest first."""
    rows = conn.execute(
        f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE state IN ('failed', 'dead') ORDER BY id DESC"
        " LIMIT ? OFFSET ?",
        (limit, offset),
    ).fetchall()
    return [to_outbox(row) for row in rows]


def purge_sent_chunk(conn: sqlite3.Connection, cutoff: float, chunk_size: int) -> int:
    """Delete up to ``chunk_size`` rows sent before ``cutoff``; return the count.

    No ORDER BY: the scan walks index ``outbox_due`` and stops at the limit (see inbox).
    """
    cursor = conn.execute(
        "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox"
        " WHERE state = 'sent' AND sent_at < ? LIMIT ?)",
        (cutoff, chunk_size),
    )
    return cursor.rowcount
