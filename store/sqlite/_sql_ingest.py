"""Ingest: claim the dedup keys of a batch and store what is new, in the caller's transaction.

This is the webhook hot path, so a batch costs a fixed number of statements whatever its size:
one claim for all keys (chunked only past 900 keys) and one ``executemany`` per table.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .._pipeline_rows import DELIVERY_COLUMNS, dump_list, to_delivery
from .._pipeline_types import Delivery, DeliveryIn, IngestResult, QuarantineIn
from . import _sql_dedup as dedup
from ._sql_insert import inserted_ids
from ._sql_quarantine import insert_many as insert_quarantine

Item = DeliveryIn | QuarantineIn

_INSERT_DELIVERY = (
    "INSERT INTO deliveries (channel, account, body, keys, received_at) VALUES (?, ?, ?, ?, ?)"
)


def _claim_all(
    conn: sqlite3.Connection, items: Sequence[Item], now: float, cutoff: float
) -> set[str]:
    keys = dict.fromkeys(key for item in items if isinstance(item, DeliveryIn) for key in item.keys)
    return dedup.claim(conn, list(keys), now, cutoff) if keys else set()


def ingest(
    conn: sqlite3.Connection, items: Sequence[Item], now: float, cutoff: float
) -> list[IngestResult]:
    """Claim every key once; a key new to the store goes to the first item that carries it."""
    unclaimed = _claim_all(conn, items, now, cutoff)
    new_keys: list[frozenset[str]] = []
    deliveries: list[tuple[object, ...]] = []
    quarantined: list[tuple[object, ...]] = []
    for item in items:
        if isinstance(item, DeliveryIn):
            won = [key for key in dict.fromkeys(item.keys) if key in unclaimed]
            unclaimed.difference_update(won)
            new_keys.append(frozenset(won))
            if won:
                deliveries.append((item.channel, item.account, item.body, dump_list(won), now))
        else:
            new_keys.append(frozenset())
            quarantined.append((item.channel, item.account, item.body, item.reason, now))
    delivery_ids = iter(inserted_ids(conn, "deliveries", _INSERT_DELIVERY, deliveries))
    quarantine_ids = iter(insert_quarantine(conn, quarantined))
    results: list[IngestResult] = []
    for item, keys in zip(items, new_keys, strict=True):
        if not isinstance(item, DeliveryIn):
            results.append(IngestResult(None, keys, next(quarantine_ids)))
        else:
            results.append(IngestResult(next(delivery_ids) if keys else None, keys))
    return results


def unparsed(conn: sqlite3.Connection, limit: int) -> list[Delivery]:
    """Stored deliveries, oldest first."""
    rows = conn.execute(
        f"SELECT {DELIVERY_COLUMNS} FROM deliveries ORDER BY id LIMIT ?", (limit,)
    ).fetchall()
    return [to_delivery(row) for row in rows]
