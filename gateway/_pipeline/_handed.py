"""Deliveries handed from the webhook path to the intake in memory, after their commit.

The intake reads the store only when it cannot be sure that what it was handed is all that
waits: at start, after an error, at each poll (another process, ``ingest_only`` for one, may
have stored deliveries), and when more were handed than ``bound``. A read that found fewer
than it asked for, with nothing handed meanwhile, is every stored delivery: from there the
hand-offs are taken instead. Their record checks, in its transaction, that no older delivery
is stored (another process's, say); if one is, the intake reads the store again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from webhook_bot_gateway.store import Delivery

BOUND = 1000  # deliveries held at most (then the intake reads them from the store)


class HandedDeliveries:
    """A bounded queue of committed deliveries, valid only while it holds every one waiting."""

    def __init__(self, bound: int = BOUND) -> None:
        self._bound = bound
        self._queue: deque[Delivery] | None = None  # None: read the store
        self._read: frozenset[int] = frozenset()  # ids the last read returned
        self._handoffs = 0  # hand-offs so far: one during a read makes it incomplete

    def hand(self, deliveries: Sequence[Delivery]) -> None:
        """Committed deliveries, oldest first."""
        self._handoffs += 1
        if self._queue is None:
            return  # the next read finds them
        fresh = [d for d in deliveries if d.id not in self._read]
        if len(self._queue) + len(fresh) > self._bound:
            self._queue = None
        else:
            self._queue.extend(fresh)

    def take(self, limit: int) -> list[Delivery] | None:
        """Up to ``limit`` handed deliveries, oldest first; None: read the store instead."""
        if self._queue is None:
            return None
        count = min(limit, len(self._queue))
        return [self._queue.popleft() for _ in range(count)]

    def forget(self) -> None:
        """What was taken may not have been recorded (an error): read the store next."""
        self._queue = None

    def before_read(self) -> int:
        """Forget what is held (the read finds it); a mark for ``after_read``."""
        self._queue = None
        return self._handoffs

    def after_read(self, deliveries: Sequence[Delivery], limit: int, mark: int) -> None:
        """Hold the hand-offs from here if the read found all that waited."""
        if len(deliveries) < limit and self._handoffs == mark:
            self._queue = deque()
            self._read = frozenset(d.id for d in deliveries)
