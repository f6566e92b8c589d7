"""Acknowledgements first: new pipeline work waits while webhooks arrive and the loop is late.

Acks and the pipeline (intake, turns, sends) share one event loop, and asyncio runs whatever is
ready in arrival order: a busy pipeline makes every ack wait behind its callbacks. The pacer
measures how late the loop runs (a probe that sleeps ``PROBE`` seconds and notes how much
longer it took) and judges it in windows of ``WINDOW`` seconds. While webhooks arrive
(``acked``, from the webhook handler) and the loop's mean lag in a window is over ``target``,
the rate at which new work enters the pipeline (``admit``, asked by the intake before it
parses stored deliveries and by the dispatcher before each turn) is cut to ``CUT`` times what
was admitted; while the loop keeps up it grows by ``GROWTH`` per window; ``QUIET`` seconds
without a webhook lift the limit. The loop's lag, not the acks' own time, is the signal: an ack
also waits for its disk flush, which pacing cannot shorten, and cutting the pipeline for it
would only delay the answers.

Pacing is only for a pipeline that is behind (``behind``: the backlog last read from the store
is at least ``ingest.ack_priority_backlog``). A pipeline that keeps up has little to gain from
it: its acks queue behind a few callbacks at most. And a loop can be late for reasons pacing
cannot remove (another process on the core, the garbage collector); pacing a pipeline that
keeps up would only cut its rate, and the lag staying, cut it to the floor, while the answers
wait in the store.

The deliveries wait durably in the store meanwhile, so nothing is lost, only answered later;
a floor keeps the pipeline moving, and past ``ingest.backlog_ready`` (``overloaded``) the
waiting users come first and nothing is held back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

PROBE = 0.005  # seconds the lag probe sleeps between measurements
WINDOW = 0.05  # seconds of lag judged together
CUT = 0.7  # the admitted rate after a late window, times the rate admitted in it
GROWTH = 1.15  # the limit's growth after a window in which the loop kept up
FLOOR = 20.0  # deliveries per second admitted however late the loop
QUIET = 0.1  # seconds without a webhook that lift the limit (a burst's end frees the pipeline)
EPSILON = 1e-6  # tokens: what float rounding may leave missing
MIN_WAIT = 0.001  # seconds: the shortest wait for the bucket to fill


class AckPacer:
    """Limits the rate of new pipeline work while webhooks arrive and the loop runs late."""

    def __init__(
        self,
        target: float,
        *,
        overloaded: Callable[[], bool] = lambda: False,
        behind: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._target = target  # seconds of mean loop lag; 0: never paced
        self._overloaded = overloaded
        self._behind = behind
        self._clock = clock
        self._sleep = sleep
        self.rate: float | None = None  # deliveries and turns per second admitted; None: no limit
        self._start = clock()  # the current window's
        self._lag_sum = 0.0
        self._probes = 0
        self._admitted = 0
        self._last_ack = -QUIET
        self._tokens = 0.0
        self._filled = self._start
        self._task: asyncio.Task[None] | None = None
        self._arrived = asyncio.Event()  # wakes the probe after a quiet spell

    def start(self) -> None:
        """Start the lag probe (nothing to do when pacing is off)."""
        if self._target > 0:
            self._task = asyncio.create_task(self._probe(), name="ack-pacer-probe")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def acked(self) -> None:
        """A webhook was acknowledged: while they arrive, the loop's lag matters."""
        self._last_ack = self._clock()
        if not self._arrived.is_set():
            self._arrived.set()

    @property
    def held_to(self) -> float:
        """The rate new work is held to now (per second); 0 while it is not paced."""
        return 0.0 if self.rate is None or self._overloaded() else self.rate

    @property
    def behind(self) -> bool:
        """The pipeline is behind: it may be paced while webhooks arrive and the loop is late."""
        return self._behind()

    @property
    def last_webhook_at(self) -> float:
        """When the last webhook was acknowledged (the pacer's clock)."""
        return self._last_ack

    @property
    def webhooks_arriving(self) -> bool:
        """A webhook was acknowledged within the last ``QUIET`` seconds."""
        return self._clock() - self._last_ack <= QUIET

    def lagged(self, seconds: float) -> None:
        """The loop ran a timer ``seconds`` late."""
        self._lag_sum += seconds
        self._probes += 1
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

    async def _probe(self) -> None:
        while True:
            if not self.webhooks_arriving:  # an idle gateway is not woken 200 times a second
                self._arrived.clear()
                await self._arrived.wait()
            before = self._clock()
            await self._sleep(PROBE)
            self.lagged(max(self._clock() - before - PROBE, 0.0))

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
        was_paced = self.rate is not None
        if self._target <= 0 or not self.webhooks_arriving or not self.behind:
            self.rate = None
        elif self._probes and self._lag_sum / self._probes > self._target:
            admitted_rate = self._admitted / elapsed
            basis = admitted_rate if self.rate is None else min(self.rate, admitted_rate)
            self.rate = max(FLOOR, basis * CUT)
        elif self.rate is not None:
            self.rate *= GROWTH
        if self.rate is not None and not was_paced:  # pacing begins with an empty bucket
            self._tokens, self._filled = 0.0, now
        self._start = now
        self._lag_sum = 0.0
        self._probes = 0
        self._admitted = 0
