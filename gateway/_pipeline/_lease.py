"""This process's lease on the store: renewed while it lives, dropped at a clean stop.

Every running turn carries its store's owner id. Another process takes a session over (marks it
interrupted and runs its pending rows again) only once the owner's lease has run out, so a
rolling deploy never runs one turn twice, and a process killed with SIGKILL loses its sessions
to the others after ``store.lease_seconds`` (docs/deployment.md).
"""

from __future__ import annotations

import asyncio
import logging

from webhook_bot_gateway.store import Store, StoreError

log = logging.getLogger("gateway.lease")


class Lease:
    """Renews ``store``'s lease every third of ``seconds`` until ``stop()``."""

    def __init__(self, store: Store, seconds: float) -> None:
        self._store = store
        self._seconds = seconds
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Take the lease now (before anything can run a turn), then keep renewing it."""
        await self._store.renew_lease(self._seconds)
        self._task = asyncio.create_task(self._renew(), name="store lease")

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self._seconds / 3)
            try:
                await self._store.renew_lease(self._seconds)
            except StoreError as exc:
                # Two more tries before the lease runs out and the others take over.
                log.warning("could not renew the store lease: %s", exc)
            except Exception as exc:
                # Not one the store knows: said at ERROR (its traceback at DEBUG) and tried
                # again, as a loop that ended would let the lease run out, and the others
                # would take this process's sessions over while its turns still run.
                log.error("could not renew the store lease: %s: %s", type(exc).__name__, exc)
                log.debug("the lease renewal raised", exc_info=exc)

    async def stop(self) -> None:
        """Stop renewing and drop the lease: the others may take over at once."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        try:
            await self._store.release_lease()
        except StoreError as exc:
            log.warning("could not release the store lease: %s", exc)
