"""The soak's traffic: deliveries posted as the platforms post them, duplicates, and SIGKILLs.

Everything random is drawn from one seed (printed; ``GATEWAY_SOAK_SEED`` sets it): which
messages are posted twice and how, and after how many acknowledged messages (plus how long
after) each SIGKILL lands. Each chat posts its messages one after another, each until it gets a
200, so a session's arrival order is known; a 5xx, a refused or cut connection is retried with
the platforms' growing backoff, compressed from minutes to a second. A duplicate is the same
signed body again: either at the same moment as the original, or a little after its 200 (a
redelivery of a 200 the platform did not see).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import aiohttp
from pytest_aiohttp import AiohttpServer

from tests.e2e.conftest import Platforms
from tests.e2e.fakes import Chaos, FakeGraph, FakeTelegram
from tests.e2e.gateway_proc import Gateway
from tests.e2e.test_crash import Chat
from tests.e2e.webhooks import Delivery, post

SEED_VARIABLE = "GATEWAY_SOAK_SEED"
DUPLICATE_SHARE = 0.30  # of all webhooks posted
CONCURRENT_SHARE = 1 / 3  # of the duplicates: posted at the same moment as the original
FIRST_RETRY_SECONDS = 0.05  # the platforms wait minutes, growing; compressed, same shape
MAX_RETRY_SECONDS = 1.0
REDELIVERY_SECONDS = 1.0  # a later duplicate comes up to this long after the original's 200
KILL_DELAY_SECONDS = 0.3  # a SIGKILL lands up to this long after its count of acks
POST_DEADLINE_SECONDS = 120.0
# Per send, drawn from the seed: 429 with retry_after 1, 500, and taken-then-connection-cut.
FAULT_SHARES = (("429:1", 0.05), ("500", 0.05), ("drop", 0.02))

Duplicate = Literal["concurrent", "later"]
Key = tuple[int, int]  # (chat index, message number)
OnKill = Callable[[], Awaitable[None]]


def soak_seed() -> int:
    """``GATEWAY_SOAK_SEED`` if set, else a fresh one (printed by the test, to replay a run)."""
    given = os.environ.get(SEED_VARIABLE, "").strip()
    if not given:
        return random.SystemRandom().randrange(2**31)
    if not given.isdigit():
        raise ValueError(f"{SEED_VARIABLE} must be a non-negative integer, not {given!r}")
    return int(given)


@dataclass(frozen=True)
class Plan:
    """What a run posts and when it kills, all drawn from ``seed``."""

    seed: int
    chats: tuple[Chat, ...]
    per_chat: int
    duplicates: dict[Key, Duplicate]
    kill_after: tuple[int, ...]  # SIGKILL once this many messages were acknowledged
    kill_delays: tuple[float, ...]  # ... and this many seconds later

    @property
    def messages(self) -> int:
        return len(self.chats) * self.per_chat

    @property
    def webhooks(self) -> int:
        return self.messages + len(self.duplicates)

    @property
    def concurrent(self) -> int:
        return sum(kind == "concurrent" for kind in self.duplicates.values())


def make_plan(seed: int, *, webhooks: int, sessions: int, kills: int) -> Plan:
    """``webhooks`` posts over ``sessions`` chats, 30% of them duplicates, and ``kills`` kills."""
    rng = random.Random(seed)
    duplicates = round(webhooks * DUPLICATE_SHARE)
    per_chat = (webhooks - duplicates) // sessions
    assert per_chat < 100, "Chat's Telegram update ids leave room for 100 messages a chat"
    chats = tuple(Chat(i) for i in range(sessions))
    keys = [(chat.index, n) for chat in chats for n in range(per_chat)]
    doubled = rng.sample(keys, duplicates)
    concurrent = round(duplicates * CONCURRENT_SHARE)
    kinds: dict[Key, Duplicate] = {key: "concurrent" for key in doubled[:concurrent]}
    kinds |= {key: "later" for key in doubled[concurrent:]}
    messages = len(keys)
    kill_after = sorted(rng.sample(range(messages // 10, messages * 9 // 10), kills))
    delays = tuple(rng.uniform(0, KILL_DELAY_SECONDS) for _ in range(kills))
    return Plan(seed, chats, per_chat, kinds, tuple(kill_after), delays)


async def chaotic_platforms(aiohttp_server: AiohttpServer, seed: int) -> Platforms:
    """Fake Telegram and Graph servers whose sends fail in ``FAULT_SHARES``, seeded."""
    chaos = Chaos(seed, FAULT_SHARES)
    telegram, graph = FakeTelegram(chaos=chaos), FakeGraph(chaos=chaos)
    tg_server = await aiohttp_server(telegram.app(), host="127.0.0.1")
    graph_server = await aiohttp_server(graph.app(), host="127.0.0.1")
    return Platforms(
        telegram,
        graph,
        str(tg_server.make_url("")).rstrip("/"),
        str(graph_server.make_url("")).rstrip("/"),
    )


async def post_like_a_platform(
    http: aiohttp.ClientSession, base_url: str, delivery: Delivery, rng: random.Random
) -> int:
    """POST until a 200, backing off like the platforms (compressed); return the tries."""
    pause = FIRST_RETRY_SECONDS
    tries = 0
    async with asyncio.timeout(POST_DEADLINE_SECONDS):
        while True:
            tries += 1
            try:
                status = await post(http, base_url, delivery)
            except (aiohttp.ClientError, TimeoutError):
                status = 0  # refused, reset or cut off by a kill: the platform tries again
            if status == 200:
                return tries
            if 400 <= status < 500:
                raise AssertionError(f"{delivery.path} refused with {status}")
            await asyncio.sleep(pause * (0.5 + rng.random() / 2))
            pause = min(2 * pause, MAX_RETRY_SECONDS)


@dataclass
class Traffic:
    """Posts the plan's deliveries and kills and restarts the gateway at the plan's moments.

    ``on_kill`` runs while the gateway is down, before each restart (the integrity check).
    """

    plan: Plan
    gateway: Gateway
    http: aiohttp.ClientSession
    on_kill: OnKill
    acked: int = 0
    posts: int = 0  # HTTP requests, retries included
    # (SIGKILL sent, restarted and ready), time.monotonic(), like the fakes' records
    kills: list[tuple[float, float]] = field(default_factory=list)
    _progress: asyncio.Event = field(default_factory=asyncio.Event)
    _redeliveries: list[asyncio.Task[None]] = field(default_factory=list)

    async def run(self) -> None:
        posters = [asyncio.create_task(self._post_chat(chat)) for chat in self.plan.chats]
        try:
            await self._kill_and_restart()
            await asyncio.gather(*posters)
            await asyncio.gather(*self._redeliveries)
        finally:
            every = [*posters, *self._redeliveries]
            for task in every:
                task.cancel()
            await asyncio.gather(*every, return_exceptions=True)

    async def _post_chat(self, chat: Chat) -> None:
        rng = random.Random(f"{self.plan.seed}:post:{chat.index}")
        for n in range(self.plan.per_chat):
            delivery = chat.delivery(n)
            duplicate = self.plan.duplicates.get((chat.index, n))
            if duplicate == "concurrent":
                await asyncio.gather(self._post(delivery, rng), self._post(delivery, rng))
            else:
                await self._post(delivery, rng)
            if duplicate == "later":
                wait = rng.uniform(0, REDELIVERY_SECONDS)
                self._redeliveries.append(asyncio.create_task(self._redeliver(delivery, wait)))
            self.acked += 1
            self._progress.set()

    async def _post(self, delivery: Delivery, rng: random.Random) -> None:
        tries = await post_like_a_platform(self.http, self.gateway.url, delivery, rng)
        self.posts += tries

    async def _redeliver(self, delivery: Delivery, wait: float) -> None:
        await asyncio.sleep(wait)  # when the platform retries: drawn, not a synchronisation
        await self._post(delivery, random.Random(f"{self.plan.seed}:again:{wait}"))

    async def _kill_and_restart(self) -> None:
        for count, delay in zip(self.plan.kill_after, self.plan.kill_delays, strict=True):
            async with asyncio.timeout(POST_DEADLINE_SECONDS):
                while self.acked < count:
                    self._progress.clear()
                    await self._progress.wait()
            await asyncio.sleep(delay)  # the kill's moment, drawn from the seed
            killed = time.monotonic()
            await self.gateway.kill()
            await self.on_kill()
            await self.gateway.start()
            self.kills.append((killed, time.monotonic()))
