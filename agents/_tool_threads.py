"""Where sync tools run: threads of their own, off the event loop, a bounded number of them.

A sync tool called on the event loop would stop everything else the process does while it runs
(webhook acks, ``/healthz``, other sessions' turns), and the turn's own ``turn_timeout`` could
not fire. So ``Tool.invoke`` hands a sync function to ``TOOL_THREADS`` and awaits its result.

Why not ``asyncio.to_thread``: the loop's default executor is shared with what the gateway
itself hands to threads (aiohttp's and the media downloads' host name lookups, file writes,
exports), so tools that hang would stall those too; and its threads are joined when the
process exits, so one hung tool would keep a stopping gateway alive until it returned.

These are daemon threads: at exit a hung tool is abandoned as a crash would abandon it (its
turn, rolled back, runs again at the next start; see ``ToolContext``).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

# Sync tool calls that run at once in one process; more wait for a thread, first come first
# served. The bound of asyncio's default executor (min(32, cpus + 4)) at its largest: sync
# tools mostly wait on I/O (an HTTP request, a database), not on a CPU.
MAX_TOOL_THREADS = 32

_Job = tuple["Future[Any]", Callable[[], Any]]


class ToolThreads:
    """At most ``size`` daemon threads, started as calls need them and kept for later calls.

    ``submit`` never blocks: a call that finds every thread busy waits in a queue. A queued
    call whose future was cancelled before a thread took it never runs (a turn that timed out
    or was cancelled meanwhile does not start its tool later). A running call cannot be
    stopped: it keeps its thread until its function returns.
    """

    def __init__(self, size: int, name: str = "tool") -> None:
        if size <= 0:
            raise ValueError(f"size must be > 0, got {size}")
        self.size = size
        self._name = name
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = threading.Semaphore(0)  # released by a thread each time it is done
        self._started = 0
        self._busy = 0

    @property
    def started(self) -> int:
        """Threads started so far (never more than ``size``)."""
        return self._started

    @property
    def busy(self) -> int:
        """Calls running now."""
        return self._busy

    def submit(self, function: Callable[[], T]) -> Future[T]:
        """Run ``function()`` in one of the threads; its future has the result or exception."""
        future: Future[T] = Future()
        self._jobs.put((future, function))
        if self._idle.acquire(blocking=False):  # a thread waits for work: it takes this call
            return future
        with self._lock:
            if self._started < self.size:
                self._started += 1
                name = f"{self._name}-{self._started}"
                threading.Thread(target=self._work, name=name, daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            self._run(*self._jobs.get())
            self._idle.release()

    def _run(self, future: Future[Any], function: Callable[[], Any]) -> None:
        if not future.set_running_or_notify_cancel():
            return  # its caller stopped waiting before it started
        with self._lock:
            self._busy += 1
        try:
            future.set_result(function())
        except BaseException as exc:  # handed to the caller, as an executor does
            future.set_exception(exc)
        finally:
            with self._lock:
                self._busy -= 1


TOOL_THREADS = ToolThreads(MAX_TOOL_THREADS)
