"""Acknowledgements first: the pipeline slows down while webhook acks are slow.

Acks and the pipeline (intake, turns, sends) share one event loop, and asyncio runs whatever is
ready in arrival order: a busy pipeline makes every ack wait behind its callbacks. The pacer
watches the acks (``acked``, from the webhook handler) in windows of ``WINDOW`` seconds and
paces where new work enters the pipeline: the intake asks ``admit(n)`` before it parses ``n``
stored deliveries. While the mean ack time of a window is over ``target``, the admitted rate
is cut to ``CUT`` times what was admitted; while acks are fast it grows by ``GROWTH`` per window;
a window without acks lifts the limit. The deliveries wait durably in the store meanwhile (the
backlog's bounds still apply), so nothing is lost, only answered later; a floor keeps the
pipeline moving under any flood.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

WINDOW = 0.05  # seconds of acks judged together
CUT = 0.7  # the admitted rate after a window of slow acks, times the rate admitted in it
GROWTH = 1.15  # the limit's growth after a window of fast acks
FLOOR = 20.0  # deliveries per second admitted however slow the acks
SHARE = 0.5  # ... and at least this share of the rate admitted while unpaced
QUIET = 0.5  # seconds without an ack that lift the limit
SMOOTHING = 0.1
EPSILON = 1e-6  # tokens: what float rounding may leave missing
MIN_WAIT = 0.001  # seconds: the shortest wait for the bucket to fill  # weight of a window in the unpaced rate's moving average


class AckPacer:
    """Limits the rate of new pipeline work while acks take longer than ``target`` seconds."""

    def __init__(
        self,
        target: float,
        *,
        overloaded: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._target = target
        self._overloaded = overloaded
        self._clock = clock
        self._sleep = sleep
        self.rate: float | None = None  # deliveries per second admitted; None: no limit
        self._start = clock()  # the current window's
        self._ack_sum = 0.0
        self._acks = 0
        self._admitted = 0
        self._last_ack = -QUIET
        self._tokens = 0.0
        self._filled = self._start
        self.unpaced_rate = 0.0  # moving average over unpaced windows that admitted work
        self.windows_paced = 0  # windows that ended with a limit (for tests and /metrics)

    def acked(self, seconds: float) -> None:
        """One webhook was acknowledged after ``seconds`` in the handler."""
        if self._target <= 0:
            return  # pacing is off
        self._ack_sum += seconds
        self._acks += 1
        self._last_ack = self._clock()
        self._roll()

    async def admit(self, units: int) -> None:
        """Wait until ``units`` deliveries may enter the pipeline."""
        self._roll()
        while self.rate is not None and not self._overloaded():
            self._refill()
            # A chunk larger than the bucket goes once the bucket is full (it runs into debt).
            if self._tokens >= min(units, self.rate * WINDOW) - EPSILON:
                self._tokens -= units
                break
            wait = min(max((units - self._tokens) / self.rate, MIN_WAIT), WINDOW)
            await self._sleep(wait)
            self._roll()
        self._admitted += units

    def _refill(self) -> None:
        now = self._clock()
        assert self.rate is not None
        cap = max(self.rate * WINDOW, 1.0)
        self._tokens = min(self._tokens + (now - self._filled) * self.rate, cap)
        self._filled = now

    def _roll(self) -> None:
        """Close the window if it is over, and set the limit for the next one."""
        now = self._clock()
        elapsed = now - self._start
        if elapsed < WINDOW:
            return
        admitted_rate = self._admitted / elapsed
        was_paced = self.rate is not None
        if self.rate is None and self._admitted:
            self.unpaced_rate += SMOOTHING * (admitted_rate - self.unpaced_rate)
        if now - self._last_ack > QUIET:
            self.rate = None
        elif self._acks and self._ack_sum / self._acks > self._target:
            basis = admitted_rate if self.rate is None else min(self.rate, admitted_rate)
            self.rate = max(FLOOR, SHARE * self.unpaced_rate, basis * CUT)
        elif self.rate is not None:
            self.rate *= GROWTH
        if self.rate is not None:
            self.windows_paced += 1
            if not was_paced:  # pacing begins with an empty bucket
                self._tokens, self._filled = 0.0, now
        self._start = now
        self._ack_sum = 0.0
        self._acks = 0
        self._admitted = 0
