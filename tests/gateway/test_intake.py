"""The intake: stored deliveries -> inbox rows, statuses, memberships, quarantine (real store)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pytest_aiohttp import AiohttpServer

from tests.channels import telegram_fakes as tg
from tests.channels import whatsapp_fakes as wa
from webhook_bot_gateway.channels import ChannelAdapter
from webhook_bot_gateway.channels.telegram import USERNAME_UNKNOWN, TelegramAdapter
from webhook_bot_gateway.channels.whatsapp import WhatsAppAdapter
from webhook_bot_gateway.gateway._metrics import DELIVERY_FAILURES, TEMPLATE_UPDATES, Metrics
from webhook_bot_gateway.gateway._pipeline._handed import HandedDeliveries
from webhook_bot_gateway.gateway._pipeline._intake import (
    IGNORED,
    QUARANTINED,
    Intake,
    ParsedDelivery,
)
from webhook_bot_gateway.gateway._pipeline._pacer import WINDOW, AckPacer
from webhook_bot_gateway.gateway._pipeline._username_replay import UsernameReplay
from webhook_bot_gateway.store import (
    Delivery,
    DeliveryIn,
    OutboxIn,
    SessionInbox,
    SQLiteStore,
    make_session_id,
)

from .pipeline_helpers import FakeClock, rows
from .test_pacer import Clock

NUMBER = wa.NUMBER_A
IMAGE_FIXTURE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "whatsapp" / "image_with_caption.json"
)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "gateway.db"


@pytest.fixture
async def store(db: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(db) as opened:
        yield opened


@pytest.fixture
async def bot_api(aiohttp_server: AiohttpServer) -> AsyncIterator[tuple[tg.FakeBotApi, str]]:
    fake = tg.FakeBotApi()
    server = await aiohttp_server(fake.app())
    yield fake, str(server.make_url("")).rstrip("/")
    fake.release.set()


@pytest.fixture
async def adapters(
    bot_api: tuple[tg.FakeBotApi, str],
) -> AsyncIterator[dict[str, ChannelAdapter]]:
    async with (
        aiohttp.ClientSession() as session,
        TelegramAdapter(tg.config(bot_api[1])) as telegram,
    ):
        yield {"telegram": telegram, "whatsapp": WhatsAppAdapter(wa.config(), session)}


class Woken:
    def __init__(self) -> None:
        self.sessions: list[str] = []
        self.event = asyncio.Event()

    def __call__(self, news: Sequence[SessionInbox]) -> None:
        self.sessions.extend(new.session_id for new in news)
        self.event.set()

    async def until(self, count: int) -> None:
        async with asyncio.timeout(5):
            while len(self.sessions) < count:
                self.event.clear()
                await self.event.wait()


def make_intake(
    store: SQLiteStore, adapters: dict[str, ChannelAdapter]
) -> tuple[Intake, Woken, Metrics]:
    woken, metrics = Woken(), Metrics()
    intake = Intake(store, adapters, starting_agent="triage", metrics=metrics, on_inbox=woken)
    return intake, woken, metrics


def wa_messages(*messages: tuple[str, str, str], statuses: Sequence[dict[str, Any]] = ()) -> bytes:
    """A WhatsApp delivery of text messages ``(wamid, wa_id, text)`` and statuses."""
    value: dict[str, Any] = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550001111", "phone_number_id": NUMBER},
    }
    if messages:
        value["contacts"] = [{"profile": {"name": "Ann"}, "wa_id": m[1]} for m in messages]
        value["messages"] = [
            {
                "from": user,
                "id": wamid,
                "timestamp": "1735689600",
                "type": "text",
                "text": {"body": t},
            }
            for wamid, user, t in messages
        ]
    if statuses:
        value["statuses"] = list(statuses)
    body = {
        "object": "whatsapp_business_account",
        "entry": [{"id": "1", "changes": [{"field": "messages", "value": value}]}],
    }
    return json.dumps(body).encode()


async def store_delivery(
    store: SQLiteStore, adapter: ChannelAdapter, body: bytes, account: str | None = None
) -> frozenset[str]:
    """Ingest as the webhook handler does; returns the keys this delivery claimed."""
    keys = tuple(adapter.delivery_keys(body, account))
    [result] = await store.ingest([DeliveryIn(adapter.name, account, body, keys)])
    return result.new_keys


def inbox(db: Path) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in rows(db, "SELECT session_id, dedup_key FROM inbox ORDER BY id")]


async def test_intake_turns_a_whatsapp_delivery_into_inbox_rows_and_wakes_the_sessions(
    store: SQLiteStore, db: Path, adapters: dict[str, ChannelAdapter]
) -> None:
    body = wa_messages(("wamid.1", "111", "hi"), ("wamid.2", "222", "hello"))
    await store_delivery(store, adapters["whatsapp"], body)
    intake, woken, _ = make_intake(store, adapters)
    assert await intake.step() == 1
    ann, bob = (
        make_session_id("whatsapp", NUMBER, "111"),
        make_session_id("whatsapp", NUMBER, "222"),
    )
    assert [sid for sid, _ in inbox(db)] == [ann, bob]
    assert sorted(woken.sessions) == sorted([ann, bob])
    [event] = [r.event for r in await store.pending_inbox(ann)]
    assert (event["text"], event["message_id"], event["channel"]) == ("hi", "wamid.1", "whatsapp")
    session = await store.get_session(ann)
    assert session is not None
    assert session.active_agent == "triage"
    assert rows(db, "SELECT count(*) FROM deliveries") == [(0,)]  # its body is not kept
    assert await intake.step() == 0


async def test_intake_keeps_only_the_events_whose_keys_the_delivery_claimed_first(
    store: SQLiteStore, db: Path, adapters: dict[str, ChannelAdapter]
) -> None:
    whatsapp = adapters["whatsapp"]
    first = await store_delivery(store, whatsapp, wa_messages(("wamid.1", "111", "one")))
    # Meta sends wamid.1 again, batched with a new message: only wamid.2 is this one's.
    second = await store_delivery(
        store, whatsapp, wa_messages(("wamid.1", "111", "one"), ("wamid.2", "111", "two"))
    )
    assert len(first) == len(second) == 1
    intake, _, _ = make_intake(store, adapters)
    await intake.step()
    texts = [r.event["text"] for r in await store.pending_inbox(inbox(db)[0][0])]
    assert texts == ["one", "two"]


async def test_intake_quarantines_a_delivery_the_parser_refuses(
    store: SQLiteStore, db: Path, adapters: dict[str, ChannelAdapter]
) -> None:
    body = b'{"object": "whatsapp_business_account", "entry": "not a list"}'
    await store.ingest([DeliveryIn("whatsapp", None, body, ("whatsapp:odd",))])
    intake, woken, metrics = make_intake(store, adapters)
    await intake.step()
    [item] = await store.list_quarantine()
    assert (item.channel, item.body) == ("whatsapp", body)
    assert item.reason
    assert inbox(db) == []
    assert woken.sessions == []
    assert metrics.value(QUARANTINED, channel="whatsapp") == 1
    assert rows(db, "SELECT count(*) FROM deliveries") == [(0,)]


async def test_intake_applies_a_status_to_the_reply_it_reports_on(
    store: SQLiteStore, db: Path, adapters: dict[str, ChannelAdapter]
) -> None:
    session = await store.get_or_create_session("whatsapp", NUMBER, "111", "triage")
    payload = {"channel": "whatsapp", "account": NUMBER, "chat_id": "111", "text": "hi"}
    item = await store.enqueue_outbox(
        OutboxIn(session.session_id, "whatsapp", NUMBER, "111", payload)
    )
    await store.outbox_sent(item.id, ["wamid.out1"])
    status = {
        "id": "wamid.out1",
        "status": "delivered",
        "timestamp": "1735689601",
        "recipient_id": "111",
    }
    await store_delivery(store, adapters["whatsapp"], wa_messages(statuses=[status]))
    intake, woken, _ = make_intake(store, adapters)
    await intake.step()
    [updated] = await store.list_outbox(session.session_id)
    assert (updated.state, updated.delivery_state) == ("sent", "delivered")
    assert woken.sessions == []


async def test_intake_tells_the_operator_of_a_reply_that_failed_after_it_was_accepted(
    store: SQLiteStore,
    db: Path,
    adapters: dict[str, ChannelAdapter],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Meta accepts a reply and reports later, in a status, that it did not go out (131047:
    the 24-hour window): a WARNING line in Meta's words and a count by code, once."""
    session = await store.get_or_create_session("whatsapp", NUMBER, "111", "triage")
    payload = {"channel": "whatsapp", "account": NUMBER, "chat_id": "111", "text": "hi"}
    item = await store.enqueue_outbox(
        OutboxIn(session.session_id, "whatsapp", NUMBER, "111", payload)
    )
    await store.outbox_sent(item.id, ["wamid.out1"])
    error = {
        "code": 131047,
        "title": "Re-engagement message",
        "message": "Re-engagement message",
        "error_data": {"details": "Message failed to send because more than 24 hours have passed"},
    }
    status = {
        "id": "wamid.out1",
        "status": "failed",
        "timestamp": "1735689601",
        "recipient_id": "111",
        "errors": [error],
    }
    body = wa_messages(statuses=[status])
    await store_delivery(store, adapters["whatsapp"], body)
    await store_delivery(store, adapters["whatsapp"], body)  # Meta's duplicate: no new line
    intake, _, metrics = make_intake(store, adapters)
    with caplog.at_level("INFO", logger="gateway.intake"):
        await intake.step()
    [record] = [r for r in caplog.records if "not delivered" in r.getMessage()]
    assert record.levelname == "WARNING"
    assert record.getMessage() == (
        f"whatsapp message wamid.out1 of session {session.session_id} was accepted, then not"
        " delivered: 131047: Re-engagement message: Re-engagement message: Message failed to"
        " send because more than 24 hours have passed"
    )
    assert metrics.value(DELIVERY_FAILURES, channel="whatsapp", code="131047") == 1
    [updated] = await store.list_outbox(session.session_id)
    assert updated.delivery_state == "failed"


async def test_intake_marks_a_session_blocked_when_the_user_blocks_the_bot(
    store: SQLiteStore, adapters: dict[str, ChannelAdapter]
) -> None:
    body = tg.fixture_bytes("15_my_chat_member_kicked.json")
    await store_delivery(store, adapters["telegram"], body, "support")
    intake, _, _ = make_intake(store, adapters)
    await intake.step()
    session = await store.get_session(make_session_id("telegram", "support", "123456789"))
    assert session is not None
    assert session.metadata["blocked"] is True


async def test_intake_answers_a_pressed_telegram_button(
    store: SQLiteStore,
    db: Path,
    adapters: dict[str, ChannelAdapter],
    bot_api: tuple[tg.FakeBotApi, str],
) -> None:
    body = tg.fixture_bytes("06_callback_query_inline_keyboard.json")
    await store_delivery(store, adapters["telegram"], body, "support")
    intake, _, _ = make_intake(store, adapters)
    await intake.step()
    await intake.stop()  # waits for the answers in flight
    [call] = bot_api[0].calls
    query = json.loads(body)["callback_query"]["id"]
    assert (call.method, call.fields["callback_query_id"]) == ("answerCallbackQuery", query)
    assert len(inbox(db)) == 1


async def test_intake_counts_updates_it_ignores(
    store: SQLiteStore, adapters: dict[str, ChannelAdapter]
) -> None:
    telegram = adapters["telegram"]
    assert isinstance(telegram, TelegramAdapter)
    assert await telegram.identify() == frozenset()  # the bot knows its username
    body = tg.fixture_bytes("33_group_command_other_bot.json")  # a command for another bot
    await store.ingest([DeliveryIn("telegram", "support", body, ("telegram:support:other",))])
    intake, _, metrics = make_intake(store, adapters)
    await intake.step()
    assert metrics.value(IGNORED, channel="telegram", type="message") == 1
    assert await store.list_quarantine(10, 0) == []


async def test_intake_quarantines_a_command_with_a_name_while_the_username_is_unknown(
    store: SQLiteStore, adapters: dict[str, ChannelAdapter]
) -> None:
    """getMe has not answered: whether ``/cmd@name`` is the bot's cannot be told, so the
    delivery is kept whole in quarantine (replayed once the bot is known), not dropped."""
    body = tg.fixture_bytes("33_group_command_other_bot.json")
    await store.ingest([DeliveryIn("telegram", "support", body, ("telegram:support:other",))])
    intake, _, metrics = make_intake(store, adapters)
    await intake.step()
    assert metrics.value(IGNORED, channel="telegram", type="message") == 0
    [kept] = await store.list_quarantine(10, 0)
    assert (kept.body, kept.account) == (body, "support")
    assert USERNAME_UNKNOWN in kept.reason


async def test_intake_run_parses_on_a_wake_up_and_by_polling(
    store: SQLiteStore, db: Path, adapters: dict[str, ChannelAdapter]
) -> None:
    intake, woken, _ = make_intake(store, adapters)
    wake = asyncio.Event()
    task = asyncio.create_task(intake.run(wake, poll_seconds=0.05))
    try:
        await store_delivery(store, adapters["whatsapp"], wa_messages(("wamid.1", "111", "a")))
        wake.set()
        await woken.until(1)
        # Another process (e.g. a quarantine replay) writes without waking us: the poll sees it.
        await store_delivery(store, adapters["whatsapp"], wa_messages(("wamid.2", "222", "b")))
        await woken.until(2)
    finally:
        await intake.stop()
        wake.set()
        await asyncio.wait_for(task, 5)
    assert len(inbox(db)) == 2


async def test_intake_keeps_the_order_of_deliveries_recorded_in_chunks(
    store: SQLiteStore, db: Path, adapters: dict[str, ChannelAdapter]
) -> None:
    whatsapp = adapters["whatsapp"]
    for n in range(40):  # more than one chunk of the intake's writes
        await store_delivery(store, whatsapp, wa_messages((f"wamid.{n}", "111", f"text {n}")))
    intake, woken, _ = make_intake(store, adapters)
    assert await intake.step() == 40
    texts = [r.event["text"] for r in await store.pending_inbox(inbox(db)[0][0])]
    assert texts == [f"text {n}" for n in range(40)]
    assert set(woken.sessions) == {inbox(db)[0][0]}
    assert await store.unparsed_deliveries() == []


async def test_intake_quarantines_a_delivery_the_store_refuses_and_records_the_rest(
    store: SQLiteStore, db: Path, adapters: dict[str, ChannelAdapter]
) -> None:
    whatsapp = adapters["whatsapp"]
    await store_delivery(store, whatsapp, wa_messages(("wamid.1", "111", "before")))
    too_long = "9" * 200  # a session id would pass its 128 characters
    await store_delivery(store, whatsapp, wa_messages(("wamid.2", too_long, "refused")))
    await store_delivery(store, whatsapp, wa_messages(("wamid.3", "333", "after")))
    intake, woken, metrics = make_intake(store, adapters)
    assert await intake.step() == 3
    assert [key for _, key in inbox(db)] == ["whatsapp:wamid.1", "whatsapp:wamid.3"]
    [(reason,)] = rows(db, "SELECT reason FROM quarantine")
    assert "longer than 128" in reason
    assert await store.unparsed_deliveries() == []  # nothing left to stall the next pass
    assert metrics.value(QUARANTINED, channel="whatsapp") == 1


async def test_intake_quarantines_a_delivery_with_a_nul_in_an_id_and_records_the_rest(
    store: SQLiteStore, db: Path, adapters: dict[str, ChannelAdapter]
) -> None:
    """PostgreSQL's text holds no NUL: the store refuses such an id on every backend, so the
    delivery is kept whole in quarantine here as it would be there."""
    whatsapp = adapters["whatsapp"]
    await store_delivery(store, whatsapp, wa_messages(("wamid.1", "111", "before")))
    await store_delivery(store, whatsapp, wa_messages(("wamid.2", "22\x002", "refused")))
    await store_delivery(store, whatsapp, wa_messages(("wamid.3", "333", "after")))
    intake, _woken, metrics = make_intake(store, adapters)
    assert await intake.step() == 3
    assert [key for _, key in inbox(db)] == ["whatsapp:wamid.1", "whatsapp:wamid.3"]
    [(reason, body)] = rows(db, "SELECT reason, body FROM quarantine")
    assert "must not contain a NUL character" in reason
    assert b"22\\u00002" in body  # the body as it came, escape and all
    assert await store.unparsed_deliveries() == []
    assert metrics.value(QUARANTINED, channel="whatsapp") == 1


async def test_intake_records_lone_surrogates_in_an_id_and_a_text_as_u_fffd(
    store: SQLiteStore, db: Path, adapters: dict[str, ChannelAdapter]
) -> None:
    """A JSON escape such as \\ud800 is a lone surrogate, which no UTF-8 text holds: the
    webhook claimed the key with U+FFFD in its place, and the intake records the message the
    same way, so it is answered (and a redelivery stays a duplicate)."""
    whatsapp = adapters["whatsapp"]
    body = wa_messages(("wamid.odd\ud800one", "111", "hi \udc00 there"))
    assert await store_delivery(store, whatsapp, body) == {"whatsapp:wamid.odd\ufffdone"}
    intake, _, _ = make_intake(store, adapters)
    assert await intake.step() == 1
    assert [key for _, key in inbox(db)] == ["whatsapp:wamid.odd\ufffdone"]
    [row] = await store.pending_inbox(inbox(db)[0][0])
    assert row.event["text"] == "hi \ufffd there"
    assert rows(db, "SELECT count(*) FROM quarantine") == [(0,)]
    assert await store_delivery(store, whatsapp, body) == frozenset()


@pytest.mark.parametrize(
    ("name", "field", "state", "level"),
    [
        ("template_status_update.json", "message_template_status_update", "REJECTED", "WARNING"),
        ("template_quality_update.json", "message_template_quality_update", "YELLOW", "WARNING"),
    ],
)
async def test_intake_records_template_status_and_quality_updates(
    store: SQLiteStore,
    db: Path,
    adapters: dict[str, ChannelAdapter],
    caplog: pytest.LogCaptureFixture,
    name: str,
    field: str,
    state: str,
    level: str,
) -> None:
    """Stored like any delivery (they claim a key, so a retry is dropped), then one log line
    naming the template and its news, and a count; no session, no inbox row."""
    body = wa.fixture_bytes(name)
    assert len(await store_delivery(store, adapters["whatsapp"], body)) == 1
    assert await store_delivery(store, adapters["whatsapp"], body) == frozenset()  # a retry
    intake, woken, metrics = make_intake(store, adapters)
    with caplog.at_level("INFO", logger="gateway.intake"):
        assert await intake.step() == 1
    [record] = [r for r in caplog.records if "template" in r.getMessage()]
    line = record.getMessage()
    assert line.startswith(f"whatsapp template follow_up (en_US) is now {state}: {field},")
    assert "template id 594425479261596, business account 1234567890987654321" in line
    assert ("reason INVALID_FORMAT" in line) == (state == "REJECTED")
    assert ("quality was GREEN" in line) == (state == "YELLOW")
    assert record.levelname == level
    assert metrics.value(TEMPLATE_UPDATES, field=field, state=state) == 1
    assert (woken.sessions, inbox(db)) == ([], [])
    assert rows(db, "SELECT count(*) FROM deliveries") == [(0,)]


async def test_the_intake_asks_the_pacer_before_it_parses(
    store: SQLiteStore, adapters: dict[str, ChannelAdapter]
) -> None:
    """A paced intake leaves the deliveries stored until they are admitted, then parses them."""
    for n in range(40):
        await store_delivery(
            store, adapters["whatsapp"], wa_messages((f"wamid.{n}", "111", f"text {n}"))
        )
    clock = Clock()
    p = AckPacer(0.010, clock=clock, sleep=clock.sleep)
    p.acked()
    p.lagged(0.030)  # webhooks arrive and the loop runs late...
    await p.admit(400)
    clock.now += WINDOW * 1.02  # ...for a window: paced at about 5,600 deliveries/s
    intake = Intake(
        store,
        adapters,
        starting_agent="triage",
        metrics=Metrics(),
        on_inbox=Woken(),
        pacer=p,
    )
    p.lagged(0.030)
    assert await intake.step() == 40
    assert clock.slept, "the intake waited for the pacer"
    assert await store.unparsed_deliveries() == []


async def test_intake_answers_only_the_configured_number_of_a_delivery_that_names_two(
    store: SQLiteStore, db: Path, adapters: dict[str, ChannelAdapter]
) -> None:
    """One app's webhook may carry the changes of a number another gateway serves: its
    messages claim no key at the ack, so the intake makes no inbox row, session or turn."""
    ours = json.loads(wa_messages(("wamid.ours", "111", "hi")))
    theirs = json.loads(wa_messages(("wamid.theirs", "222", "hello")))
    theirs["entry"][0]["changes"][0]["value"]["metadata"]["phone_number_id"] = "999"
    ours["entry"] += theirs["entry"]
    claimed = await store_delivery(store, adapters["whatsapp"], json.dumps(ours).encode())
    assert claimed == {"whatsapp:wamid.ours"}
    intake, woken, _ = make_intake(store, adapters)
    assert await intake.step() == 1
    assert inbox(db) == [(make_session_id("whatsapp", NUMBER, "111"), "whatsapp:wamid.ours")]
    assert woken.sessions == [make_session_id("whatsapp", NUMBER, "111")]
    assert rows(db, "SELECT count(*) FROM sessions WHERE account = '999'") == [(0,)]


async def test_intake_wakes_the_file_fetcher_only_for_messages_with_platform_files(
    store: SQLiteStore, db: Path, adapters: dict[str, ChannelAdapter]
) -> None:
    fetches: list[None] = []
    intake = Intake(
        store,
        adapters,
        starting_agent="triage",
        metrics=Metrics(),
        on_files=lambda: fetches.append(None),
    )
    await store_delivery(store, adapters["whatsapp"], wa_messages(("wamid.1", "111", "hi")))
    await intake.step()
    assert fetches == []  # a text has no file: no read of pending attachments
    image = IMAGE_FIXTURE.read_bytes()
    await store_delivery(store, adapters["whatsapp"], image)
    await intake.step()
    assert fetches == [None]
    assert rows(db, "SELECT count(*) FROM attachments WHERE state = 'pending'") == [(1,)]


async def store_and_hand(
    store: SQLiteStore, adapter: ChannelAdapter, handed: HandedDeliveries, body: bytes
) -> None:
    """Ingest as the webhook handler does, then hand the delivery over as its writer does."""
    keys = tuple(adapter.delivery_keys(body, None))
    [result] = await store.ingest([DeliveryIn(adapter.name, None, body, keys)])
    assert result.delivery_id is not None
    now = datetime.now(UTC)
    handed.hand([Delivery(result.delivery_id, adapter.name, None, body, result.new_keys, now)])


class CountingReads(SQLiteStore):
    """The real store, counting the intake's reads and saying when one is done."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.reads = 0
        self.read = asyncio.Event()

    async def unparsed_deliveries(self, limit: int = 100) -> list[Delivery]:
        self.reads += 1
        found = await super().unparsed_deliveries(limit)
        self.read.set()
        return found


async def test_intake_parses_handed_deliveries_without_reading_and_polls_for_the_rest(
    db: Path, adapters: dict[str, ChannelAdapter]
) -> None:
    """Deliveries the webhook path hands over are parsed from memory; one stored by another
    process (not handed) is found by the next poll's read."""
    handed = HandedDeliveries()
    async with CountingReads(db) as store:
        intake = Intake(store, adapters, starting_agent="triage", metrics=Metrics(), handed=handed)
        assert await intake.step(from_store=False) == 0  # nothing trusted yet: reads
        assert store.reads == 1
        await store_and_hand(
            store, adapters["whatsapp"], handed, wa_messages(("wamid.1", "111", "hi"))
        )
        assert await intake.step(from_store=False) == 1
        assert store.reads == 1
        assert inbox(db) == [(make_session_id("whatsapp", NUMBER, "111"), "whatsapp:wamid.1")]
        await store_delivery(store, adapters["whatsapp"], wa_messages(("wamid.2", "222", "yo")))
        assert await intake.step(from_store=False) == 0  # not handed: not seen until a poll
        assert await intake.step(from_store=True) == 1
        assert [key for _, key in inbox(db)] == ["whatsapp:wamid.1", "whatsapp:wamid.2"]


async def test_intake_given_deliveries_records_an_older_stored_one_first(
    db: Path, adapters: dict[str, ChannelAdapter]
) -> None:
    """A delivery another process stored before the handed one (it died before parsing it)
    is recorded first: the handed one's record refuses to pass it, and the intake reads."""
    handed = HandedDeliveries()
    async with SQLiteStore(db) as store:
        intake = Intake(store, adapters, starting_agent="triage", metrics=Metrics(), handed=handed)
        assert await intake.step(from_store=False) == 0  # the first read: from here, memory
        await store_delivery(store, adapters["whatsapp"], wa_messages(("wamid.1", "111", "one")))
        two = wa_messages(("wamid.2", "111", "two"))
        await store_and_hand(store, adapters["whatsapp"], handed, two)
        assert await intake.step(from_store=False) == 2
        assert [key for _, key in inbox(db)] == ["whatsapp:wamid.1", "whatsapp:wamid.2"]


async def test_intake_reads_the_store_once_a_poll_is_due_though_wake_ups_keep_coming(
    db: Path, adapters: dict[str, ChannelAdapter]
) -> None:
    """A busy gateway is woken again and again; a delivery another process stored (one that
    only acknowledges) is still found by the read each poll period brings."""
    clock, woken, wake = FakeClock(), Woken(), asyncio.Event()
    async with CountingReads(db) as store:
        intake = Intake(
            store,
            adapters,
            starting_agent="triage",
            metrics=Metrics(),
            on_inbox=woken,
            handed=HandedDeliveries(),
            clock=clock,
        )
        running = asyncio.create_task(intake.run(wake, poll_seconds=60))
        try:
            await asyncio.wait_for(store.read.wait(), 5)  # the first pass read: memory from here
            await store_delivery(store, adapters["whatsapp"], wa_messages(("wamid.9", "9", "x")))
            clock.now += 61  # a poll period passed, though the intake was never idle that long
            wake.set()
            await woken.until(1)
        finally:
            await intake.stop()
            wake.set()
            await asyncio.wait_for(running, 5)
        assert woken.sessions == [make_session_id("whatsapp", NUMBER, "9")]


async def kept(store: SQLiteStore) -> list[bool]:
    """Whether each quarantined row was replayed, oldest first."""
    return [item.replayed_at is not None for item in await store.list_quarantine(10, 0)]


async def test_rows_kept_for_the_username_are_replayed_once_known_and_again_when_more_come(
    store: SQLiteStore, adapters: dict[str, ChannelAdapter]
) -> None:
    """Quarantined while the bot's username was unknown: replayed once every bot is known
    (``UsernameReplay``, fed by the intake), and again when one more row is kept for that
    reason after a pass (a delivery parsed just before the last getMe answered)."""
    telegram = adapters["telegram"]
    assert isinstance(telegram, TelegramAdapter)
    command = tg.fixture_bytes("33_group_command_other_bot.json")  # /cmd@otherbot in a group
    await store.ingest([DeliveryIn("telegram", "support", command, ("telegram:support:1",))])
    intake, _, _ = make_intake(store, adapters)
    replay = UsernameReplay(store, adapters, "triage", {})
    heard: list[tuple[str, str]] = []

    def quarantined(channel: str, reason: str) -> None:
        heard.append((channel, reason))
        replay.quarantined(channel, reason)

    intake.on_quarantined = quarantined
    await intake.step()  # getMe has not answered: kept
    assert [(channel, USERNAME_UNKNOWN in reason) for channel, reason in heard] == [
        ("telegram", True)
    ]
    passes = asyncio.Queue[None]()
    async with replay.running(lambda: passes.put_nowait(None)):
        assert await kept(store) == [False]  # not before the bot is known
        assert await telegram.identify() == frozenset()
        await asyncio.wait_for(passes.get(), 10)
        assert await kept(store) == [True]  # for another bot: nothing to answer, replayed
        [late] = await store.ingest(
            [DeliveryIn("telegram", "support", command, ("telegram:support:2",))]
        )
        assert late.delivery_id is not None
        failure = f"telegram: {USERNAME_UNKNOWN}"
        parsed = ParsedDelivery(failure=failure)
        await store.record_parsed(late.delivery_id, parsed, starting_agent="triage")
        replay.quarantined("telegram", failure)
        await asyncio.wait_for(passes.get(), 10)
        assert await kept(store) == [True, True]
