"""Group commit: webhooks that arrive within a few milliseconds share one store transaction.

One task owns the writes. ``submit`` queues an item and waits; the task takes what is queued
(up to ``max_batch``), calls ``store.ingest`` once, and resolves every waiter with its result or
with the error; when the store refuses an item's input (ValueError, nothing written), each item
is committed alone, so that item's error is its own. Items that queued while a commit ran go
into the next commit at once; only an item that finds the writer idle waits, up to ``window``,
for others to join it. (Waiting the window after every commit cost a fifth of the throughput
under load in bench/ingest.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from webhook_bot_gateway.store import (
    Delivery,
    DeliveryIn,
    IngestResult,
    QuarantineIn,
    Store,
    StoreError,
)

log = logging.getLogger("gateway.writer")

Item = DeliveryIn | QuarantineIn
_Waiting = tuple[Item, "asyncio.Future[IngestResult]"]


class WriterClosed(Exception):
    """The writer is shutting down and takes no more items."""


class GroupCommitWriter:
    """Batches ``submit``-ted items into one ``store.ingest`` call each."""

    def __init__(
        self,
        store: Store,
        *,
        window: float,
        max_batch: int,
        on_delivery: Callable[[Sequence[Delivery]], None] = lambda stored: None,
        on_commit: Callable[[int], None] = lambda size: None,
    ) -> None:
        self._store = store
        self._window = window
        self._max_batch = max_batch
        self._on_delivery = on_delivery  # told the deliveries each commit stored
        self._on_commit = on_commit  # told each committed batch's size (/metrics)
        self._queue: list[_Waiting] = []
        self._ready = asyncio.Event()  # something is queued (or we are closing)
        self._full = asyncio.Event()  # max_batch items are queued
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.batches = 0  # ingest calls made, for tests and the benchmark
        self.items = 0

    def start(self) -> None:
        """Start the writer task."""
        self._task = asyncio.create_task(self._run(), name="group-commit-writer")

    async def aclose(self) -> None:
        """Take no more items, commit what is queued, then stop."""
        self._closing = True
        self._ready.set()
        self._full.set()
        if self._task is not None:
            await self._task

    async def submit(self, item: Item) -> IngestResult:
        """Queue ``item``; return its result once the batch holding it has committed."""
        if self._closing or self._task is None or self._task.done():
            raise WriterClosed("the ingest writer is not running")
        future: asyncio.Future[IngestResult] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        self._ready.set()
        if len(self._queue) >= self._max_batch:
            self._full.set()
        return await future

    async def _run(self) -> None:
        try:
            await self._loop()
        finally:
            for _, future in self._queue:  # only left when the task was cancelled
                future.cancel()
            self._queue.clear()

    async def _loop(self) -> None:
        while True:
            if self._queue:
                # Items that queued while the last commit ran have had their company: no wait.
                await self._commit(self._take())
                continue
            if self._closing:
                return
            self._ready.clear()
            await self._ready.wait()
            await self._gather()

    async def _gather(self) -> None:
        """The writer was idle: let the first item wait up to the window for company."""
        if self._window <= 0 or self._closing or len(self._queue) >= self._max_batch:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._window):
                await self._full.wait()

    def _take(self) -> list[_Waiting]:
        batch = self._queue[: self._max_batch]
        del self._queue[: self._max_batch]
        if len(self._queue) < self._max_batch and not self._closing:
            self._full.clear()
        return batch

    async def _commit(self, batch: Sequence[_Waiting]) -> None:
        try:
            results = await self._store.ingest([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"store.ingest gave {len(results)} results for {len(batch)}")
        except ValueError as exc:
            if len(batch) == 1:
                self._failed(batch, exc)
                return
            # An item the store refuses (nothing of the call was written) fails itself only:
            # each is committed alone, the others as they would have been.
            for waiting in batch:
                await self._commit([waiting])
            return
        except Exception as exc:
            self._failed(batch, exc)
            return
        except BaseException:
            for _, future in batch:
                future.cancel()
            raise
        self.batches += 1
        self.items += len(batch)
        self._on_commit(len(batch))
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
        stored = _stored(batch, results)
        if stored:
            self._on_delivery(stored)

    @staticmethod
    def _failed(batch: Sequence[_Waiting], exc: Exception) -> None:
        # The store's own errors say why in words of its own (the reason a server gave, never a
        # row's data); anything else is named by its type, as its text may quote a body.
        why = f"{type(exc).__name__}: {exc}"[:300] if isinstance(exc, StoreError) else None
        log.warning("ingest of %d item(s) failed: %s", len(batch), why or type(exc).__name__)
        for _, future in batch:
            if not future.done():
                future.set_exception(exc)


def _stored(batch: Sequence[_Waiting], results: Sequence[IngestResult]) -> list[Delivery]:
    """The deliveries a commit stored, as the intake would read them back."""
    now = datetime.now(UTC)  # the intake does not use it; the stored row has the store's
    return [
        Delivery(result.delivery_id, item.channel, item.account, item.body, result.new_keys, now)
        for (item, _), result in zip(batch, results, strict=True)
        if result.delivery_id is not None and isinstance(item, DeliveryIn)
    ]
