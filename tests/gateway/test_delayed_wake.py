"""Another process's outbox rows and files: this process looks at them after a grace, once."""

from __future__ import annotations

import asyncio

from webhook_bot_gateway.gateway._pipeline import DelayedWake


class CountedEvent(asyncio.Event):
    def __init__(self) -> None:
        super().__init__()
        self.sets = 0

    def set(self) -> None:
        self.sets += 1
        super().set()


async def test_notifications_before_the_grace_ends_wake_once_after_it() -> None:
    event = CountedEvent()
    wake = DelayedWake(event, delay=0.0)  # the loop's next turn: no real time passes
    for _ in range(5):
        wake()
    assert not event.is_set()  # not at once: the writer sends its own
    await asyncio.wait_for(event.wait(), 5)
    await asyncio.sleep(0)
    assert event.sets == 1


async def test_a_notification_after_the_wake_schedules_another() -> None:
    event = CountedEvent()
    wake = DelayedWake(event, delay=0.0)
    wake()
    await asyncio.wait_for(event.wait(), 5)
    event.clear()
    wake()
    await asyncio.wait_for(event.wait(), 5)
    assert event.sets == 2
