"""Calls of one write that arrive while an earlier call of it runs go together in the next one.

The first call goes at once (one event-loop turn later, with the calls of that turn); calls
made meanwhile wait for it, then go in one batch: one round trip for many, under load, and
none waits longer than the batch before it. Each call still gets its own outcome.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from .._errors import StoreError

T = TypeVar("T")
R = TypeVar("R")
# Runs a batch; one outcome per item, in order: its result, or the exception its caller gets.
RunMany = Callable[[list[T]], Awaitable[Sequence[R | BaseException]]]


class Batcher(Generic[T, R]):
    """Runs ``run_many`` on the items submitted meanwhile, at most ``max_size`` at a time."""

    def __init__(self, run_many: RunMany[T, R], *, max_size: int) -> None:
        self._run_many = run_many
        self._max_size = max_size
        self._waiting: list[tuple[T, asyncio.Future[R]]] = []
        self._task: asyncio.Task[None] | None = None

    async def submit(self, item: T) -> R:
        """Run ``item`` with the others waiting: what ``run_many`` gave for it."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if self._task is None:
            # A context of its own: the batch is not the first caller's (its log context).
            self._task = asyncio.create_task(self._drain(), context=contextvars.Context())
        return await future

    async def drained(self) -> None:
        """Return once every submitted item has run (before the store closes)."""
        while self._task is not None:
            await asyncio.shield(self._task)

    async def _drain(self) -> None:
        batch: list[tuple[T, asyncio.Future[R]]] = []
        try:
            while self._waiting:
                batch = self._waiting[: self._max_size]
                del self._waiting[: self._max_size]
                outcomes = await self._outcomes([item for item, _ in batch])
                for (_, future), outcome in zip(batch, outcomes, strict=True):
                    _settle(future, outcome)
                batch = []
        finally:
            self._task = None
            stopped = StoreError("the store stopped before this write ran")
            for _, future in [*batch, *self._waiting]:
                _settle(future, stopped)
            self._waiting.clear()

    async def _outcomes(self, items: list[T]) -> Sequence[R | BaseException]:
        try:
            return await self._run_many(items)
        except Exception as exc:  # the batch failed whole: each caller gets the error
            return [exc] * len(items)


def _settle(future: asyncio.Future[R], outcome: R | BaseException) -> None:
    if future.done():  # its caller was cancelled; the write ran (or will) all the same
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
