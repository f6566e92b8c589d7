"""Insert many rows with one ``executemany`` and still learn their ids."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence


def inserted_ids(
    conn: sqlite3.Connection, table: str, sql: str, rows: Sequence[tuple[object, ...]]
) -> list[int]:
    """``executemany`` the inserts into ``table``; return the new ids in row order.

    ``executemany`` cannot return rows. The caller holds the write lock and ``table`` has an
    AUTOINCREMENT id (always above every id the table ever held, increasing in insertion
    order), so the rows above the old maximum are exactly these, in this order.
    """
    if not rows:
        return []
    before: int = conn.execute(f"SELECT coalesce(max(id), 0) FROM {table}").fetchone()[0]
    conn.executemany(sql, rows)
    found = conn.execute(f"SELECT id FROM {table} WHERE id > ? ORDER BY id", (before,))
    ids = [row[0] for row in found]
    if len(ids) != len(rows):
        raise AssertionError(f"{table}: inserted {len(rows)} rows, found {len(ids)} new ids")
    return ids
