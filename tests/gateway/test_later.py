"""Another process's outbox rows and files: this process looks at them after a grace, once."""

from __future__ import annotations

import asyncio

from webhook_bot_gateway.gateway._wait import Later


class Calls:
    def __init__(self) -> None:
        self.count = 0
        self.event = asyncio.Event()

    def __call__(self) -> None:
        self.count += 1
        self.event.set()


async def test_calls_before_the_grace_ends_run_the_callback_once_after_it() -> None:
    calls = Calls()
    later = Later(calls, delay=0.0)  # the loop's next turn: no real time passes
    for _ in range(5):
        later()
    assert calls.count == 0  # not at once: the writer handles its own
    await asyncio.wait_for(calls.event.wait(), 5)
    await asyncio.sleep(0)
    assert calls.count == 1


async def test_a_call_after_the_callback_ran_schedules_another() -> None:
    calls = Calls()
    later = Later(calls, delay=0.0)
    later()
    await asyncio.wait_for(calls.event.wait(), 5)
    calls.event.clear()
    later()
    await asyncio.wait_for(calls.event.wait(), 5)
    assert calls.count == 2
