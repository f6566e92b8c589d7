"""Acks first: the pacer slows new pipeline work while acks are slow (a clock the test moves)."""

from __future__ import annotations

import pytest

from webhook_bot_gateway.gateway._pacer import CUT, FLOOR, GROWTH, QUIET, WINDOW, AckPacer

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


def pacer(clock: Clock, overloaded: bool = False, target: float = TARGET) -> AckPacer:
    return AckPacer(target, overloaded=lambda: overloaded, clock=clock, sleep=clock.sleep)


async def window(p: AckPacer, clock: Clock, ack: float, admitted: int, acks: int = 5) -> None:
    """One window: ``acks`` acks of ``ack`` seconds and ``admitted`` deliveries let in."""
    for _ in range(acks):
        p.acked(ack)
    await p.admit(admitted)
    clock.now += STEP
    p.acked(ack)  # closes the window


async def test_fast_acks_leave_the_pipeline_unpaced() -> None:
    clock = Clock()
    p = pacer(clock)
    for _ in range(10):
        await window(p, clock, ack=TARGET / 2, admitted=32)
    assert p.rate is None
    assert clock.slept == []


async def test_slow_acks_cut_the_rate_to_a_share_of_what_was_admitted() -> None:
    clock = Clock()
    p = pacer(clock)
    await window(p, clock, ack=TARGET * 3, admitted=64)
    admitted_rate = 64 / STEP
    assert p.rate == pytest.approx(max(FLOOR, admitted_rate * CUT, 0.5 * p.unpaced_rate))
    assert p.rate is not None
    assert p.rate < admitted_rate


async def test_a_paced_pipeline_waits_for_its_rate() -> None:
    clock = Clock()
    p = pacer(clock)
    await window(p, clock, ack=TARGET * 3, admitted=64)
    assert p.rate is not None
    rate = p.rate
    started = clock.now
    for _ in range(10):
        p.acked(TARGET * 3)  # acks stay slow: the rate is cut again at each window
        await p.admit(8)
    assert clock.slept, "a paced admit waits"
    assert p.rate is not None
    assert p.rate <= rate
    assert 80 <= rate * (clock.now - started) + 8  # no faster than the rate (and one admission)


async def test_the_rate_never_falls_below_the_floor() -> None:
    clock = Clock()
    p = pacer(clock)
    for _ in range(50):
        await window(p, clock, ack=TARGET * 10, admitted=0)
    assert p.rate == FLOOR


async def test_fast_acks_let_the_rate_grow_again() -> None:
    clock = Clock()
    p = pacer(clock)
    await window(p, clock, ack=TARGET * 3, admitted=64)
    assert p.rate is not None
    cut = p.rate
    await window(p, clock, ack=TARGET / 2, admitted=0)
    assert p.rate == pytest.approx(cut * GROWTH)


async def test_a_quiet_spell_without_acks_lifts_the_limit() -> None:
    clock = Clock()
    p = pacer(clock)
    await window(p, clock, ack=TARGET * 3, admitted=64)
    assert p.rate is not None
    clock.now += QUIET + STEP
    await p.admit(32)
    assert p.rate is None


async def test_an_overloaded_backlog_is_never_held_back() -> None:
    """Past backlog_ready the waiting users come first: no pacing, however slow the acks."""
    clock = Clock()
    p = pacer(clock, overloaded=True)
    for _ in range(5):
        await window(p, clock, ack=TARGET * 10, admitted=64)
    assert p.rate is not None  # the acks are slow...
    assert clock.slept == []  # ...but nothing waited


async def test_a_target_of_zero_turns_pacing_off() -> None:
    clock = Clock()
    p = pacer(clock, target=0)
    for _ in range(5):
        await window(p, clock, ack=1.0, admitted=64)
    assert p.rate is None
    assert clock.slept == []
