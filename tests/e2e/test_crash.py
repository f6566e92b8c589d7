"""The crash test: 300 messages over 30 sessions while the gateway is SIGKILLed twice.

Clients post like the platforms do: each message again until it gets a 200, and a session's
next message only after that (so its arrival order is known). Afterwards every message has
exactly one committed turn, in arrival order, every reply reached the fake API, and no session
is left ``running``. A reply can go out twice only in the documented crash window (between the
platform's answer and the one UPDATE recording it); such repeats are counted and printed.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from dataclasses import dataclass

import aiohttp

from .conftest import MakeGateway, Platforms
from .fakes import FakePlatform
from .gateway_proc import BOT, NUMBER, Gateway, eventually
from .webhooks import Delivery, post_until_ok, telegram_text, whatsapp_texts

SESSIONS = 30
PER_SESSION = 10
KILL_AT = (100, 200)  # SIGKILL once this many messages were acknowledged

ECHO_AGENTS = """
[agents]
starting_agent = "echo"

[[agents.list]]
name = "echo"
description = "Repeats the tag of each message, so replies can be matched to messages."
model = "rules"

[[agents.list.rules]]
match = '(?P<tag>c[0-9]+-m[0-9]+)'
reply = "echo {tag}"
"""


@dataclass(frozen=True)
class Chat:
    """One conversation: its session id, where replies go, and how to post its messages."""

    index: int

    @property
    def telegram(self) -> bool:
        return self.index % 2 == 0

    @property
    def chat_id(self) -> str:
        return str(9000 + self.index) if self.telegram else f"1555900{self.index:04d}"

    @property
    def session_id(self) -> str:
        if self.telegram:
            return f"telegram-{BOT}-{self.chat_id}"
        return f"whatsapp-{NUMBER}-{self.chat_id}"

    def tag(self, n: int) -> str:
        return f"c{self.index:02d}-m{n}"

    def delivery(self, n: int) -> Delivery:
        if self.telegram:
            return telegram_text(100_000 + self.index * 100 + n, int(self.chat_id), self.tag(n))
        return whatsapp_texts(self.chat_id, (f"wamid.{self.tag(n)}", self.tag(n)))


class Traffic:
    """Posts every chat's messages in order and kills the gateway at the set counts."""

    def __init__(self, gateway: Gateway, http: aiohttp.ClientSession, chats: list[Chat]) -> None:
        self.gateway = gateway
        self.http = http
        self.chats = chats
        self.acked = 0
        self.tries = 0
        self.progress = asyncio.Event()
        # (SIGKILL sent, restarted and ready), time.monotonic(), like the fakes' records
        self.kills: list[tuple[float, float]] = []

    async def run(self) -> None:
        posters = [asyncio.create_task(self._post_chat(chat)) for chat in self.chats]
        try:
            await self._kill_and_restart()
            await asyncio.gather(*posters)
        finally:
            for task in posters:
                task.cancel()
            await asyncio.gather(*posters, return_exceptions=True)

    async def _post_chat(self, chat: Chat) -> None:
        for n in range(PER_SESSION):
            tries = await post_until_ok(self.http, self.gateway.url, chat.delivery(n))
            self.tries += tries
            self.acked += 1
            self.progress.set()

    async def _kill_and_restart(self) -> None:
        for count in KILL_AT:
            async with asyncio.timeout(60):
                while self.acked < count:
                    self.progress.clear()
                    await self.progress.wait()
            killed = time.monotonic()
            await self.gateway.kill()
            await self.gateway.start()
            self.kills.append((killed, time.monotonic()))


def replies(fake: FakePlatform, chat: Chat) -> list[str]:
    return [text.removeprefix("echo ") for text in fake.texts(chat.chat_id)]


def repeats_outside_the_window(
    fake: FakePlatform, chat: Chat, kills: list[tuple[float, float]]
) -> list[str]:
    """Replies that arrived twice from one life of the process (no SIGKILL between the copies).

    The fakes run in this process, so a request may be recorded a little after the process that
    sent it was killed; a copy counts as before the kill if it was recorded before the restart.
    """
    arrivals: dict[str, list[float]] = {}
    for request in fake.sent():
        if request.chat_id == chat.chat_id and request.text:
            arrivals.setdefault(request.text, []).append(request.at)
    return [
        text
        for text, times in arrivals.items()
        for first, again in zip(times, times[1:], strict=False)
        if not any(first < ready and again > killed for killed, ready in kills)
    ]


async def test_e2e_crash_every_message_one_turn_in_order_after_two_sigkills(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway(agents=ECHO_AGENTS)
    chats = [Chat(i) for i in range(SESSIONS)]
    traffic = Traffic(gateway, http, chats)
    await traffic.run()
    assert gateway.starts == 1 + len(KILL_AT)

    def fake_of(chat: Chat) -> FakePlatform:
        return platforms.telegram if chat.telegram else platforms.graph

    def all_replied() -> bool:
        return all(
            set(replies(fake_of(c), c)) >= {c.tag(n) for n in range(PER_SESSION)} for c in chats
        )

    await eventually(all_replied, "a reply to every message", seconds=60)
    assert await gateway.stop(signal.SIGTERM) == 0

    repeated = 0
    for chat in chats:
        expected = [chat.tag(n) for n in range(PER_SESSION)]
        # One committed turn per message, in the order the messages arrived.
        users = gateway.query(
            "SELECT text, data FROM messages WHERE session_id = ? AND role = 'user' ORDER BY id",
            chat.session_id,
        )
        assert [text for text, _ in users] == expected, chat.session_id
        ids = [json.loads(data)["messages"][0]["message_id"] for _, data in users]
        assert ids == [_message_id(chat, n) for n in range(PER_SESSION)]
        # Every reply reached the platform, the first copy of each in order.
        got = replies(fake_of(chat), chat)
        assert list(dict.fromkeys(got)) == expected, chat.session_id
        repeated += sum(count - 1 for count in Counter(got).values())
        assert repeats_outside_the_window(fake_of(chat), chat, traffic.kills) == []

    assert gateway.query("SELECT state, count(*) FROM inbox GROUP BY state") == [
        ("done", SESSIONS * PER_SESSION)
    ]
    assert gateway.query("SELECT state, count(*) FROM outbox GROUP BY state") == [
        ("sent", SESSIONS * PER_SESSION)
    ]
    assert gateway.query("SELECT count(*) FROM sessions WHERE status = 'running'") == [(0,)]
    assert gateway.query("SELECT count(*) FROM sessions") == [(SESSIONS,)]
    print(
        f"\ncrash test: {SESSIONS * PER_SESSION} messages, {traffic.tries} POSTs,"
        f" {len(KILL_AT)} SIGKILLs; replies repeated by the crash window: {repeated}"
    )


def _message_id(chat: Chat, n: int) -> str:
    return str(100_000 + chat.index * 100 + n) if chat.telegram else f"wamid.{chat.tag(n)}"
