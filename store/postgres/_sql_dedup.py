"""The dedup guard's statements: claim keys atomically, purge expired rows in chunks."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

# A key inserted by a transaction still open makes a concurrent claim of that key wait for it;
# once it commits, the waiter finds the key live and leaves it alone. So each key goes to one
# caller only. Keys go in sorted, so two claims of overlapping keys wait in one order, never
# on each other.
_CLAIM = (
    "INSERT INTO processed_messages (key, seen_at)"
    " SELECT key, $2 FROM unnest($1::text[]) WITH ORDINALITY AS k (key, n) ORDER BY n"
    " ON CONFLICT (key) DO UPDATE SET seen_at = EXCLUDED.seen_at"
    " WHERE processed_messages.seen_at < $3"
    " RETURNING key"
)

# SKIP LOCKED: a row a claim is renewing right now is not expired for long; the outer
# seen_at test is checked again on the row as it is when the DELETE reaches it.
_PURGE = (
    "DELETE FROM processed_messages WHERE key IN ("
    " SELECT key FROM processed_messages WHERE seen_at < $1 ORDER BY seen_at LIMIT $2"
    " FOR UPDATE SKIP LOCKED) AND seen_at < $1"
)


async def claim(
    conn: asyncpg.Connection, keys: Sequence[str], now: float, cutoff: float
) -> set[str]:
    """Claim ``keys``; return those new or expired. One statement, so atomic."""
    distinct = sorted(set(keys))  # one row may be upserted once per statement
    rows = await conn.fetch(_CLAIM, distinct, now, cutoff)
    return {row[0] for row in rows}


async def purge_chunk(conn: asyncpg.Connection, cutoff: float, chunk_size: int) -> int:
    """Delete up to ``chunk_size`` rows seen before ``cutoff``, oldest first; return the count."""
    status = await conn.execute(_PURGE, cutoff, chunk_size)
    return int(status.rsplit(" ", 1)[-1])


async def forget(conn: asyncpg.Connection, prefixes: Sequence[str]) -> None:
    """Delete the keys that begin with one of ``prefixes``.

    A LIKE, not a range of the primary key: under the database's collation the key's order need
    not be the order of its bytes. Erasures and retention passes are rare enough for its scan.
    """
    if prefixes:
        patterns = [_escaped(prefix) + "%" for prefix in prefixes]
        await conn.execute(
            "DELETE FROM processed_messages WHERE key LIKE ANY($1::text[])", patterns
        )


def _escaped(text: str) -> str:
    """``text`` matched literally by LIKE (whose escape character is a backslash)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
