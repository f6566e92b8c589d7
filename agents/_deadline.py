"""The running turn's deadline, for a backend that should not wait past it (a retry's wait)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_DEADLINE: ContextVar[float | None] = ContextVar("turn_deadline", default=None)


@contextmanager
def turn_deadline(seconds: float | None) -> Iterator[None]:
    """Within this block (and the tasks it starts), ``time_left`` counts down ``seconds``."""
    deadline = None if seconds is None else asyncio.get_running_loop().time() + seconds
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def time_left() -> float | None:
    """Seconds until the running turn times out; None outside a turn or without a timeout."""
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline - asyncio.get_running_loop().time()
