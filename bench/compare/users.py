"""Users who wait for their answer: each session sends a message, waits for the reply at the
fake Graph API, then sends the next. ``sessions`` of them at once is the concurrency."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from bench.compare import procs
from bench.e2e import Message, Replies, fake_platforms, webhook

POSTS_IN_FLIGHT = 64  # the platform's connections to the server, as in bench/e2e.py
# A reply still awaited once the server has sat idle this long, with no reply meanwhile, is
# lost (chatflow's send gives up after 3 tries, waiting at most about 5 s between them).
QUIET_SECONDS = 15.0


class Lost(Exception):
    """A reply the server will not send: it went quiet without it."""


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Waiting(Replies):
    """The fake APIs' record of replies, with a future per reply awaited."""

    waiters: dict[str, asyncio.Future[float]] = field(default_factory=dict)
    last: float = field(default_factory=time.perf_counter)  # when the latest reply came

    def add(self, text: str) -> None:
        super().add(text)
        self.last = time.perf_counter()
        tag = text.removeprefix("Got ").removesuffix(", thanks.")
        waiter = self.waiters.pop(tag, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(time.perf_counter())

    def expect(self, tag: str) -> asyncio.Future[float]:
        waiter: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiters[tag] = waiter
        return waiter

    def give_up(self) -> None:
        for waiter in self.waiters.values():
            if not waiter.done():
                waiter.set_exception(Lost())
        self.waiters.clear()


async def give_up_when_quiet(pid: int, replies: Waiting) -> None:
    """Fail the awaited replies once the server is idle and none came for QUIET_SECONDS."""
    while True:
        idle = await procs.cpu_share(pid, 0.5) < 0.05
        if replies.waiters and idle and time.perf_counter() - replies.last > QUIET_SECONDS:
            replies.give_up()


@asynccontextmanager
async def fake_apis(model: Handler | None = None) -> AsyncIterator[tuple[str, Waiting]]:
    """bench/e2e.py's fake Telegram and Graph APIs on loopback, and ``model`` as
    ``/v1/chat/completions``; yields their base URL and the reply record."""
    replies = Waiting(total=10**9)
    fakes = fake_platforms(replies)
    if model is not None:
        fakes.router.add_post("/v1/chat/completions", model)
    runner = web.AppRunner(fakes, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", replies
    finally:
        await runner.cleanup()


@dataclass(frozen=True)
class Outcome:
    seconds: float  # first post to last reply
    latencies: list[float]  # post -> reply, seconds
    lost: int  # users whose reply never came (each stopped there)

    @property
    def answered_per_second(self) -> float:
        return len(self.latencies) / self.seconds


async def converse(url: str, replies: Waiting, sessions: range, rounds: int, pid: int) -> Outcome:
    """Every session of ``sessions`` (WhatsApp users) talks ``rounds`` turns, all at once."""
    connector = aiohttp.TCPConnector(limit=POSTS_IN_FLIGHT)
    arrivals: list[float] = []
    lost = 0
    async with aiohttp.ClientSession(connector=connector) as http:

        async def user(session: int) -> list[float]:
            nonlocal lost
            waited = []
            for n in range(rounds):
                message = Message(session, n, telegram=False)
                answered = replies.expect(message.tag)
                posted = await _post(http, url, message)
                try:
                    arrived = await answered
                except Lost:
                    lost += 1
                    break
                arrivals.append(arrived)
                waited.append(arrived - posted)
            return waited

        started = time.perf_counter()
        watchdog = asyncio.create_task(give_up_when_quiet(pid, replies))
        try:
            per_user = await asyncio.gather(*(user(s) for s in sessions))
        finally:
            watchdog.cancel()
    seconds = max(arrivals, default=started + 1) - started
    return Outcome(seconds, [x for waited in per_user for x in waited], lost)


async def _post(http: aiohttp.ClientSession, url: str, message: Message) -> float:
    """POST the message's webhook; when it was posted."""
    path, body, headers = webhook(message)
    posted = time.perf_counter()
    async with http.post(url + path, data=body, headers=headers) as response:
        await response.read()
        if response.status != 200:
            raise RuntimeError(f"{path}: HTTP {response.status}")
    return posted
