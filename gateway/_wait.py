"""Waiting on an event or a deadline, whichever comes first: the pipeline tasks' only pause;
and ``Later``, a call put off by a grace."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

OTHERS_GRACE = 1.0  # seconds another live process gets to answer, send and fetch what it wrote


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` pass; True when it was set."""
    if event.is_set():
        return True
    if seconds <= 0:
        return False
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True


class Later:
    """Calls ``callback`` ``delay`` seconds after the first call since it last ran: however many
    calls come meanwhile, one runs. Another process's new rows are its own to handle; woken at
    once, this process would read them too and race it for each turn and each claim, so it
    looks only at what still waits after the grace (a process that died, a CLI that wrote)."""

    def __init__(self, callback: Callable[[], None], delay: float = OTHERS_GRACE) -> None:
        self._callback = callback
        self._delay = delay
        self._handle: asyncio.TimerHandle | None = None

    def __call__(self) -> None:
        if self._handle is None:
            self._handle = asyncio.get_running_loop().call_later(self._delay, self._run)

    def _run(self) -> None:
        self._handle = None
        self._callback()
