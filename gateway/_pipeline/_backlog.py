"""The backlog: messages acknowledged and not yet answered, and the two bounds that keep it small.

The backlog is what the store holds for later: stored deliveries not yet parsed plus pending
inbox rows. Past ``ingest.backlog_ready`` /readyz answers 503 (a load balancer sends traffic
elsewhere); at ``ingest.backlog_refuse`` new webhook deliveries get 503 before anything is
stored, so the platforms retry later. Acknowledgements go on in between: the inbox is durable.

How the count is kept: the store is the truth (the inbox is durable, and another process such
as ``gateway quarantine replay`` may add to it), so ``sync`` reads it with one cheap count query
(``store.backlog_count``) every ``SYNC_SECONDS`` and whenever /readyz asks. Between two reads,
the deliveries this process stored are added in memory, so a flood cannot run past the refuse
bound within one interval; what was answered meanwhile is only seen at the next read. Each read
replaces the estimate, so an error can never outlive one interval (it cannot drift), and the
estimate errs high: a delivery committed just as a read began may be counted twice, until the
next read. Deliveries waiting for their commit (``in_flight``) count toward the refuse bound too,
which bounds the group-commit writer's queue by ``backlog_refuse``.

The store can also answer reads and refuse writes (locked by another process past the busy
timeout, read-only, the disk full): a delivery it could not record sets ``writes_failing``,
and /readyz then answers 503 until a write succeeds again (a delivery, or its own probe).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from webhook_bot_gateway.store import Store

from .._wait import wait_event

log = logging.getLogger("gateway.backlog")

SYNC_SECONDS = 1.0  # how often the count is read from the store


class Backlog:
    """The backlog's estimate, its bounds, and the task that re-reads it from the store."""

    def __init__(self, store: Store, *, ready: int, refuse: int) -> None:
        self._store = store
        self.ready_bound = ready
        self.refuse_bound = refuse
        self._stored = 0  # the last count read from the store
        self._accepted = 0  # deliveries this process stored, ever
        self._base = 0  # ``_accepted`` when the last read began
        self.in_flight = 0  # deliveries submitted to the writer, not committed yet
        self.writes_failing = False  # the last delivery could not be recorded
        self._failing = False
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def count(self) -> int:
        """The estimate: the last count read, plus what this process stored since."""
        return self._stored + self._accepted - self._base

    @property
    def stored(self) -> int:
        """The count last read from the store (without what this process stored since)."""
        return self._stored

    @property
    def ready(self) -> bool:
        """False while the backlog is past ``backlog_ready``."""
        return self.count <= self.ready_bound

    def full(self) -> bool:
        """True when one more delivery would take the backlog past ``backlog_refuse``."""
        return self.count + self.in_flight >= self.refuse_bound

    def submitted(self) -> None:
        """A delivery goes to the writer (call ``settled`` once it has an answer)."""
        self.in_flight += 1

    def settled(self, *, stored: bool, failed: bool = False) -> None:
        """The writer answered; ``stored``: a delivery row was written; ``failed``: the store
        refused the write (``writes_failing`` until a write succeeds)."""
        self.in_flight -= 1
        self.writes_failing = failed
        if stored:
            self._accepted += 1

    async def sync(self) -> int:
        """Read the count from the store (raises what the store raises); return the estimate."""
        base = self._accepted
        stored = await self._store.backlog_count()
        self._stored, self._base = stored, base
        return self.count

    def start(self) -> None:
        """Start re-reading the count every ``SYNC_SECONDS``."""
        self._task = asyncio.create_task(self._run(SYNC_SECONDS), name="backlog")

    async def aclose(self) -> None:
        """Stop the task."""
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self, interval: float) -> None:
        while not await wait_event(self._stop, interval):
            try:
                await self.sync()
            except Exception as exc:  # the store is down: keep the estimate, /readyz says so
                if not self._failing:
                    log.warning("backlog count failed: %s", type(exc).__name__)
                self._failing = True
            else:
                self._failing = False
