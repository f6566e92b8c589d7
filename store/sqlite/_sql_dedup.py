"""The dedup guard's statements: claim keys atomically, purge expired rows in chunks."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from functools import lru_cache

# Keys per statement: with the two shared parameters this stays under 999, the variable limit
# of SQLite builds older than 3.32, so a big claim is a few statements in one transaction.
CLAIM_BATCH = 900


@lru_cache(maxsize=64)
def claim_sql(count: int) -> str:
    """The claim statement for ``count`` keys: ``?1`` = now, ``?2`` = expiry cutoff.

    A new key is inserted; a key seen before the cutoff (expired) gets ``seen_at`` = now and is
    claimed again; a live key is left alone and not returned. One statement, so atomic.
    """
    values = ", ".join(f"(?{i + 3}, ?1)" for i in range(count))
    return (
        f"INSERT INTO processed_messages (key, seen_at) VALUES {values}"
        " ON CONFLICT (key) DO UPDATE SET seen_at = excluded.seen_at"
        " WHERE processed_messages.seen_at < ?2"
        " RETURNING key"
    )


def claim(conn: sqlite3.Connection, keys: Sequence[str], now: float, cutoff: float) -> set[str]:
    """Claim distinct ``keys``; return those new or expired."""
    won: set[str] = set()
    for start in range(0, len(keys), CLAIM_BATCH):
        batch = keys[start : start + CLAIM_BATCH]
        rows = conn.execute(claim_sql(len(batch)), (now, cutoff, *batch)).fetchall()
        won.update(row[0] for row in rows)
    return won


def purge_chunk(conn: sqlite3.Connection, cutoff: float, chunk_size: int) -> int:
    """Delete up to ``chunk_size`` rows seen before ``cutoff``, oldest first; return the count."""
    cursor = conn.execute(
        "DELETE FROM processed_messages WHERE key IN ("
        " SELECT key FROM processed_messages WHERE seen_at < ? ORDER BY seen_at LIMIT ?)",
        (cutoff, chunk_size),
    )
    return cursor.rowcount


def forget(conn: sqlite3.Connection, prefixes: Sequence[str]) -> int:
    """Delete the keys that begin with one of ``prefixes``; return the count. Each is a range
    of the primary key (its BINARY order is the order of the bytes)."""
    deleted = 0
    for prefix in prefixes:
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)  # the first string past every match
        cursor = conn.execute(
            "DELETE FROM processed_messages WHERE key >= ? AND key < ?", (prefix, end)
        )
        deleted += cursor.rowcount
    return deleted
