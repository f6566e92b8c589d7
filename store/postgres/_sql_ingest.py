"""Ingest: claim the dedup keys of a batch and store what is new, in the caller's transaction.

This is the webhook hot path, so a batch costs a fixed number of statements whatever its size:
one claim for all keys and one multi-row INSERT per table.

Several processes may ingest the same delivery at once: the claim is one
``INSERT ... ON CONFLICT`` on the guard's primary key, so a key goes to one transaction only
(the other waits for its commit and then sees the key taken), and only what the claim
returned is stored.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from .._pipeline_rows import DELIVERY_COLUMNS, dump_list, to_delivery
from .._pipeline_types import Delivery, DeliveryIn, IngestResult, QuarantineIn
from . import _sql_dedup as dedup
from ._sql_insert import inserted_ids
from ._sql_quarantine import insert_many as insert_quarantine

Item = DeliveryIn | QuarantineIn

_DELIVERY_COLUMNS = (
    ("channel", "text"),
    ("account", "text"),
    ("body", "bytea"),
    ("keys", "text"),
    ("received_at", "float8"),
)


async def _claim_all(
    conn: asyncpg.Connection, items: Sequence[Item], now: float, cutoff: float
) -> set[str]:
    keys = dict.fromkeys(key for item in items if isinstance(item, DeliveryIn) for key in item.keys)
    if not keys:
        return set()
    return set(await dedup.claim(conn, list(keys), now, cutoff))


async def ingest(
    conn: asyncpg.Connection, items: Sequence[Item], now: float, cutoff: float
) -> list[IngestResult]:
    """Claim every key once; a key new to the store goes to the first item that carries it."""
    unclaimed = await _claim_all(conn, items, now, cutoff)
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
    delivery_ids = iter(await inserted_ids(conn, "deliveries", _DELIVERY_COLUMNS, deliveries))
    quarantine_ids = iter(await insert_quarantine(conn, quarantined))
    results: list[IngestResult] = []
    for item, keys in zip(items, new_keys, strict=True):
        if not isinstance(item, DeliveryIn):
            results.append(IngestResult(None, keys, next(quarantine_ids)))
        else:
            results.append(IngestResult(next(delivery_ids) if keys else None, keys))
    return results


async def unparsed(conn: asyncpg.Connection, limit: int) -> list[Delivery]:
    """Stored deliveries, oldest first.

    Not claimed: two intakes may read the same rows, but ``record`` locks a delivery and
    deletes it, so only one of them applies it (the other finds it gone and skips it).
    """
    rows = await conn.fetch(
        f"SELECT {DELIVERY_COLUMNS} FROM deliveries ORDER BY id LIMIT $1", limit
    )
    return [to_delivery(row) for row in rows]
