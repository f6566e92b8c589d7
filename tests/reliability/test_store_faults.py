"""Store faults (issue 12): the disk full, and the write lock held by another process past the
busy timeout while turns are committing, on the real ``gateway serve`` with its SQLite store on
a tmpfs mounted by the test; and the store made read-only between two runs.

During each fault every webhook answered 2xx has its rows (its dedup key claimed, the delivery
or its inbox row stored), every other answer is 503 ``store_unavailable`` with a JSON body, and
``/readyz`` answers 503 naming the store. Once the fault clears, without a restart: ``/readyz``
answers 200 again, the deliveries posted again are answered exactly once, no session is left
``running``, and every reply reached the fake platform once.

Linux refuses ``mount -o remount,ro`` (EBUSY) while a process holds a file of the mount open for
writing, as a running gateway holds its database, so the read-only case remounts between a
stop and a start: the start must fail with a clear error, and the next start once the mount is
writable again must carry on.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pytest_aiohttp import AiohttpServer

from tests.e2e import conftest as e2e
from tests.e2e.conftest import Platforms
from tests.e2e.gateway_proc import (
    BOT,
    START_SECONDS,
    Gateway,
    config_text,
    eventually,
    free_port,
)
from tests.e2e.test_crash import ECHO_AGENTS, Chat
from tests.e2e.webhooks import Delivery, post_until_ok
from tests.e2e.ws_client import SlowModel, slow_agents

from ._faults import MountRefused, Tmpfs, write_lock
from .scale import pick

STORE_BYTES = 16 << 20  # the tmpfs under the database
CHATS = pick(8, 60)  # conversations, half on Telegram and half on WhatsApp
FAULT_ROUNDS = pick(1, 5)  # messages each chat sends during a fault
READY_SECONDS = 15.0  # /readyz must report the fault, and its end, within this
ANSWER_SECONDS = 30.0  # every message answered within this once the fault has cleared
# A delivery waits for the store's busy timeout (5 s) once per write queued ahead of it.
POST_SECONDS = 30.0

SLOW_ANSWER = "a slow answer"  # SlowModel's one answer
# The dispatcher's log line for a turn that did not commit (its store writes all failed).
TURN_FAILED = re.compile(r"turn of session (\S+) failed \(try 1\)")

RECEIVED = "gateway_webhooks_received_total"  # the gateway's metric, per channel
PIPELINE_STOPPED = re.compile(r"pipeline task \S+ stopped")  # a loop of the pipeline died

StartGateway = Callable[[str], Awaitable[Gateway]]

# The end-to-end fixtures: the fake platforms on loopback and an HTTP client.
platforms = e2e.platforms
http = e2e.http


@pytest.fixture
def store_fs(tmp_path: Path) -> Iterator[Tmpfs]:
    """A tmpfs for the database, unmounted after the test whatever happened."""
    # Not "store": the gateway runs in tmp_path, where that name would shadow the package.
    fs = Tmpfs(tmp_path / "dbfs", STORE_BYTES)
    try:
        fs.mount()
    except MountRefused as exc:
        pytest.skip(f"cannot mount a tmpfs for the store (needs root): {exc}")
    try:
        yield fs
    finally:
        fs.unmount()


@pytest.fixture
async def start_gateway(
    tmp_path: Path,
    store_fs: Tmpfs,
    platforms: Platforms,
) -> AsyncIterator[StartGateway]:
    """Start ``gateway serve`` with these agents and its database on the tmpfs."""
    started: list[Gateway] = []

    async def start(agents: str) -> Gateway:
        port, db = free_port(), store_fs.path / "gateway.db"
        text = config_text(
            port=port,
            db=db,
            telegram_url=platforms.telegram_url,
            graph_url=platforms.graph_url,
            agents=agents,
        )
        gateway = Gateway(tmp_path, text, port, db)
        started.append(gateway)
        await gateway.start()
        return gateway

    yield start
    for gateway in started:  # before the tmpfs goes: the process holds the database open
        await gateway.ensure_stopped()


# what the gateway answers


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any  # the JSON body, or the text when it is not JSON
    seconds: float = 0.0  # from the POST to the answer


async def post_once(http: aiohttp.ClientSession, url: str, delivery: Delivery) -> Answer:
    """POST once, as a platform's first try; the status and the body."""
    timeout = aiohttp.ClientTimeout(total=POST_SECONDS)
    path, body, headers = url + delivery.path, delivery.body, delivery.headers
    began = time.monotonic()
    async with http.post(path, data=body, headers=headers, timeout=timeout) as r:
        return Answer(r.status, await _body(r), time.monotonic() - began)


async def readyz(http: aiohttp.ClientSession, gateway: Gateway) -> Answer:
    async with http.get(f"{gateway.url}/readyz") as response:
        return Answer(response.status, await _body(response))


async def _body(response: aiohttp.ClientResponse) -> Any:
    text = await response.text()
    try:
        return json.loads(text)
    except ValueError:
        return text


def error_code(answer: Answer) -> str | None:
    body = answer.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = body["error"].get("code")
        return code if isinstance(code, str) else None
    return None


async def wait_readyz(
    http: aiohttp.ClientSession,
    gateway: Gateway,
    status: int,
) -> float:
    """Poll /readyz until it answers ``status`` (503: naming the store); the seconds it took."""
    began = time.monotonic()
    last: list[Answer] = []

    async def answered() -> bool:
        answer = await readyz(http, gateway)
        last[:] = [answer]
        if status == 503:
            return answer.status == 503 and error_code(answer) == "store_unavailable"
        return answer.status == status

    try:
        await eventually(answered, f"/readyz {status}", seconds=READY_SECONDS, interval=0.05)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last answer {last}\n{gateway.log()}") from None
    return time.monotonic() - began


def dedup_key(delivery: Delivery) -> str:
    """The key the gateway claims for a delivery of one message (Telegram or WhatsApp)."""
    body = json.loads(delivery.body)
    if "update_id" in body:
        return f"telegram:{BOT}:{body['update_id']}"
    [message] = body["entry"][0]["changes"][0]["value"]["messages"]
    return f"whatsapp:{message['id']}"


def recorded(gateway: Gateway, key: str) -> bool:
    """The key is claimed and its message is stored: as a delivery, or as an inbox row."""
    claimed = gateway.query("SELECT count(*) FROM processed_messages WHERE key = ?", key)
    stored = gateway.query(
        "SELECT (SELECT count(*) FROM deliveries, json_each(deliveries.keys)"
        "        WHERE json_each.value = ?1)"
        " + (SELECT count(*) FROM inbox WHERE dedup_key = ?1)",
        key,
    )
    return claimed == [(1,)] and stored == [(1,)]


# the traffic


@dataclass
class Fault:
    """What one fault did to the deliveries posted during it, and how long recovery took."""

    name: str
    answers: list[Answer] = field(default_factory=list)
    posted: list[Delivery] = field(default_factory=list)
    refused: list[Delivery] = field(default_factory=list)
    recovery_seconds: float = 0.0
    answered_seconds: float = 0.0

    @property
    def accepted(self) -> int:
        return sum(1 for a in self.answers if 200 <= a.status < 300)

    @property
    def slowest(self) -> float:
        return max((a.seconds for a in self.answers), default=0.0)

    def summary(self) -> str:
        return (
            f"{self.name}: {len(self.answers)} deliveries during the fault, {self.accepted} 2xx,"
            f" {len(self.refused)} 503, slowest answer {self.slowest:.1f} s;"
            f" /readyz 200 {self.recovery_seconds:.2f} s after the fault"
            f" cleared, every message answered {self.answered_seconds:.2f} s after it"
        )


class Conversations:
    """Chats that post messages tagged ``cNN-mK``; ``reply`` is the agent's answer to a tag."""

    def __init__(
        self,
        gateway: Gateway,
        http: aiohttp.ClientSession,
        platforms: Platforms,
        *,
        reply: Callable[[str], str] = lambda tag: f"echo {tag}",
    ) -> None:
        self.gateway = gateway
        self.http = http
        self.platforms = platforms
        self.reply = reply
        self.chats = [Chat(i) for i in range(CHATS)]
        self.sent: dict[int, int] = {chat.index: 0 for chat in self.chats}  # messages per chat

    def _next(self, chat: Chat) -> Delivery:
        n = self.sent[chat.index]
        self.sent[chat.index] = n + 1
        return chat.delivery(n)

    async def normal_round(self) -> None:
        """One message per chat, each posted until its 200 (the store is fine)."""
        deliveries = [self._next(chat) for chat in self.chats]
        await asyncio.gather(*(post_until_ok(self.http, self.gateway.url, d) for d in deliveries))

    async def fault_round(self, fault: Fault) -> None:
        """One message per chat, each posted once; check each answer against the store."""
        deliveries = [self._next(chat) for chat in self.chats]
        answers = await asyncio.gather(
            *(post_once(self.http, self.gateway.url, d) for d in deliveries)
        )
        for delivery, answer in zip(deliveries, answers, strict=True):
            fault.posted.append(delivery)
            fault.answers.append(answer)
            if 200 <= answer.status < 300:
                key = dedup_key(delivery)
                assert recorded(self.gateway, key), f"{key} got {answer.status} without its rows"
            else:
                assert (answer.status, error_code(answer)) == (503, "store_unavailable"), answer
                fault.refused.append(delivery)

    async def post_again(self, deliveries: list[Delivery]) -> None:
        """The platforms' retries: each posted until its 200."""
        await asyncio.gather(*(post_until_ok(self.http, self.gateway.url, d) for d in deliveries))

    def tags(self, chat: Chat) -> list[str]:
        return [chat.tag(n) for n in range(self.sent[chat.index])]

    def _replies(self, chat: Chat) -> Counter[str]:
        fake = self.platforms.telegram if chat.telegram else self.platforms.graph
        return Counter(fake.texts(chat.chat_id))

    def _expected(self, chat: Chat) -> Counter[str]:
        return Counter(self.reply(tag) for tag in self.tags(chat))

    def _all_answered(self) -> bool:
        return all(self._replies(c) >= self._expected(c) for c in self.chats)

    async def answered(self) -> None:
        """Until every message sent so far has its reply at the fake platform."""
        await eventually(self._all_answered, "a reply to every message", seconds=ANSWER_SECONDS)

    async def recorded(self) -> None:
        """Until every reply sent so far is recorded sent. A fault that begins before would
        catch a send between the platform's answer and its record, the documented window in
        which a reply goes again (docs/pipeline.md), and the count would not be exactly once."""

        def none_pending() -> bool:
            return not self.gateway.query("SELECT 1 FROM outbox WHERE state = 'pending' LIMIT 1")

        await eventually(none_pending, "every reply recorded sent", seconds=ANSWER_SECONDS)

    def check_exactly_once(self) -> None:
        """Every message one user message in its session, one reply at the platform."""
        for chat in self.chats:
            users = self.gateway.query(
                "SELECT text FROM messages WHERE session_id = ? AND role = 'user'",
                chat.session_id,
            )
            assert sorted(text for (text,) in users) == sorted(self.tags(chat)), chat.session_id
            assert self._replies(chat) == self._expected(chat), chat.session_id


async def check_nothing_stuck(gateway: Gateway) -> None:
    """No session running, every inbox row done, every outbox row sent, nothing left unparsed,
    and every loop of the pipeline still alive (a dead one would wait for a restart)."""
    log = gateway.log_path.read_text(encoding="utf-8")
    assert not PIPELINE_STOPPED.findall(log), gateway.log()
    assert gateway.query("SELECT count(*) FROM sessions WHERE status = 'running'") == [(0,)]
    assert gateway.query("SELECT DISTINCT state FROM inbox") == [("done",)]
    # A reply reaches the fake platform before the sender's commit marks its row sent.
    await eventually(
        lambda: gateway.query("SELECT DISTINCT state FROM outbox") == [("sent",)],
        "every outbox row marked sent",
        seconds=ANSWER_SECONDS,
    )
    assert gateway.query("SELECT count(*) FROM deliveries") == [(0,)]


async def no_session_running(gateway: Gateway) -> None:
    await eventually(
        lambda: gateway.query("SELECT count(*) FROM sessions WHERE status = 'running'") == [(0,)],
        "no session left running",
        seconds=ANSWER_SECONDS,
    )


async def webhooks_received(conversations: Conversations) -> int:
    """The gateway's count of webhook requests received (/metrics does not touch the store)."""
    async with conversations.http.get(f"{conversations.gateway.url}/metrics") as response:
        text = await response.text()
    lines = [line for line in text.splitlines() if line.startswith(RECEIVED + "{")]
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in lines)


async def received_at_least(conversations: Conversations, count: int) -> bool:
    return await webhooks_received(conversations) >= count


async def run_fault(
    conversations: Conversations,
    fault: Fault,
    clear: Callable[[], Awaitable[None]],
    *,
    before_clear: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Post during the fault (already on), check /readyz, clear it, then check the recovery."""
    gateway, http = conversations.gateway, conversations.http
    for _ in range(FAULT_ROUNDS):
        await conversations.fault_round(fault)
    assert fault.refused, f"{fault.name}: no delivery was refused, the fault did not bite"
    await wait_readyz(http, gateway, 503)
    if before_clear is not None:
        await before_clear()
    # A last round is in the gateway (waiting on the store, if the fault makes it wait) when
    # the fault clears: answers of either kind, each checked like the others.
    received = await webhooks_received(conversations)
    last_round = asyncio.create_task(conversations.fault_round(fault))
    await eventually(
        lambda: received_at_least(conversations, received + CHATS),
        "the last round in the gateway",
    )
    await clear()
    cleared = time.monotonic()
    await last_round
    fault.recovery_seconds = await wait_readyz(http, gateway, 200)
    # The platforms retry the refused deliveries; the accepted ones are posted again too (a
    # platform that missed the 200 would): each must stay a duplicate, answered once.
    await conversations.post_again(fault.posted)
    await conversations.answered()
    fault.answered_seconds = time.monotonic() - cleared
    await no_session_running(gateway)
    conversations.check_exactly_once()
    await check_nothing_stuck(gateway)
    print(f"\n{fault.summary()}")


# the faults


async def test_disk_full_refuses_deliveries_with_503_and_recovers_when_space_is_freed(
    start_gateway: StartGateway,
    store_fs: Tmpfs,
    platforms: Platforms,
    http: aiohttp.ClientSession,
) -> None:
    gateway = await start_gateway(ECHO_AGENTS)
    conversations = Conversations(gateway, http, platforms)
    await conversations.normal_round()
    await conversations.answered()
    await conversations.recorded()
    store_fs.fill()

    async def clear() -> None:
        store_fs.free()

    await run_fault(conversations, Fault("disk full"), clear)


async def test_write_lock_held_during_commits_gets_503_and_leaves_no_session_running(
    start_gateway: StartGateway,
    aiohttp_server: AiohttpServer,
    platforms: Platforms,
    http: aiohttp.ClientSession,
) -> None:
    """Another process holds the write lock past the busy timeout, taken while every session's
    turn is about to commit. Issue 12: a turn whose commit, and then the restore of its
    session's status, failed on the lock left its session ``running`` until a restart."""
    model = SlowModel()
    model_server = await aiohttp_server(model.app(), host="127.0.0.1")
    gateway = await start_gateway(slow_agents(str(model_server.make_url("")).rstrip("/")))
    conversations = Conversations(gateway, http, platforms, reply=lambda tag: SLOW_ANSWER)
    await conversations.normal_round()  # acknowledged; every turn now waits for the model
    await eventually(lambda: model.calls >= CHATS, "every turn at the model")
    running = "SELECT count(*) FROM sessions WHERE status = 'running'"
    assert gateway.query(running) == [(CHATS,)]

    async def a_session_left_running() -> None:
        """Until a turn's commit and then its status restore failed on the lock: its session
        stays ``running`` with no turn under way (nothing can change it while the lock holds)."""
        failed: list[str] = []

        def turn_failed() -> bool:
            failed[:] = TURN_FAILED.findall(gateway.log_path.read_text(encoding="utf-8"))
            return bool(failed)

        await eventually(turn_failed, "a turn's commit to fail on the lock", seconds=30)
        status = "SELECT status FROM sessions WHERE session_id = ?"
        assert gateway.query(status, failed[0]) == [("running",)]

    async with write_lock(gateway.db) as lock:
        model.release.set()  # the turns answer and commit into the held lock
        await run_fault(
            conversations,
            Fault("write lock held while turns commit"),
            lock.release,
            before_clear=a_session_left_running,
        )


async def serve_until_exit(gateway: Gateway) -> tuple[int, str]:
    """Run ``gateway serve`` on ``gateway``'s config, expecting it to stop by itself."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "webhook_bot_gateway",
        "serve",
        "--config",
        str(gateway.config_path),
        cwd=gateway.directory,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=gateway.environment(),
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), START_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError("gateway serve kept running on a read-only store") from None
    return process.returncode or 0, output.decode(errors="replace")


async def test_read_only_store_stops_the_start_with_a_clear_error_and_serves_once_writable(
    start_gateway: StartGateway,
    store_fs: Tmpfs,
    platforms: Platforms,
    http: aiohttp.ClientSession,
) -> None:
    """The store became read-only while the gateway was stopped (see the module docstring)."""
    gateway = await start_gateway(ECHO_AGENTS)
    conversations = Conversations(gateway, http, platforms)
    await conversations.normal_round()
    await conversations.answered()
    assert await gateway.stop() == 0
    remounted = store_fs.remount("ro")
    assert remounted.returncode == 0, remounted.stderr

    status, output = await serve_until_exit(gateway)
    assert status == 1, output
    assert "error: store.url: the SQLite database is unavailable" in output, output
    assert "Traceback" not in output, output

    assert store_fs.remount("rw").returncode == 0
    began = time.monotonic()
    await gateway.start()
    print(
        f"\nread-only store: start refused with exit {status}; {output.strip()!r};"
        f" started {time.monotonic() - began:.2f} s after the remount rw"
    )
    await conversations.normal_round()
    await conversations.answered()
    conversations.check_exactly_once()
    await check_nothing_stuck(gateway)
