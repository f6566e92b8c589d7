"""The background purge: expired dedup rows and finished pipeline rows, in small chunks."""

from __future__ import annotations

import asyncio
import logging

from store import Store, StoreError

from ._wait import wait_event

log = logging.getLogger("gateway.purge")

CHUNK = 1000  # rows per transaction: a purge never holds the write lock long enough to stall


class Purger:
    """Every ``interval`` seconds: ``store.purge()`` and ``store.purge_finished(keep)``."""

    def __init__(self, store: Store, *, interval: float, keep_seconds: float) -> None:
        self._store = store
        self._interval = interval
        self._keep = keep_seconds  # done inbox and sent outbox rows are kept this long
        self._stop = asyncio.Event()

    async def run(self) -> None:
        """Purge at once, then every interval, until ``stop()``."""
        while not self._stop.is_set():
            await self.purge_once()
            await wait_event(self._stop, self._interval)

    def stop(self) -> None:
        self._stop.set()

    async def purge_once(self) -> tuple[int, int]:
        """One purge; returns (dedup rows, finished rows) deleted. Store errors are logged."""
        try:
            expired = await self._store.purge(CHUNK)
            finished = await self._store.purge_finished(self._keep, CHUNK)
        except StoreError as exc:
            log.warning("purge failed, will try again: %s", exc)
            return 0, 0
        if expired or finished:
            log.info("purged %d expired dedup row(s), %d finished row(s)", expired, finished)
        return expired, finished
