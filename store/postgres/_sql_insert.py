"""Insert many rows with one statement and learn their ids in row order."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import asyncpg


@lru_cache(maxsize=16)
def _insert_sql(table: str, columns: tuple[str, ...], types: tuple[str, ...]) -> str:
    names = ", ".join(columns)
    arrays = ", ".join(f"${i}::{kind}[]" for i, kind in enumerate(types, start=1))
    return (
        f"INSERT INTO {table} ({names}) SELECT {names}"
        f" FROM unnest({arrays}) WITH ORDINALITY AS given ({names}, ord) ORDER BY ord"
        " RETURNING id"
    )


async def inserted_ids(
    conn: asyncpg.Connection,
    table: str,
    columns: Sequence[tuple[str, str]],
    rows: Sequence[tuple[object, ...]],
) -> list[int]:
    """Insert ``rows`` (values of ``columns``, pairs of name and SQL type); their new ids.

    RETURNING does not promise an order, but the identity's sequence is drawn as the rows
    are inserted, which ``ORDER BY ord`` makes the input order: the sorted ids are the rows'.
    """
    if not rows:
        return []
    sql = _insert_sql(table, tuple(c[0] for c in columns), tuple(c[1] for c in columns))
    found = await conn.fetch(sql, *(list(values) for values in zip(*rows, strict=True)))
    ids = sorted(int(row[0]) for row in found)
    if len(ids) != len(rows):
        raise AssertionError(f"{table}: inserted {len(rows)} rows, got {len(ids)} ids")
    return ids
