"""Acks first: the pacer slows new pipeline work while webhooks arrive and the loop is late
(a clock the test moves)."""

from __future__ import annotations

import asyncio

import pytest

from webhook_bot_gateway.gateway._pipeline._pacer import CUT, FLOOR, GROWTH, QUIET, WINDOW, AckPacer

TARGET = 0.010
STEP = WINDOW * 1.02  # a window's length on the test's clock (a little over, whatever rounding)


class Clock:
    """A monotonic clock that moves only when told, and a sleep that moves it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def pacer(
    clock: Clock, overloaded: bool = False, target: float = TARGET, behind: bool = True
) -> AckPacer:
    return AckPacer(
        target,
        overloaded=lambda: overloaded,
        behind=lambda: behind,
        clock=clock,
        sleep=clock.sleep,
    )


async def window(
    p: AckPacer, clock: Clock, lag: float, admitted: int, webhooks: bool = True
) -> None:
    """One window: webhooks acknowledged (or none), the loop ``lag`` seconds late, and
    ``admitted`` deliveries let in."""
    if webhooks:
        p.acked()
    for _ in range(5):
        p.lagged(lag)
    await p.admit(admitted)
    if webhooks:  # they go on arriving while a paced admit waits
        p.acked()
    clock.now += STEP
    p.lagged(lag)  # closes the window


async def test_a_loop_that_keeps_up_leaves_the_pipeline_unpaced() -> None:
    clock = Clock()
    p = pacer(clock)
    for _ in range(10):
        await window(p, clock, lag=TARGET / 2, admitted=32)
    assert p.rate is None
    assert clock.slept == []


async def test_a_late_loop_cuts_the_rate_below_what_was_admitted() -> None:
    clock = Clock()
    p = pacer(clock)
    await window(p, clock, lag=TARGET * 3, admitted=64)
    admitted_rate = 64 / STEP
    assert p.rate == pytest.approx(max(FLOOR, admitted_rate * CUT))
    assert p.rate is not None
    assert p.rate < admitted_rate


async def test_a_paced_pipeline_waits_for_its_rate() -> None:
    clock = Clock()
    p = pacer(clock)
    await window(p, clock, lag=TARGET * 3, admitted=64)
    assert p.rate is not None
    rate = p.rate
    started = clock.now
    for _ in range(10):
        p.acked()
        p.lagged(TARGET * 3)  # the loop stays late: the rate is cut again at each window
        await p.admit(8)
    assert clock.slept, "a paced admit waits"
    assert p.held_to == p.rate
    assert p.rate is not None
    assert p.rate <= rate
    assert rate * (clock.now - started) + 8 >= 80  # no faster than the rate (and one admission)


async def test_the_rate_never_falls_below_the_floor() -> None:
    clock = Clock()
    p = pacer(clock)
    for _ in range(50):
        await window(p, clock, lag=TARGET * 10, admitted=0)
    assert p.rate == FLOOR


async def test_a_loop_that_keeps_up_again_lets_the_rate_grow() -> None:
    clock = Clock()
    p = pacer(clock)
    await window(p, clock, lag=TARGET * 3, admitted=64)
    assert p.rate is not None
    cut = p.rate
    await window(p, clock, lag=TARGET / 2, admitted=0)
    assert p.rate == pytest.approx(cut * GROWTH)


async def test_a_quiet_spell_without_acks_lifts_the_limit() -> None:
    clock = Clock()
    p = pacer(clock)
    await window(p, clock, lag=TARGET * 3, admitted=64)
    assert p.rate is not None
    clock.now += QUIET + STEP
    await p.admit(32)
    assert p.rate is None


async def test_an_overloaded_backlog_is_never_held_back() -> None:
    """Past backlog_ready the waiting users come first: no pacing, however late the loop."""
    clock = Clock()
    p = pacer(clock, overloaded=True)
    for _ in range(5):
        await window(p, clock, lag=TARGET * 10, admitted=64)
    assert p.rate is not None  # the loop is late...
    assert clock.slept == []  # ...but nothing waited
    assert p.held_to == 0


async def test_a_late_loop_without_webhooks_is_not_paced() -> None:
    """A backlog drained with no webhook arriving: nothing to give priority to."""
    clock = Clock()
    p = pacer(clock)
    for _ in range(5):
        await window(p, clock, lag=TARGET * 10, admitted=64, webhooks=False)
    assert p.rate is None
    assert clock.slept == []


async def test_a_target_of_zero_turns_pacing_off() -> None:
    clock = Clock()
    p = pacer(clock, target=0)
    for _ in range(5):
        await window(p, clock, lag=1.0, admitted=64)
    assert p.rate is None
    assert clock.slept == []


async def test_the_probe_measures_the_loop_only_while_webhooks_arrive() -> None:
    clock = Clock()
    p = pacer(clock)
    p.start()
    try:
        for _ in range(3):
            await asyncio.sleep(0)  # the probe runs: no webhook, so it waits for one
        assert clock.slept == []
        p.acked()
        for _ in range(3):
            await asyncio.sleep(0)
        assert clock.slept, "a webhook woke the probe"
    finally:
        await p.aclose()


async def test_a_pipeline_that_keeps_up_is_not_paced_however_late_the_loop() -> None:
    """A loop late for a reason pacing cannot remove (another process on the core) must not
    hold back a pipeline with nothing waiting: its answers would wait for nothing."""
    clock = Clock()
    p = pacer(clock, behind=False)
    for _ in range(20):
        await window(p, clock, lag=TARGET * 10, admitted=64)
    assert p.rate is None
    assert clock.slept == []
    assert p.held_to == 0


async def test_a_loop_late_in_a_third_of_the_windows_drives_the_rate_to_the_floor() -> None:
    """Why pacing waits for a backlog: lag that pacing does not cause is not cured by it. The
    rate is cut after each late window and regrows 15% per window in between, so a loop late
    in one window of three ends at the floor, whatever the pipeline could do."""
    clock = Clock()
    p = pacer(clock)
    for i in range(120):
        late = i % 3 == 0
        admitted = int((p.rate or 1000) * STEP)  # the pipeline takes all it is allowed
        await window(p, clock, lag=TARGET * (3 if late else 0.5), admitted=admitted)
    assert p.rate is not None
    assert p.rate < FLOOR * GROWTH**2 + 1
