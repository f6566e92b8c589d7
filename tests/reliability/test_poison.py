"""Poison messages (issue 12): one message in 500 makes the agent raise, every time it is tried.

Against the real ``gateway serve`` process with the agents of ``_poison_agents.py``. Each chat
is a user who sends a message, waits for its reply, then sends the next. A first phase has no
poison, a second phase the same traffic with one message in 500 poisoned. The poisoned user,
after the first failed try, writes again ("hello?") and waits for the apology; then a stand-in
user in a new chat sends the rest of its messages, so both phases have as many users.

Checked: each poison message reaches the model exactly ``max_attempts`` times, alone, then is
dead-lettered with its error (``GET /api/deadletters``), the user gets ``dispatcher.apology``,
and the session is handed to ``human`` (``agent_changed``, reason ``dead_letter``), which
stores the follow-up without a reply; every other message reaches the model once and is
answered once, in order per session. The other sessions' turn latency (POST to the reply at the
fake platform) is measured in both phases and printed, p50 and p99; no time is asserted.
The property that keeps it flat is asserted instead by the second test: with one turn slot and
a retry an hour away, a session in backoff holds no slot, so every other session is answered.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import time
from collections import Counter
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.conftest import MakeGateway, Platforms, Query
from tests.e2e.fakes import FakePlatform
from tests.e2e.gateway_proc import Gateway, eventually
from tests.e2e.test_crash import Chat
from tests.e2e.test_processes import shared_store
from tests.e2e.webhooks import Delivery, post_until_ok, telegram_text, whatsapp_texts

from ._poison_agents import CALLS_LOG, POISON
from .scale import LONG, pick

AGENTS_MODULE = Path(__file__).with_name("_poison_agents.py")
AGENTS = """
[agents]
starting_agent = "echo"
module = "poison_agents"
"""
MAX_ATTEMPTS = 3
APOLOGY = "Sorry, that went wrong. A person will look into it."
DISPATCHER = {
    "double_texting": "merge",  # the example config's: a message sent during a retry waits
    "max_attempts": MAX_ATTEMPTS,
    "retry_base_seconds": 0.25,
    "apology": APOLOGY,
    "dead_letter_handoff": "human",
}
POISON_EVERY = 500
CHATS = pick(20, 50)
BLOCK = pick(13, 50)  # messages per chat in each of the four blocks (two without poison)
WITHOUT, WITH = "without poison", "with poison"
ORDER = (WITHOUT, WITH, WITH, WITHOUT)
WARM_UP = 2  # messages per chat before the measured phases (not counted)
FOLLOW_UP = 9_999  # message number of the poisoned user's "hello?"
STAND_IN = 1_000  # a poisoned user's stand-in talks in the chat this many indexes further
REPLY_SECONDS = 60.0


def message(chat: Chat, n: int, text: str) -> Delivery:
    """Message ``n`` of ``chat`` with ``text``, as its platform delivers it."""
    if chat.telegram:
        return telegram_text(1_000_000 + chat.index * 10_000 + n, int(chat.chat_id), text)
    return whatsapp_texts(chat.chat_id, (f"wamid.{chat.tag(n)}", text))


@dataclass(frozen=True)
class Call:
    """One model call made inside the gateway, as ``_poison_agents.py`` logged it."""

    outcome: str  # "reply" or "raise"
    at: float  # time.monotonic(): one clock for every process of the machine
    tags: tuple[str, ...]


class CallLog:
    """The gateway's model calls, read as the file grows."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self.calls: list[Call] = []

    def refresh(self) -> list[Call]:
        if self._path.exists():
            with self._path.open("rb") as log:
                log.seek(self._offset)
                data = log.read()
            complete = data[: data.rfind(b"\n") + 1]
            self._offset += len(complete)
            for line in complete.decode().splitlines():
                outcome, at, tags = (line.split(" ") + [""])[:3]
                self.calls.append(Call(outcome, float(at), tuple(filter(None, tags.split(",")))))
        return self.calls

    def of(self, tag: str) -> list[Call]:
        return [call for call in self.refresh() if tag in call.tags]


class Replies:
    """When each text reached the fake platforms, and a wait for one of them."""

    def __init__(self, *fakes: FakePlatform) -> None:
        self._fakes = fakes
        self._seen = [0] * len(fakes)
        self._arrived: dict[tuple[str, str], float] = {}
        self._waiting: dict[tuple[str, str], asyncio.Future[float]] = {}

    @asynccontextmanager
    async def watching(self) -> AsyncIterator[Replies]:
        tasks = [asyncio.create_task(self._watch(fake)) for fake in self._fakes]
        try:
            yield self
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def arrival(self, chat_id: str, text: str) -> float:
        """time.monotonic() when ``text`` first reached ``chat_id``; waits for it."""
        key = (chat_id, text)
        self._scan()
        if key in self._arrived:
            return self._arrived[key]
        future = self._waiting.setdefault(key, asyncio.get_running_loop().create_future())
        try:
            async with asyncio.timeout(REPLY_SECONDS):
                return await future
        except TimeoutError:
            raise AssertionError(f"no {text!r} reached chat {chat_id}") from None

    async def _watch(self, fake: FakePlatform) -> None:
        while True:
            await fake.changed.wait()
            fake.changed.clear()
            self._scan()

    def _scan(self) -> None:
        for i, fake in enumerate(self._fakes):
            new, self._seen[i] = fake.requests[self._seen[i] :], len(fake.requests)
            for request in new:
                if request.outcome != "ok" or request.text is None:
                    continue
                key = (request.chat_id, request.text)
                self._arrived.setdefault(key, request.at)
                waiter = self._waiting.pop(key, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(self._arrived[key])


@dataclass
class Users:
    """The users, one per chat: each posts a message, waits for its reply, posts the next."""

    gateway: Gateway
    http: aiohttp.ClientSession
    replies: Replies
    calls: CallLog
    chats: list[Chat]  # each user's chat now
    latencies: dict[str, list[float]] = field(default_factory=dict)
    sent: dict[Chat, list[int]] = field(default_factory=dict)  # clean messages, in order
    victims: list[Chat] = field(default_factory=list)  # chats that sent a poison message

    async def phase(self, name: str, numbers: range, poison: Collection[str] = ()) -> None:
        """Every user's messages ``numbers``. A tag in ``poison`` is sent poisoned; after the
        apology a stand-in user in a new chat sends the rest, so as many users talk as before."""
        latencies = self.latencies.setdefault(name, [])
        await asyncio.gather(
            *(self._talk(user, numbers, poison, latencies) for user in range(len(self.chats)))
        )

    async def _talk(
        self, user: int, numbers: range, poison: Collection[str], latencies: list[float]
    ) -> None:
        for n in numbers:
            chat = self.chats[user]
            if chat.tag(n) in poison:
                await self._poisoned(chat, n)
                self.chats[user] = Chat(chat.index + STAND_IN)
                continue
            posted = time.monotonic()
            self.sent.setdefault(chat, []).append(n)
            await self._post(message(chat, n, chat.tag(n)))
            answered = await self.replies.arrival(chat.chat_id, f"echo {chat.tag(n)}")
            latencies.append(answered - posted)

    async def _poisoned(self, chat: Chat, n: int) -> None:
        self.victims.append(chat)
        tag = chat.tag(n)
        await self._post(message(chat, n, f"{tag} {POISON}"))
        await eventually(lambda: len(self.calls.of(tag)) >= 1, f"the first try of {tag}")
        # Written during the backoff: it must neither join the poison's retries nor die with it.
        await self._post(message(chat, FOLLOW_UP, follow_up(chat)))
        await self.replies.arrival(chat.chat_id, APOLOGY)

    async def _post(self, delivery: Delivery) -> None:
        await post_until_ok(self.http, self.gateway.url, delivery)


def poison_tags(chats: Sequence[Chat], numbers: Sequence[int]) -> set[str]:
    """One message in POISON_EVERY, in different chats and at different positions."""
    count = max(1, len(chats) * len(numbers) // POISON_EVERY)
    step = len(chats) // count
    middle = len(numbers) // 2
    return {chats[k * step].tag(numbers[(middle + 7 * k) % len(numbers)]) for k in range(count)}


def quantiles(latencies: Sequence[float]) -> tuple[float, float]:
    """p50 and p99, in seconds."""
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return cuts[49], cuts[98]


@dataclass(frozen=True)
class Backend:
    """Where the gateway under test keeps its store, and a function reading it."""

    name: str
    url: str
    query: Query


@pytest.fixture
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """The store named by the test's ``backend`` parameter: a SQLite file or a fresh schema."""
    async with shared_store(request.param, tmp_path) as (url, query):
        yield Backend(request.param, url, query)


async def start_gateway(
    make_gateway: MakeGateway, tmp_path: Path, backend: Backend, **dispatcher: Any
) -> Gateway:
    """The gateway on ``backend`` with the poison agents in its working directory."""
    shutil.copy(AGENTS_MODULE, tmp_path / "poison_agents.py")
    sections = {"store": {"url": backend.url}, "dispatcher": DISPATCHER | dispatcher}
    return await make_gateway(agents=AGENTS, sections=sections)


# The traffic test on PostgreSQL takes twice as long: in the long version only.
@pytest.mark.parametrize("backend", ["sqlite", *(["postgresql"] if LONG else [])], indirect=True)
async def test_poison_messages_are_dead_lettered_and_the_others_answered_once_in_order(
    make_gateway: MakeGateway,
    platforms: Platforms,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    backend: Backend,
) -> None:
    gateway = await start_gateway(make_gateway, tmp_path, backend)
    calls = CallLog(tmp_path / CALLS_LOG)
    chats = [Chat(i) for i in range(CHATS)]
    # Blocks without and with poison in the order A B B A, so that a drift (the machine's other
    # load, the store's tables growing) weighs on both kinds alike: their mean position is equal.
    blocks = [range(WARM_UP + b * BLOCK, WARM_UP + (b + 1) * BLOCK) for b in range(4)]
    poisoned = [n for kind, block in zip(ORDER, blocks, strict=True) if kind == WITH for n in block]
    poison = poison_tags(chats, poisoned)
    replies = Replies(platforms.telegram, platforms.graph)
    async with replies.watching():
        users = Users(gateway, http, replies, calls, list(chats))
        await users.phase("warm-up", range(WARM_UP))
        for kind, block in zip(ORDER, blocks, strict=True):
            await users.phase(kind, block, poison if kind == WITH else ())

    sent, victims = users.sent, users.victims
    assert len(victims) == len(poison)
    # Final once the apologies arrived: the rows died, and the apologies were queued, after.
    await check_dead_letters(gateway, http, poison)
    check_model_calls(calls, sent, poison)
    check_replies(platforms, sent, victims)
    await check_handoffs(gateway, http, victims)
    await eventually(
        lambda: follow_ups_stored(gateway, http, victims, sent), "the follow-ups stored"
    )
    assert await backend.query(
        "SELECT state, count(*) FROM inbox GROUP BY state ORDER BY state"
    ) == [
        ("dead", len(poison)),
        ("done", sum(len(numbers) for numbers in sent.values()) + len(victims)),
    ]
    report(backend.name, users.latencies, len(poison))
    print(overlap(calls, poison))


def follow_up(chat: Chat) -> str:
    return f"{chat.tag(FOLLOW_UP)} hello?"


async def user_texts(gateway: Gateway, http: aiohttp.ClientSession, chat: Chat) -> list[str]:
    """The session's user messages, oldest first (admin API)."""
    found = await gateway.admin(http, f"/api/sessions/{chat.session_id}/messages")
    return [m["text"] for m in found["messages"] if m["role"] == "user"]


async def follow_ups_stored(
    gateway: Gateway,
    http: aiohttp.ClientSession,
    victims: Sequence[Chat],
    sent: dict[Chat, list[int]],
) -> bool:
    """Every poisoned session holds its answered messages, the poison message (kept in the
    history by the dead letter), then the follow-up, no more."""
    for chat in victims:
        answered = [chat.tag(n) for n in sent[chat]]
        texts = await user_texts(gateway, http, chat)
        rest = texts[len(answered) :]
        if texts[: len(answered)] != answered or len(rest) != 2:
            return False
        if not rest[0].endswith(f" {POISON}") or rest[1] != follow_up(chat):
            return False
    return True


def check_model_calls(calls: CallLog, sent: dict[Chat, list[int]], poison: set[str]) -> None:
    """Each poison message tried MAX_ATTEMPTS times on its own; every other message once; the
    follow-ups never (the human queue has no model)."""
    per_tags = Counter((call.outcome, call.tags) for call in calls.refresh())
    expected = Counter({("raise", (tag,)): MAX_ATTEMPTS for tag in poison})
    for chat, numbers in sent.items():
        expected.update(("reply", (chat.tag(n),)) for n in numbers)
    assert per_tags == expected


def check_replies(platforms: Platforms, sent: dict[Chat, list[int]], victims: list[Chat]) -> None:
    """Every reply once and in order; a poisoned chat's last one is the apology."""
    for chat, numbers in sent.items():
        fake = platforms.telegram if chat.telegram else platforms.graph
        expected = [f"echo {chat.tag(n)}" for n in numbers]
        expected += [APOLOGY] if chat in victims else []
        assert fake.texts(chat.chat_id) == expected, chat.session_id


async def check_dead_letters(
    gateway: Gateway, http: aiohttp.ClientSession, poison: set[str]
) -> None:
    """The dead inbox rows are the poison messages, each with its tries and its error."""
    dead = await gateway.admin(http, "/api/deadletters?limit=500")
    assert dead["outbox"] == []
    found = {row["event"]["text"].split(" ")[0]: row for row in dead["inbox"]}
    assert set(found) == poison
    for tag, row in found.items():
        assert (row["state"], row["attempts"]) == ("dead", MAX_ATTEMPTS), tag
        assert row["error"] == f"PoisonError: model backend 'poison': poison message {tag}"


async def check_handoffs(
    gateway: Gateway, http: aiohttp.ClientSession, victims: Sequence[Chat]
) -> None:
    """A poisoned session was handed to ``human`` once, for the dead letter."""
    for chat in victims:
        path = f"/api/sessions/{chat.session_id}"
        assert (await gateway.admin(http, path))["active_agent"] == "human"
        events = await session_events(gateway, http, chat)
        handoffs = [e["detail"] for e in events if e["kind"] == "agent_changed"]
        assert handoffs == [{"from": "echo", "to": "human", "reason": "dead_letter"}]


async def session_events(
    gateway: Gateway, http: aiohttp.ClientSession, chat: Chat
) -> list[dict[str, Any]]:
    """The session's whole event log, page by page (admin API)."""
    events: list[dict[str, Any]] = []
    while True:
        after = events[-1]["seq"] if events else 0
        path = f"/api/sessions/{chat.session_id}/events?after={after}&limit=500"
        page = (await gateway.admin(http, path))["events"]
        if not page:
            return events
        events += page


def report(backend: str, latencies: dict[str, list[float]], poisoned: int) -> None:
    """Print the other sessions' turn latency of both phases (docs/reliability.md)."""
    lines = [f"\npoison test on {backend}: {poisoned} poison message(s); others' turn latency:"]
    measured = {k: quantiles(v) for k, v in latencies.items() if k != "warm-up"}
    for name, (p50, p99) in measured.items():
        turns = len(latencies[name])
        lines.append(f"  {name}: {turns} turns, p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms")
    base, loaded = measured[WITHOUT][1], measured[WITH][1]
    lines.append(f"  p99 with / without poison: {loaded / base:.2f}")
    print("\n".join(lines))


def overlap(calls: CallLog, poison: set[str]) -> str:
    """How many other turns ran while a poison message waited between its tries (printed)."""
    windows = [(tries[0].at, tries[-1].at) for tries in map(calls.of, sorted(poison))]
    others = [c.at for c in calls.refresh() if c.outcome == "reply"]
    inside = sum(any(start < at < end for start, end in windows) for at in others)
    waited = sum(end - start for start, end in windows)
    return f"  other sessions' turns during {waited:.1f} s of poison retries: {inside}"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
async def test_a_session_waiting_for_its_retry_holds_no_turn_slot(
    make_gateway: MakeGateway,
    platforms: Platforms,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    backend: Backend,
) -> None:
    """One turn slot, the poison's retry an hour away: every other session is answered, and the
    poisoned session's next message waits behind the retry, untried."""
    gateway = await start_gateway(
        make_gateway, tmp_path, backend, max_concurrent_turns=1, retry_base_seconds=3600
    )
    calls = CallLog(tmp_path / CALLS_LOG)
    victim, others = Chat(0), [Chat(i) for i in range(1, 1 + pick(20, 200))]
    tag = victim.tag(0)
    await post_until_ok(http, gateway.url, message(victim, 0, f"{tag} {POISON}"))
    await eventually(lambda: inbox_attempts(backend, victim, [1]), f"the first failed try of {tag}")
    await post_until_ok(http, gateway.url, message(victim, FOLLOW_UP, follow_up(victim)))
    await eventually(lambda: inbox_attempts(backend, victim, [1, 0]), "the follow-up recorded")
    replies = Replies(platforms.telegram, platforms.graph)
    async with replies.watching():
        await asyncio.gather(
            *(post_until_ok(http, gateway.url, message(c, 0, c.tag(0))) for c in others)
        )
        await asyncio.gather(*(replies.arrival(c.chat_id, f"echo {c.tag(0)}") for c in others))

    assert [call.tags for call in calls.of(tag)] == [(tag,)]  # not retried early
    assert calls.of(victim.tag(FOLLOW_UP)) == []  # waits behind the retry: order holds
    assert await inbox_attempts(backend, victim, [1, 0])
    assert platforms.telegram.texts(victim.chat_id) == []


async def inbox_attempts(backend: Backend, chat: Chat, attempts: list[int]) -> bool:
    """Whether the session's pending inbox rows, oldest first, have had these tries."""
    rows = await backend.query(
        f"SELECT attempts FROM inbox WHERE session_id = '{chat.session_id}'"
        " AND state = 'pending' ORDER BY id"
    )
    return [n for (n,) in rows] == attempts
