"""PTB's requests on aiohttp: the shared session, uploads, timeouts, dropped connections, tokens."""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer
from telegram import Bot
from telegram.error import NetworkError, TelegramError, TimedOut

from tests.channels.telegram_fakes import (
    TOKEN,
    ConnectionCounter,
    FakeBotApi,
    Upload,
    config,
    drop_connection,
    error,
    hang,
    record_uploads,
)
from webhook_bot_gateway.channels import (
    ADAPTERS,
    OutboundMessage,
    RetryableSendError,
    SendError,
    UncertainDelivery,
)
from webhook_bot_gateway.channels._telegram._request import (
    AiohttpRequest,
    ConnectError,
    ConnectionLost,
    ConnectTimeout,
    ReadTimeout,
    redact_url,
)
from webhook_bot_gateway.channels.telegram import TelegramAdapter, map_error

CHAT = "123456789"
SECRET_PART = TOKEN.split(":")[1]
LOGGER = "channels.telegram.http"


@pytest.fixture
async def fake() -> AsyncIterator[FakeBotApi]:
    api = FakeBotApi()
    yield api
    api.release.set()  # let hanging handlers finish before the server shuts down


@pytest.fixture
def connections() -> ConnectionCounter:
    return ConnectionCounter()


@pytest.fixture
async def server(
    fake: FakeBotApi, connections: ConnectionCounter, aiohttp_server: AiohttpServer
) -> TestServer:
    app = fake.app()
    app.middlewares.append(connections.middleware)
    return await aiohttp_server(app)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as shared:
        yield shared


def base(server: TestServer) -> str:
    return str(server.make_url("")).rstrip("/")


def reply(text: str = "x") -> OutboundMessage:
    return OutboundMessage(channel="telegram", account="support", chat_id=CHAT, text=text)


def bot(url: str, request: AiohttpRequest) -> Bot:
    return Bot(TOKEN, base_url=f"{url}/bot", request=request, get_updates_request=request)


def chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and everything it was raised from or during."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [current.__cause__, current.__context__]


def shown(exc: BaseException) -> str:
    """Everything an exception can print: str, repr and traceback of it and of its chain."""
    parts = [str(e) + repr(e) for e in chain(exc)]
    return "".join(traceback.format_exception(exc)) + "".join(parts)


def assert_no_token(exc: BaseException, caplog: pytest.LogCaptureFixture) -> None:
    assert SECRET_PART.lower() not in shown(exc).lower()
    # The fake server's own access log shows the path; only the client side is ours.
    ours = [r for r in caplog.records if not r.name.startswith(("aiohttp.access", "aiohttp.web"))]
    logged = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in ours)
    assert SECRET_PART.lower() not in logged.lower()


# -- the shared session ------------------------------------------------------------------------


def counting_session() -> tuple[aiohttp.ClientSession, list[str]]:
    seen: list[str] = []

    async def on_start(
        session: aiohttp.ClientSession, context: SimpleNamespace, params: object
    ) -> None:
        seen.append("request")

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_start)
    return aiohttp.ClientSession(trace_configs=[trace]), seen


async def test_registry_factory_sends_through_the_shared_session_and_leaves_it_open(
    server: TestServer, fake: FakeBotApi, connections: ConnectionCounter
) -> None:
    shared, seen = counting_session()
    async with shared:
        adapter = ADAPTERS["telegram"](config(base(server)), shared)
        assert isinstance(adapter, TelegramAdapter)
        async with adapter:
            for _ in range(3):
                await adapter.send(reply())
            await adapter.send_typing("sales", CHAT)
        assert not shared.closed  # the gateway owns it; the adapter only borrowed it

    assert seen == ["request"] * 4
    assert fake.methods() == ["sendMessage"] * 3 + ["sendChatAction"]
    assert len(connections.peers) == 1  # both bots, one kept-alive connection


async def test_adapter_without_a_session_opens_and_closes_its_own(
    server: TestServer, fake: FakeBotApi
) -> None:
    adapter = TelegramAdapter(config(base(server)))
    async with adapter:
        await adapter.send(reply())
        requests = [handle.request for handle in adapter._bots.values()]
        assert all(r._session is not None and not r._session.closed for r in requests)
    assert all(r._session is None for r in requests)
    assert fake.methods() == ["sendMessage"]


async def test_request_before_initialize_is_a_network_error(server: TestServer) -> None:
    with pytest.raises(NetworkError, match="session is closed"):
        await bot(base(server), AiohttpRequest(timeout=1)).send_message(CHAT, "x")


# -- what goes over the wire ------------------------------------------------------------------


async def test_multipart_upload_sends_fields_and_file(
    server: TestServer, fake: FakeBotApi, session: aiohttp.ClientSession
) -> None:
    uploads: list[Upload] = []
    fake.script("sendDocument", record_uploads(uploads))
    sender = bot(base(server), AiohttpRequest(session, timeout=5))

    message = await sender.send_document(
        CHAT, document=b"%PDF-1.7 receipt", filename="receipt.pdf", caption="Your receipt"
    )

    assert message.message_id == 4242
    [call] = fake.calls
    assert call.content_type == "multipart/form-data"
    assert (call.fields["chat_id"], call.fields["caption"]) == (CHAT, "Your receipt")
    [upload] = uploads
    assert upload == Upload("document", "receipt.pdf", "application/pdf", b"%PDF-1.7 receipt")


async def test_json_parameters_go_as_form_fields_with_nested_objects_as_json(
    server: TestServer, fake: FakeBotApi, session: aiohttp.ClientSession
) -> None:
    sender = bot(base(server), AiohttpRequest(session, timeout=5))
    await sender.send_message(CHAT, "héllo & bye", reply_parameters={"message_id": 7})  # type: ignore[arg-type]

    [call] = fake.calls
    assert call.content_type == "application/x-www-form-urlencoded"
    assert call.fields["text"] == "héllo & bye"
    assert call.json_field("reply_parameters") == {"message_id": 7}


async def test_error_status_keeps_ptbs_mapping(
    server: TestServer, fake: FakeBotApi, session: aiohttp.ClientSession
) -> None:
    async with TelegramAdapter(config(base(server)), session=session) as adapter:
        fake.script("sendMessage", error(403, "Forbidden: bot was blocked by the user"))
        with pytest.raises(SendError) as caught:
            await adapter.send(reply())
    assert (caught.value.disposition, caught.value.status) == ("permanent", 403)


# -- failures ---------------------------------------------------------------------------------


async def test_hang_times_out_after_the_configured_read_timeout(
    server: TestServer, fake: FakeBotApi, session: aiohttp.ClientSession
) -> None:
    fake.script("sendMessage", hang(fake))
    sender = bot(base(server), AiohttpRequest(session, timeout=0.3))
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimedOut) as caught:
        await sender.send_message(CHAT, "x")
    waited = loop.time() - started

    assert isinstance(caught.value.__cause__, ReadTimeout)
    assert fake.hanging.is_set()
    assert 0.29 <= waited < 3  # the configured timeout governs, not aiohttp's 5-minute default


async def test_hang_through_the_adapter_is_uncertain_without_the_token(
    server: TestServer,
    fake: FakeBotApi,
    session: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.script("sendMessage", hang(fake))
    async with TelegramAdapter(config(base(server), timeout=0.2), session=session) as adapter:
        with pytest.raises(UncertainDelivery, match="ReadTimeout") as caught:
            await adapter.send(reply())
    assert_no_token(caught.value, caplog)


@pytest.mark.parametrize("reset", [True, False], ids=["rst", "fin"])
async def test_connection_dropped_after_the_request_was_written_is_uncertain(
    server: TestServer,
    fake: FakeBotApi,
    session: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
    reset: bool,
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.script("sendMessage", drop_connection(fake, reset=reset))
    async with TelegramAdapter(config(base(server)), session=session) as adapter:
        with pytest.raises(UncertainDelivery, match="ConnectionLost") as caught:
            await adapter.send(reply())
    assert fake.methods() == ["sendMessage"]  # the whole request did arrive
    assert_no_token(caught.value, caplog)


async def test_waiting_for_a_pooled_connection_times_out_as_not_sent(
    server: TestServer, fake: FakeBotApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.script("sendMessage", hang(fake))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as shared:
        sender = bot(base(server), AiohttpRequest(shared, timeout=5))
        first = asyncio.create_task(sender.send_message(CHAT, "first"))
        await fake.hanging.wait()  # the only connection is now taken
        with pytest.raises(TimedOut) as caught:
            await sender.send_message(CHAT, "second", pool_timeout=0.1, connect_timeout=0.1)
        fake.release.set()
        await first

    assert isinstance(caught.value.__cause__, ConnectTimeout)
    assert type(map_error(caught.value, [TOKEN])) is RetryableSendError
    assert [c.fields["text"] for c in fake.calls] == ["first"]  # the second never left
    # A bare Bot (no adapter, so no log filter on PTB's own lines): the exception and our log.
    assert SECRET_PART not in shown(caught.value)
    assert all(SECRET_PART not in r.getMessage() for r in caplog.records if r.name == LOGGER)


async def test_refused_connection_is_retryable_without_the_token(
    unused_tcp_port: int, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"http://127.0.0.1:{unused_tcp_port}"
    async with TelegramAdapter(config(url), session=session) as adapter:
        with pytest.raises(RetryableSendError, match="ConnectError") as caught:
            await adapter.send(reply())
    assert_no_token(caught.value, caplog)


async def test_ptb_exceptions_carry_no_aiohttp_exception(
    unused_tcp_port: int, session: aiohttp.ClientSession
) -> None:
    # aiohttp's exceptions name the URL: the request raises from a WireError instead.
    sender = bot(f"http://127.0.0.1:{unused_tcp_port}", AiohttpRequest(session, timeout=1))
    with pytest.raises(NetworkError) as caught:
        await sender.send_message(CHAT, "x")
    assert isinstance(caught.value.__cause__, ConnectError)
    assert not any(isinstance(e, aiohttp.ClientError) for e in chain(caught.value))
    assert SECRET_PART not in shown(caught.value)


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        ((NetworkError("lost"), ConnectionLost()), UncertainDelivery),
        ((NetworkError("cannot connect"), ConnectError()), RetryableSendError),
        ((TimedOut("no connection"), ConnectTimeout()), RetryableSendError),
        ((TimedOut("no answer"), ReadTimeout()), UncertainDelivery),
        ((NetworkError("Bad Gateway (502)"), None), RetryableSendError),
    ],
)
def test_map_error_reads_the_wire_error_cause(
    raised: tuple[TelegramError, BaseException | None], expected: type[SendError]
) -> None:
    error, cause = raised
    error.__cause__ = cause
    assert type(map_error(error, [TOKEN])) is expected


def test_redact_url_hides_the_token_of_api_and_file_urls() -> None:
    assert redact_url(f"https://api.telegram.org/bot{TOKEN}/sendMessage") == (
        "https://api.telegram.org/bot<redacted>/sendMessage"
    )
    assert redact_url(f"https://api.telegram.org/file/bot{TOKEN}/docs/a.pdf") == (
        "https://api.telegram.org/file/bot<redacted>/docs/a.pdf"
    )


async def test_request_log_line_is_debug_and_redacted(
    server: TestServer, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    async with TelegramAdapter(config(base(server)), session=session) as adapter:
        await adapter.send(reply())
    [record] = [r for r in caplog.records if r.name == LOGGER]
    assert record.levelno == logging.DEBUG
    assert record.getMessage().endswith("/bot<redacted>/sendMessage 200")


def html_page(status: int) -> Any:
    """What a proxy in front of the Bot API answers when it fails: HTML, not JSON."""

    async def reply(request: web.Request, call: object) -> web.StreamResponse:
        return web.Response(status=status, text="<html><body>502 Bad Gateway</body></html>")

    return reply


async def test_an_answer_that_is_not_json_fails_the_send_without_ptbs_error_record(
    server: TestServer,
    fake: FakeBotApi,
    session: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """PTB logged it at ERROR with a traceback and the whole page, once per send: a proxy's
    outage filled the gateway's log; the send's failure, which says the same, is what counts."""
    caplog.set_level(logging.DEBUG)
    fake.script("sendMessage", html_page(502))
    async with TelegramAdapter(config(base(server)), session=session) as adapter:
        with pytest.raises(RetryableSendError, match="Bad Gateway"):
            await adapter.send(reply())
    assert [r for r in caplog.records if r.name.startswith("telegram.request")] == []
