"""The sender against fake Bot API and Graph API servers on loopback, on a fake clock."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from tests.channels import telegram_fakes as tg
from tests.channels import whatsapp_fakes as wa
from webhook_bot_gateway.channels import ChannelAdapter, OutboundMessage, SendResult
from webhook_bot_gateway.channels.telegram import TelegramAdapter
from webhook_bot_gateway.channels.whatsapp import WhatsAppAdapter
from webhook_bot_gateway.gateway._metrics import Metrics
from webhook_bot_gateway.gateway._pipeline._sender import OUTBOX, Sender
from webhook_bot_gateway.gateway.config import SenderConfig
from webhook_bot_gateway.store import PARKED_ERROR, OutboxIn, OutboxItem, SQLiteStore, StoreError

from .pipeline_helpers import FakeClock

CHAT = "4242"
USER = "16505551234"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(tmp_path / "gateway.db") as opened:
        yield opened


@pytest.fixture
async def bot_api(aiohttp_server: AiohttpServer) -> AsyncIterator[tuple[tg.FakeBotApi, str]]:
    fake = tg.FakeBotApi()
    server = await aiohttp_server(fake.app())
    yield fake, str(server.make_url("")).rstrip("/")
    fake.release.set()


@pytest.fixture
async def telegram(bot_api: tuple[tg.FakeBotApi, str]) -> AsyncIterator[TelegramAdapter]:
    async with TelegramAdapter(tg.config(bot_api[1], timeout=0.5)) as adapter:
        yield adapter


@pytest.fixture
def bots(bot_api: tuple[tg.FakeBotApi, str]) -> tg.FakeBotApi:
    return bot_api[0]


@pytest.fixture
async def graph(aiohttp_server: AiohttpServer) -> AsyncIterator[tuple[wa.FakeGraph, str]]:
    fake = wa.FakeGraph()
    server = await aiohttp_server(fake.app())
    yield fake, str(server.make_url("/"))
    fake.release.set()


@pytest.fixture
async def whatsapp(graph: tuple[wa.FakeGraph, str]) -> AsyncIterator[WhatsAppAdapter]:
    async with aiohttp.ClientSession() as session:
        yield WhatsAppAdapter(wa.config(graph[1], request_timeout=0.3), session)


class Relay:
    """A sender on a fake clock whose passes run until their sends have finished."""

    def __init__(
        self,
        store: SQLiteStore,
        adapters: dict[str, ChannelAdapter],
        batch: int = 200,
        max_in_flight: int = 64,
        **config: Any,
    ) -> None:
        self.store = store
        self.clock = FakeClock(time.time() + 60)  # rows stored from now on are due at once
        self.metrics = Metrics()
        self.sender = Sender(
            store,
            adapters,
            SenderConfig(**config),
            metrics=self.metrics,
            clock=self.clock,
            jitter=lambda: 1.0,  # backoff at its full value: base * 2 ** (attempts - 1)
            fatal_pause=600,
            batch=batch,
            max_in_flight=max_in_flight,
        )

    async def step(self) -> float | None:
        next_at = await self.sender.step()
        await self.sender.flush()
        return next_at

    async def steps(self, count: int) -> None:
        for _ in range(count):
            await self.step()

    def count(self, outcome: str) -> float:
        return sum(
            self.metrics.value(OUTBOX, outcome=outcome, channel=c) for c in ("telegram", "whatsapp")
        )


async def queue(
    store: SQLiteStore,
    text: str,
    *,
    channel: str = "telegram",
    account: str = "support",
    chat_id: str = CHAT,
) -> OutboxItem:
    session = await store.get_or_create_session(channel, account, chat_id, "triage")
    message = OutboundMessage(channel=channel, account=account, chat_id=chat_id, text=text)
    payload = message.model_dump(mode="json")
    return await store.enqueue_outbox(
        OutboxIn(session.session_id, channel, account, chat_id, payload)
    )


async def row(store: SQLiteStore, item: OutboxItem) -> OutboxItem:
    assert item.session_id is not None
    [found] = [r for r in await store.list_outbox(item.session_id) if r.id == item.id]
    return found


def texts(fake: tg.FakeBotApi) -> list[str]:
    return [c.fields["text"] for c in fake.calls if c.method == "sendMessage"]


async def test_sender_sends_a_due_reply_and_records_the_platform_ids(
    store: SQLiteStore, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    relay = Relay(store, {"telegram": telegram})
    item = await queue(store, "Hello")
    await relay.step()
    sent = await row(store, item)
    assert (sent.state, sent.platform_ids, sent.attempts) == ("sent", ("5001",), 1)
    assert [(c.method, c.fields["chat_id"], c.fields["text"]) for c in bots.calls] == [
        ("sendMessage", CHAT, "Hello")
    ]
    assert relay.count("sent") == 1
    await relay.steps(2)
    assert len(bots.calls) == 1  # never twice


async def test_sender_waits_out_the_retry_after_of_a_429(
    store: SQLiteStore, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    bots.script("sendMessage", tg.error(429, "Too Many Requests: retry after 5", retry_after=5))
    relay = Relay(store, {"telegram": telegram}, backoff_base_seconds=0.5)
    item = await queue(store, "Hello")
    start = relay.clock.now
    await relay.step()
    waiting = await row(store, item)
    assert (waiting.state, waiting.attempts) == ("pending", 1)
    assert waiting.next_attempt_at == pytest.approx(start + 5)
    assert await relay.step() == pytest.approx(start + 5)  # when the loop looks again
    relay.clock.now = start + 4.9
    await relay.step()
    assert len(bots.calls) == 1
    relay.clock.now = start + 5
    await relay.step()
    assert texts(bots) == ["Hello", "Hello"]
    assert (await row(store, item)).state == "sent"
    assert (relay.count("retried"), relay.count("sent")) == (1, 1)


async def test_sender_retries_a_5xx_with_exponential_backoff(
    store: SQLiteStore, whatsapp: WhatsAppAdapter, graph: tuple[wa.FakeGraph, str]
) -> None:
    fake = graph[0]
    fake.graph_error(500, 1, "An unknown error occurred")
    fake.graph_error(503, 2, "Service temporarily unavailable")
    relay = Relay(store, {"whatsapp": whatsapp}, backoff_base_seconds=2)
    item = await queue(store, "Hi", channel="whatsapp", account=wa.NUMBER_A, chat_id=USER)
    delays = []
    for _ in range(2):
        before = relay.clock.now
        await relay.step()
        waiting = await row(store, item)
        delays.append(waiting.next_attempt_at - before)
        relay.clock.now = waiting.next_attempt_at
    await relay.step()
    assert delays == [pytest.approx(2), pytest.approx(4)]
    done = await row(store, item)
    assert (done.state, done.platform_ids, done.attempts) == ("sent", ("wamid.out1",), 3)
    assert len(fake.requests) == 3


async def test_sender_follows_metas_4_to_the_x_schedule_for_the_pair_rate_limit(
    store: SQLiteStore, whatsapp: WhatsAppAdapter, graph: tuple[wa.FakeGraph, str]
) -> None:
    """131056 (too many messages to one user): "retry after 4^X seconds (starting with X=0 and
    increasing X by 1 after each failure)", capped like the backoff; other users go on."""
    fake = graph[0]
    for _ in range(6):
        fake.graph_error(400, 131056, "(#131056) (Business Account, Consumer Account) pair rate")
    relay = Relay(store, {"whatsapp": whatsapp}, backoff_max_seconds=300)
    item = await queue(store, "Hi", channel="whatsapp", account=wa.NUMBER_A, chat_id=USER)
    delays = []
    for _ in range(6):
        before = relay.clock.now
        await relay.step()
        waiting = await row(store, item)
        assert waiting.state == "pending"
        delays.append(waiting.next_attempt_at - before)
        relay.clock.now = waiting.next_attempt_at
    await relay.step()
    assert delays == [pytest.approx(d) for d in (1, 4, 16, 64, 256, 300)]
    done = await row(store, item)
    assert (done.state, done.attempts) == ("sent", 7)


async def test_sender_marks_a_hung_send_uncertain_and_never_retries_it(
    store: SQLiteStore, whatsapp: WhatsAppAdapter, graph: tuple[wa.FakeGraph, str]
) -> None:
    fake = graph[0]
    fake.answers.append(wa.HANG)
    relay = Relay(store, {"whatsapp": whatsapp})
    item = await queue(store, "Hi", channel="whatsapp", account=wa.NUMBER_A, chat_id=USER)
    await relay.step()
    uncertain = await row(store, item)
    assert (uncertain.state, uncertain.attempts) == ("uncertain", 1)
    assert "may have gone out" in (uncertain.error or "")
    relay.clock.now += 86_400
    await relay.steps(2)
    assert len(fake.requests) == 1
    assert relay.count("uncertain") == 1


async def test_sender_records_a_permanent_error_on_the_row_and_the_session(
    store: SQLiteStore, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    bots.script("sendMessage", tg.error(403, "Forbidden: bot was kicked from the group chat"))
    relay = Relay(store, {"telegram": telegram})
    item = await queue(store, "Hello")
    await relay.step()
    failed = await row(store, item)
    assert failed.state == "failed"
    assert "kicked from the group" in (failed.error or "")
    assert item.session_id is not None
    events = await store.list_events(item.session_id)
    [event] = [e for e in events if e.kind == "send_failed"]
    assert event.detail["outbox_id"] == item.id
    [status] = [e.detail for e in events if e.kind == "status"]
    assert (status["outbox_id"], status["state"], status["outcome"]) == (
        item.id,
        "failed",
        "failed",
    )
    assert "kicked from the group" in status["error"]
    relay.clock.now += 86_400
    await relay.steps(2)
    assert len(bots.calls) == 1
    assert relay.count("failed") == 1


async def test_sender_dead_letters_a_reply_after_max_attempts(
    store: SQLiteStore, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    bots.script("sendMessage", *[tg.error(500, "Internal Server Error")] * 3)
    relay = Relay(store, {"telegram": telegram}, max_attempts=3, backoff_base_seconds=1)
    item = await queue(store, "Hello")
    for _ in range(3):
        await relay.step()
        relay.clock.now += 3600
    [dead] = await store.list_dead_outbox()
    assert (dead.id, dead.state, dead.attempts) == (item.id, "dead", 3)
    assert (relay.count("retried"), relay.count("dead")) == (2, 1)
    await relay.step()
    assert len(bots.calls) == 3


async def test_sender_follows_a_migrated_group_to_its_new_chat(
    store: SQLiteStore, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    bots.script(
        "sendMessage",
        tg.error(400, "Bad Request: group chat was upgraded", migrate_to_chat_id=-100777),
    )
    relay = Relay(store, {"telegram": telegram})
    item = await queue(store, "Hello", chat_id="-555")
    await relay.step()
    await relay.step()
    assert item.session_id is not None
    [moved] = await store.list_outbox(item.session_id)  # the same row, sent once, elsewhere
    assert (moved.id, moved.state, moved.chat_id) == (item.id, "sent", "-100777")
    assert moved.payload["chat_id"] == "-100777"
    assert [c.fields["chat_id"] for c in bots.calls] == ["-555", "-100777"]
    session = await store.get_session(item.session_id)
    assert session is not None
    assert session.metadata["migrated_to_chat_id"] == "-100777"


async def test_sender_pauses_an_account_whose_credentials_fail_and_keeps_its_replies(
    store: SQLiteStore,
    telegram: TelegramAdapter,
    bots: tg.FakeBotApi,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bots.script("sendMessage", tg.error(401, "Unauthorized"))
    relay = Relay(store, {"telegram": telegram})
    first = await queue(store, "one", chat_id="1")
    with caplog.at_level("ERROR", logger="gateway.sender"):
        await relay.step()
    [line] = [r.getMessage() for r in caplog.records if "paused" in r.getMessage()]
    assert line.startswith("telegram account support paused for 600s, its replies kept: ")
    kept = await row(store, first)  # not this reply's fault: it waits with the account
    assert (kept.state, kept.attempts) == ("pending", 1)
    assert "Unauthorized" in (kept.error or "")
    second = await queue(store, "two", chat_id="2")
    other = await queue(store, "three", account="sales", chat_id="3")
    await relay.steps(2)
    assert (await row(store, second)).state == "pending"  # the account is paused
    assert (await row(store, other)).state == "sent"  # another bot is not
    relay.clock.now += 600
    await relay.steps(2)
    assert (await row(store, first)).state == "sent"
    assert (await row(store, second)).state == "sent"
    assert sorted(texts(bots)) == ["one", "one", "three", "two"]


async def test_sender_gives_up_on_a_reply_whose_account_stays_broken(
    store: SQLiteStore, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    bots.script("sendMessage", *[tg.error(401, "Unauthorized")] * 3)
    relay = Relay(store, {"telegram": telegram}, max_attempts=3)
    item = await queue(store, "one")
    for _ in range(3):
        await relay.step()
        relay.clock.now += 600
    assert (await row(store, item)).state == "dead"
    assert relay.count("dead") == 1


async def test_sender_keeps_a_chats_replies_in_order_across_a_retry(
    store: SQLiteStore, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    bots.script("sendMessage", tg.error(429, "Too Many Requests: retry after 2", retry_after=2))
    relay = Relay(store, {"telegram": telegram}, backoff_base_seconds=0.1)
    await queue(store, "first")
    await queue(store, "second")
    await queue(store, "elsewhere", chat_id="7")
    await relay.steps(3)
    assert texts(bots) == ["first", "elsewhere"]  # "second" waits behind "first"
    relay.clock.now += 2
    await relay.steps(3)
    assert texts(bots) == ["first", "elsewhere", "first", "second"]


async def test_sender_paces_one_chat_to_its_rate_limit(
    store: SQLiteStore, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    relay = Relay(store, {"telegram": telegram}, telegram_chat_per_second=1, burst=2)
    for n in range(4):
        await queue(store, f"m{n}")
    start = relay.clock.now
    await relay.steps(2)
    next_at = await relay.step()
    assert texts(bots) == ["m0", "m1"]
    assert next_at == pytest.approx(start + 1)
    relay.clock.now = start + 1
    await relay.steps(2)
    assert texts(bots) == ["m0", "m1", "m2"]
    relay.clock.now = start + 2
    await relay.steps(2)
    assert texts(bots) == ["m0", "m1", "m2", "m3"]


async def test_sender_after_a_restart_keeps_the_stored_retry_time(
    store: SQLiteStore, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    bots.script("sendMessage", tg.error(429, "Too Many Requests: retry after 30", retry_after=30))
    first = Relay(store, {"telegram": telegram})
    item = await queue(store, "Hello")
    await first.step()
    await first.sender.stop(1.0)
    second = Relay(store, {"telegram": telegram})  # a new process: nothing in memory
    second.clock.now = first.clock.now + 29
    await second.step()
    assert len(bots.calls) == 1
    second.clock.now = first.clock.now + 30
    await second.step()
    assert (await row(store, item)).state == "sent"


async def test_sender_run_sends_what_a_wake_up_announces(
    store: SQLiteStore, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    wake = asyncio.Event()
    notifying = Notifying(telegram)
    adapters: dict[str, Any] = {"telegram": notifying}
    sender = Sender(store, adapters, SenderConfig(), metrics=Metrics(), wake=wake)
    task = asyncio.create_task(sender.run(poll_seconds=60))
    try:
        item = await queue(store, "Hello")
        wake.set()  # as the dispatcher does after a commit; the next poll is a minute away
        await asyncio.wait_for(notifying.sent.wait(), 5)
        # The send records its outcome after the platform answered: wait for that, not for
        # stop's grace, which cuts a send still in flight (a slow write under load).
        await asyncio.wait_for(sender.flush(), 10)
    finally:
        await sender.stop(1.0)
        await asyncio.wait_for(task, 5)
    assert texts(bots) == ["Hello"]
    assert (await row(store, item)).state == "sent"


class Notifying:
    """Passes sends through and tells when one went out."""

    def __init__(self, inner: TelegramAdapter) -> None:
        self.inner = inner
        self.name = inner.name
        self.sent = asyncio.Event()

    async def send(self, message: OutboundMessage) -> SendResult:
        result = await self.inner.send(message)
        self.sent.set()
        return result


async def test_sender_looks_past_a_batch_of_waiting_replies_for_other_chats(
    store: SQLiteStore, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    relay = Relay(store, {"telegram": telegram}, batch=2, telegram_chat_per_second=1, burst=1)
    for n in range(3):
        await queue(store, f"busy {n}")
    for chat in ("7", "8"):
        await queue(store, "waiting", chat_id=chat)
        relay.sender.limiter.take("telegram", "support", chat)  # they just got a message
    await queue(store, "other", chat_id="9")
    now = relay.clock.now
    assert await relay.step() == now  # sent "busy 0"; the batch was full: look again at once
    assert await relay.step() == now  # "busy 1", chats 7 and 8 wait: read further
    await relay.step()  # read further: found "other"
    assert texts(bots) == ["busy 0", "other"]


async def test_sender_never_sends_a_delivered_part_of_a_split_reply_again(
    store: SQLiteStore, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    async def first_part_ok(request: web.Request, call: tg.Recorded) -> web.StreamResponse:
        chat = {"id": int(CHAT), "type": "private"}
        return tg.ok({"message_id": 7001, "date": 1735689600, "chat": chat, "text": "part"})

    bots.script("sendMessage", first_part_ok, tg.error(500, "Internal Server Error"))
    relay = Relay(store, {"telegram": telegram}, telegram_chat_per_second=100, burst=10)
    first, second = "a" * 4000, "b" * 4000
    item = await queue(store, f"{first}\n\n{second}")
    await relay.step()  # part 1 delivered, part 2 failed: retried later
    pending = await row(store, item)
    assert (pending.state, pending.platform_ids) == ("pending", ("7001",))
    assert pending.payload["skip_parts"] == 1
    relay.clock.now += 60
    await relay.step()
    sent = await row(store, item)
    assert sent.state == "sent"
    assert sent.platform_ids[0] == "7001"
    assert len(sent.platform_ids) == 2
    assert texts(bots) == [first, second, second]  # the first part went out exactly once


async def test_a_long_reply_is_paced_part_by_part_like_separate_replies(
    store: SQLiteStore, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    """Six parts at one message a second with a burst of two: two now, then one a second,
    the delivered parts recorded on the row each time; a reply queued after it follows."""
    relay = Relay(store, {"telegram": telegram}, telegram_chat_per_second=1, burst=2)
    chunks = [letter * 4000 for letter in "abcdef"]
    item = await queue(store, "\n\n".join(chunks))
    await queue(store, "after")
    start = relay.clock.now
    await relay.step()
    assert texts(bots) == chunks[:2]
    pending = await row(store, item)
    assert (pending.state, pending.payload["skip_parts"], len(pending.platform_ids)) == (
        "pending",
        2,
        2,
    )
    assert pending.claimed_by is None  # the next try is not taken for a crash-window repeat
    assert await relay.step() == pytest.approx(start + 1)  # nothing more before then
    assert len(texts(bots)) == 2
    for second in range(1, 5):
        relay.clock.now = start + second
        await relay.steps(2)
        assert texts(bots) == chunks[: 2 + second]
    relay.clock.now = start + 5
    await relay.steps(2)
    assert texts(bots) == [*chunks, "after"]
    sent = await row(store, item)
    assert (sent.state, len(sent.platform_ids)) == ("sent", 6)
    assert relay.count("sent") == 2


async def test_sender_logs_a_reply_sent_again_after_an_attempt_that_recorded_no_outcome(
    tmp_path: Path,
    store: SQLiteStore,
    telegram: TelegramAdapter,
    bots: tg.FakeBotApi,
    caplog: pytest.LogCaptureFixture,
) -> None:
    exposed = await queue(store, "Hello")
    fresh = await queue(store, "Hi", chat_id="4343")
    # Another process claimed the row for a send, then died before recording what happened.
    async with SQLiteStore(tmp_path / "gateway.db") as died:
        assert await died.claim_outbox(exposed.id, 120)
    caplog.set_level(logging.WARNING, logger="gateway.sender")
    await Relay(store, {"telegram": telegram}).step()
    assert sorted(texts(bots)) == ["Hello", "Hi"]
    assert [(await row(store, item)).state for item in (exposed, fresh)] == ["sent", "sent"]
    again = [r.getMessage() for r in caplog.records if "sending again" in r.getMessage()]
    assert again == [
        f"outbox row {exposed.id}: sending again after an attempt whose outcome was not"
        " recorded (the crash window): the user may see it twice"
    ]


class Claims(SQLiteStore):
    """The store, recording each claim write; ``before_claim`` runs between a pass's read and
    its claim (where another process can take a row)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.claimed: list[list[int]] = []
        self.before_claim: Any = None

    async def claim_outbox_many(self, outbox_ids: Any, seconds: float) -> list[int]:
        if self.before_claim is not None:
            await self.before_claim()
        self.claimed.append(list(outbox_ids))
        return await super().claim_outbox_many(outbox_ids, seconds)


async def test_sender_claims_the_replies_of_a_pass_in_one_write(
    tmp_path: Path, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    async with Claims(tmp_path / "claims.db") as store:
        rows = [await queue(store, f"to {chat}", chat_id=chat) for chat in ("1", "2", "3")]
        await Relay(store, {"telegram": telegram}).step()
        assert store.claimed == [[item.id for item in rows]]
        assert sorted(texts(bots)) == ["to 1", "to 2", "to 3"]


async def test_sender_leaves_a_reply_another_process_claimed_meanwhile_to_it(
    tmp_path: Path, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    async with Claims(tmp_path / "claims.db") as store:
        mine = await queue(store, "mine", chat_id="1")
        theirs = await queue(store, "theirs", chat_id="2")
        async with SQLiteStore(tmp_path / "claims.db") as other:
            await other.renew_lease(3600)

            async def take() -> None:
                assert await other.claim_outbox(theirs.id, 120)

            store.before_claim = take
            relay = Relay(store, {"telegram": telegram}, telegram_chat_per_second=1, burst=1)
            await relay.step()
            store.before_claim = None
            assert texts(bots) == ["mine"]
            # The token taken for the row left to the other process came back; mine's did not.
            assert relay.sender.limiter.wait("telegram", "support", "2") == 0
            assert relay.sender.limiter.wait("telegram", "support", "1") > 0
            assert [(await row(store, item)).state for item in (mine, theirs)] == [
                "sent",
                "pending",
            ]
            assert (await row(store, theirs)).claimed_by == other.owner
            await relay.step()  # still the other process's while its claim runs
            assert texts(bots) == ["mine"]


async def test_a_claim_that_cannot_be_written_is_logged_once_and_its_rows_wait(
    tmp_path: Path,
    telegram: TelegramAdapter,
    bots: tg.FakeBotApi,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failed claim write sends nothing and says so in one line for the pass (not a line per
    row, nor "could not record the outcome"); the rows stay pending and the next pass sends
    them."""
    async with Claims(tmp_path / "claims.db") as store:
        rows = [await queue(store, f"to {chat}", chat_id=chat) for chat in ("1", "2", "3")]

        async def refuse() -> None:
            raise StoreError("the disk is full")

        store.before_claim = refuse
        relay = Relay(store, {"telegram": telegram})
        with caplog.at_level(logging.ERROR, logger="gateway.sender"):
            await relay.step()
        assert texts(bots) == []
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
            "could not claim 3 outbox row(s) for sending: the disk is full"
        ]
        assert [(await row(store, item)).state for item in rows] == ["pending"] * 3
        store.before_claim = None
        await relay.step()
        assert sorted(texts(bots)) == ["to 1", "to 2", "to 3"]


async def test_sender_parks_every_reply_of_a_user_who_blocked_the_bot(
    store: SQLiteStore, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    """Telegram's 403 "blocked by the user": the session is marked, this reply and the next
    ones are parked (pending, not tried again), not failed."""
    bots.script("sendMessage", tg.error(403, "Forbidden: bot was blocked by the user"))
    relay = Relay(store, {"telegram": telegram})
    first = await queue(store, "Hello")
    second = await queue(store, "Are you there?")
    await relay.step()
    relay.clock.now += 86_400
    await relay.steps(2)
    assert texts(bots) == ["Hello"]  # one attempt, then nothing
    assert first.session_id is not None
    rows = await store.list_outbox(first.session_id)
    assert [(r.id, r.state, r.error) for r in rows] == [
        (first.id, "pending", PARKED_ERROR),
        (second.id, "pending", PARKED_ERROR),
    ]
    session = await store.get_session(first.session_id)
    assert session is not None
    assert session.metadata["blocked"] is True
    [event] = [e for e in await store.list_events(first.session_id) if e.kind == "user_blocked"]
    assert (event.detail["reason"], event.detail["parked"]) == ("blocked", 2)
    assert relay.count("parked") == 1
    assert relay.count("failed") == 0


async def test_sender_parks_the_replies_of_an_unreachable_whatsapp_user(
    store: SQLiteStore, whatsapp: WhatsAppAdapter, graph: tuple[wa.FakeGraph, str]
) -> None:
    fake = graph[0]
    fake.graph_error(400, 131026, "Message undeliverable")
    relay = Relay(store, {"whatsapp": whatsapp})
    item = await queue(store, "Hi", channel="whatsapp", account=wa.NUMBER_A, chat_id=USER)
    await relay.step()
    relay.clock.now += 86_400
    await relay.steps(2)
    assert len(fake.requests) == 1
    parked = await row(store, item)
    assert (parked.state, parked.error) == ("pending", PARKED_ERROR)
    assert item.session_id is not None
    events = await store.list_events(item.session_id)
    [event] = [e.detail for e in events if e.kind == "user_blocked"]
    assert event["reason"] == "unreachable"
    assert "131026" in event["error"]


async def test_a_send_in_flight_does_not_hide_the_next_retry_time_of_another_chat(
    store: SQLiteStore, telegram: TelegramAdapter, bots: tg.FakeBotApi
) -> None:
    """The loop sleeps until another chat's retry is due, not a whole poll: the row in flight
    here (due already, its chat busy) is not the next thing to wait for."""
    bots.script("sendMessage", tg.hang(bots))
    relay = Relay(store, {"telegram": telegram})
    await queue(store, "stuck", chat_id="1")
    retrying = await queue(store, "again soon", chat_id="2")
    retry_at = relay.clock.now + 0.7
    await store.outbox_retry(retrying.id, next_attempt_at=retry_at, error="429")
    assert await relay.sender.step() == pytest.approx(retry_at, abs=0.001)  # chat 1's send starts
    await asyncio.wait_for(bots.hanging.wait(), 10)
    assert await relay.sender.step() == pytest.approx(retry_at, abs=0.001)  # it is in flight
    bots.release.set()
    await relay.sender.flush()


async def test_a_parked_reply_released_goes_out_without_the_crash_window_line(
    store: SQLiteStore,
    telegram: TelegramAdapter,
    bots: tg.FakeBotApi,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The platform refused the attempt (blocked): parking ends the row's claim, so the send
    after the user is back is not logged as a possible repeat of an unrecorded attempt."""
    bots.script("sendMessage", tg.error(403, "Forbidden: bot was blocked by the user"))
    relay = Relay(store, {"telegram": telegram})
    item = await queue(store, "Hello")
    await relay.step()
    parked = await row(store, item)
    assert (parked.error, parked.claimed_by) == (PARKED_ERROR, None)
    assert item.session_id is not None
    caplog.set_level(logging.WARNING, logger="gateway.sender")
    assert await store.unpark_outbox(item.session_id) == 1  # the user wrote again
    await relay.step()
    assert texts(bots) == ["Hello", "Hello"]
    assert (await row(store, item)).state == "sent"
    assert [r.getMessage() for r in caplog.records if "sending again" in r.getMessage()] == []


async def test_a_hung_platform_holds_its_own_sends_not_the_other_platforms(
    store: SQLiteStore,
    whatsapp: WhatsAppAdapter,
    graph: tuple[wa.FakeGraph, str],
    telegram: TelegramAdapter,
    bots: tg.FakeBotApi,
) -> None:
    """Every send slot of WhatsApp is taken by a send that hangs, and older WhatsApp replies
    fill a page: the next pass reads past them (their channel is left out of the read) and
    sends the Telegram reply at once."""
    fake = graph[0]
    fake.answers.extend([wa.HANG] * 3)
    bots.script("sendMessage", tg.hang(bots))  # so the test sees its send start
    relay = Relay(store, {"whatsapp": whatsapp, "telegram": telegram}, batch=2, max_in_flight=1)
    for n in range(3):
        await queue(store, f"wa {n}", channel="whatsapp", account=wa.NUMBER_A, chat_id=f"10{n}")
    await queue(store, "tg", chat_id="200")
    assert await relay.sender.step() == relay.clock.now  # wa 0 hangs; the page was full
    await relay.sender.step()
    await asyncio.wait_for(bots.hanging.wait(), 10)  # the Telegram reply is on its way
    assert texts(bots) == ["tg"]
    assert len(fake.requests) == 1  # no second WhatsApp send took a slot meanwhile
    fake.release.set()
    bots.release.set()
    await relay.sender.flush()
