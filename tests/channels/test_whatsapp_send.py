"""Sending over the Graph API against a fake Graph server on loopback that records requests."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from aioresponses import aioresponses

from webhook_bot_gateway.channels import (
    Button,
    FatalSendError,
    OutboundMedia,
    OutboundMessage,
    PermanentSendError,
    RetryableSendError,
    SendError,
    UncertainDelivery,
)
from webhook_bot_gateway.channels._whatsapp._graph_errors import GraphError, read_graph_error
from webhook_bot_gateway.channels.whatsapp import WhatsAppAdapter

from .whatsapp_fakes import (
    API_VERSION,
    HANG,
    MEDIA_BYTES,
    NUMBER_A,
    NUMBER_B,
    TOKEN_A,
    TOKEN_B,
    FakeGraph,
    config,
)

USER = "16505551234"
MESSAGES_PATH = f"/{API_VERSION}/{NUMBER_A}/messages"


@pytest.fixture
def fake() -> FakeGraph:
    return FakeGraph()


@pytest.fixture
async def server(aiohttp_server: Any, fake: FakeGraph) -> AsyncIterator[TestServer]:
    server = await aiohttp_server(fake.app())
    yield server
    fake.release.set()  # let hanging handlers finish before the server shuts down


@pytest.fixture
async def adapter(server: TestServer) -> AsyncIterator[WhatsAppAdapter]:
    async with aiohttp.ClientSession() as session:
        yield WhatsAppAdapter(config(str(server.make_url("/"))), session)


@pytest.fixture
async def impatient(server: TestServer) -> AsyncIterator[WhatsAppAdapter]:
    """An adapter whose requests time out quickly, for the hanging-server tests."""
    async with WhatsAppAdapter(config(str(server.make_url("/")), request_timeout=0.2)) as adapter:
        yield adapter


def reply(text: str | None = "Hello", account: str = NUMBER_A, **fields: Any) -> OutboundMessage:
    return OutboundMessage(channel="whatsapp", account=account, chat_id=USER, text=text, **fields)


async def test_send_text_posts_the_exact_graph_request(
    adapter: WhatsAppAdapter, fake: FakeGraph
) -> None:
    result = await adapter.send(reply("Hello there", reply_to="wamid.in"))
    assert result.message_ids == ("wamid.out1",)
    (request,) = fake.requests
    assert (request.method, request.path) == ("POST", MESSAGES_PATH)
    assert request.authorization == f"Bearer {TOKEN_A}"
    assert request.body == {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": USER,
        "type": "text",
        "text": {"body": "Hello there", "preview_url": False},
        "context": {"message_id": "wamid.in"},
    }


async def test_send_uses_each_numbers_own_token_and_path(
    adapter: WhatsAppAdapter, fake: FakeGraph
) -> None:
    await adapter.send(reply(account=NUMBER_B))
    (request,) = fake.requests
    assert request.path == f"/{API_VERSION}/{NUMBER_B}/messages"
    assert request.authorization == f"Bearer {TOKEN_B}"


async def test_send_long_text_returns_the_id_of_every_part(
    adapter: WhatsAppAdapter, fake: FakeGraph
) -> None:
    text = ("a" * 3000) + "\n\n" + ("b" * 3000)
    result = await adapter.send(reply(text))
    assert result.message_ids == ("wamid.out1", "wamid.out2")
    assert [r.body["text"]["body"][0] for r in fake.requests] == ["a", "b"]


async def test_send_reply_buttons(adapter: WhatsAppAdapter, fake: FakeGraph) -> None:
    choices = (Button(id="yes", title="Yes"), Button(id="no", title="No"))
    await adapter.send(reply("Continue?", buttons=choices))
    (request,) = fake.requests
    assert request.body["type"] == "interactive"
    assert request.body["interactive"] == {
        "type": "button",
        "body": {"text": "Continue?"},
        "action": {
            "buttons": [
                {"type": "reply", "reply": {"id": "yes", "title": "Yes"}},
                {"type": "reply", "reply": {"id": "no", "title": "No"}},
            ]
        },
    }


async def test_send_media_by_link(adapter: WhatsAppAdapter, fake: FakeGraph) -> None:
    media = OutboundMedia(kind="document", url="https://example.com/i.pdf", file_name="i.pdf")
    await adapter.send(reply(None, media=media))
    (request,) = fake.requests
    assert request.body["document"] == {"link": "https://example.com/i.pdf", "filename": "i.pdf"}


async def test_send_to_an_unconfigured_number_is_fatal_and_sends_nothing(
    adapter: WhatsAppAdapter, fake: FakeGraph
) -> None:
    with pytest.raises(FatalSendError, match="not configured") as caught:
        await adapter.send(reply(account="999"))
    assert caught.value.error_code == "unknown_account"
    assert fake.requests == []


async def test_send_more_than_ten_buttons_fails_before_any_request(
    adapter: WhatsAppAdapter, fake: FakeGraph
) -> None:
    choices = tuple(Button(id=str(i), title=str(i)) for i in range(11))
    with pytest.raises(PermanentSendError, match="at most 10"):
        await adapter.send(reply(buttons=choices))
    assert fake.requests == []


async def test_send_stops_at_the_first_failing_part(
    adapter: WhatsAppAdapter, fake: FakeGraph
) -> None:
    fake.answer(200, {"messages": [{"id": "wamid.first"}]})
    fake.graph_error(400, 131047, "Re-engagement message")
    with pytest.raises(PermanentSendError):
        await adapter.send(reply(("a" * 3000) + "\n\n" + ("b" * 3000) + "\n\n" + "c"))
    assert len(fake.requests) == 2


async def test_mark_as_read_posts_the_read_status(
    adapter: WhatsAppAdapter, fake: FakeGraph
) -> None:
    await adapter.mark_as_read(NUMBER_A, "wamid.in")
    await adapter.mark_as_read(NUMBER_A, "wamid.in2", typing=True)
    first, second = fake.requests
    assert (first.path, first.authorization) == (MESSAGES_PATH, f"Bearer {TOKEN_A}")
    assert first.body == {
        "messaging_product": "whatsapp",
        "status": "read",
        "message_id": "wamid.in",
    }
    assert second.body == {
        "messaging_product": "whatsapp",
        "status": "read",
        "message_id": "wamid.in2",
        "typing_indicator": {"type": "text"},
    }


async def test_download_media_gets_the_url_then_the_bytes_with_the_token(
    adapter: WhatsAppAdapter, fake: FakeGraph
) -> None:
    assert await adapter.download_media(NUMBER_B, "4567") == MEDIA_BYTES
    info, download = fake.requests
    assert (info.method, info.path) == ("GET", f"/{API_VERSION}/4567")
    assert download.path == "/download/4567"
    assert info.authorization == download.authorization == f"Bearer {TOKEN_B}"


async def test_download_media_quotes_the_media_id_into_one_path_segment(
    adapter: WhatsAppAdapter, fake: FakeGraph
) -> None:
    fake.graph_error(400, 100, "Unsupported get request")
    with pytest.raises(PermanentSendError):
        await adapter.download_media(NUMBER_A, "../me")
    assert fake.requests[0].path == f"/{API_VERSION}/../me"  # %2F kept the id in one segment


async def test_download_media_without_a_url_is_permanent(
    adapter: WhatsAppAdapter, fake: FakeGraph
) -> None:
    fake.answer(200, {"id": "4567"})
    with pytest.raises(PermanentSendError, match="no download url"):
        await adapter.download_media(NUMBER_A, "4567")


@pytest.mark.parametrize(
    ("status", "code", "kind", "retry_after"),
    [
        (429, 130429, RetryableSendError, 1.0),
        (400, 130429, RetryableSendError, 1.0),
        (400, 131056, RetryableSendError, 1.0),
        (400, 4, RetryableSendError, 60.0),
        (400, 80007, RetryableSendError, 60.0),
        (500, 131000, RetryableSendError, None),
        (503, 131016, RetryableSendError, None),
        (400, 131057, RetryableSendError, 60.0),
        (503, 2, RetryableSendError, None),
        (500, 1, RetryableSendError, None),
        (400, 131047, PermanentSendError, None),
        (400, 131026, PermanentSendError, None),
        (400, 131048, PermanentSendError, None),
        (400, 131050, PermanentSendError, None),
        (400, 132001, PermanentSendError, None),
        (400, 132015, PermanentSendError, None),
        (400, 100, PermanentSendError, None),
        (404, 999999, PermanentSendError, None),
        (403, 131047, PermanentSendError, None),
        (401, 190, FatalSendError, None),
        (400, 190, FatalSendError, None),
        (403, 10, FatalSendError, None),
        (403, 200, FatalSendError, None),
        (403, 0, FatalSendError, None),
        (400, 131031, FatalSendError, None),
        (403, 999999, FatalSendError, None),
    ],
)
async def test_send_maps_graph_errors(
    adapter: WhatsAppAdapter,
    fake: FakeGraph,
    status: int,
    code: int,
    kind: type[SendError],
    retry_after: float | None,
) -> None:
    fake.graph_error(status, code, f"(#{code}) something", error_data={"details": "why"})
    with pytest.raises(SendError) as caught:
        await adapter.send(reply())
    error = caught.value
    assert type(error) is kind
    assert (error.error_code, error.status) == (code, status)
    assert f"Graph error {code}" in error.reason
    assert "why" in error.reason
    assert "AbCdEf123" in error.reason  # fbtrace_id, for Meta support
    assert getattr(error, "retry_after", None) == retry_after
    assert TOKEN_A not in str(error)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (502, RetryableSendError),
        (429, RetryableSendError),
        (401, FatalSendError),
        (400, PermanentSendError),
    ],
)
async def test_send_maps_error_answers_without_a_graph_body_by_status(
    adapter: WhatsAppAdapter, fake: FakeGraph, status: int, kind: type[SendError]
) -> None:
    fake.answer(status, "<html>Bad Gateway</html>")
    with pytest.raises(kind) as caught:
        await adapter.send(reply())
    assert caught.value.error_code == status


async def test_send_retry_after_header_wins_over_the_code_default(
    adapter: WhatsAppAdapter, fake: FakeGraph
) -> None:
    fake.answer(
        429,
        {"error": {"code": 130429, "message": "Rate limit hit", "type": "OAuthException"}},
        headers={"Retry-After": "17"},
    )
    with pytest.raises(RetryableSendError) as caught:
        await adapter.send(reply())
    assert caught.value.retry_after == 17.0
    assert caught.value.growth is None  # Meta named the wait: no schedule of our own


async def test_send_pair_rate_limit_carries_metas_growing_schedule(
    adapter: WhatsAppAdapter, fake: FakeGraph
) -> None:
    fake.graph_error(400, 131056, "(#131056) pair rate limit hit")
    with pytest.raises(RetryableSendError) as caught:
        await adapter.send(reply())
    assert (caught.value.retry_after, caught.value.growth) == (1.0, 4.0)


async def test_send_scrubs_the_token_if_the_graph_echoes_it(
    adapter: WhatsAppAdapter, fake: FakeGraph
) -> None:
    fake.graph_error(401, 190, f"Malformed access token {TOKEN_A}")
    with pytest.raises(FatalSendError) as caught:
        await adapter.send(reply())
    assert TOKEN_A not in str(caught.value)
    assert "[redacted]" in caught.value.reason


async def test_send_timeout_after_the_request_was_sent_is_uncertain(
    impatient: WhatsAppAdapter, fake: FakeGraph
) -> None:
    fake.answers.append(HANG)
    with pytest.raises(UncertainDelivery, match="may have gone out"):
        await impatient.send(reply())
    assert len(fake.requests) == 1  # the Graph API did receive it


async def test_mark_as_read_timeout_is_retryable(
    impatient: WhatsAppAdapter, fake: FakeGraph
) -> None:
    fake.answers.append(HANG)
    with pytest.raises(RetryableSendError, match="timed out"):
        await impatient.mark_as_read(NUMBER_A, "wamid.in")


@pytest.mark.parametrize(
    "answer",
    ["not json at all", {"messages": []}, {"messages": [{"id": ""}]}, {"success": True}],
)
async def test_send_success_without_a_message_id_is_uncertain(
    adapter: WhatsAppAdapter, fake: FakeGraph, answer: Any
) -> None:
    fake.answer(200, answer)
    with pytest.raises(UncertainDelivery):
        await adapter.send(reply())


async def test_send_connection_refused_is_retryable() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with WhatsAppAdapter(config(f"http://127.0.0.1:{port}")) as adapter:
        with pytest.raises(RetryableSendError, match="cannot connect") as caught:
            await adapter.send(reply())
    assert TOKEN_A not in str(caught.value)


async def test_send_never_logs_the_token(
    adapter: WhatsAppAdapter, fake: FakeGraph, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await adapter.send(reply())
    fake.graph_error(401, 190, "expired")
    with pytest.raises(FatalSendError):
        await adapter.send(reply())
    assert "graph POST" in caplog.text
    assert TOKEN_A not in caplog.text


GRAPH_URL = f"https://graph.invalid/{API_VERSION}/{NUMBER_A}/messages"


@pytest.mark.parametrize(
    ("exception", "kind"),
    [
        # The connection broke after the request went out: Meta may have taken the message.
        (aiohttp.ServerDisconnectedError(), UncertainDelivery),
        (aiohttp.ClientOSError(104, "Connection reset by peer"), UncertainDelivery),
        (aiohttp.ConnectionTimeoutError("Connection timeout"), RetryableSendError),
        (aiohttp.SocketTimeoutError("Timeout on reading data from socket"), UncertainDelivery),
        (TimeoutError(), UncertainDelivery),
    ],
)
async def test_send_maps_transport_errors(exception: Exception, kind: type[SendError]) -> None:
    async with WhatsAppAdapter(config()) as adapter:
        with aioresponses() as mocked:
            mocked.post(GRAPH_URL, exception=exception)
            with pytest.raises(kind):
                await adapter.send(reply())


async def test_adapter_closes_the_session_it_created_and_aclose_is_idempotent(
    server: TestServer,
) -> None:
    adapter = WhatsAppAdapter(config(str(server.make_url("/"))))
    assert (await adapter.send(reply())).message_ids == ("wamid.out1",)
    session = adapter._http()
    await adapter.aclose()
    await adapter.aclose()
    assert session.closed


async def test_adapter_leaves_a_shared_session_open() -> None:
    async with aiohttp.ClientSession() as session:
        await WhatsAppAdapter(config(), session).aclose()
        assert not session.closed


async def test_send_reports_the_parts_delivered_before_a_failure_and_skips_them_next_time(
    fake: FakeGraph, adapter: WhatsAppAdapter
) -> None:
    text = "a" * 4000 + "\n\n" + "b" * 4000
    ok = {"messaging_product": "whatsapp", "messages": [{"id": "wamid.part1"}]}
    fake.answer(200, ok)
    fake.graph_error(500, 1, "An unknown error occurred")
    message = OutboundMessage(channel="whatsapp", account=NUMBER_A, chat_id=USER, text=text)
    with pytest.raises(RetryableSendError) as caught:
        await adapter.send(message)
    assert caught.value.sent_ids == ("wamid.part1",)
    result = await adapter.send(message.model_copy(update={"skip_parts": 1}))
    assert len(result.message_ids) == 1
    assert [r.body["text"]["body"][0] for r in fake.requests] == ["a", "b", "b"]


@pytest.mark.parametrize("code", ["²", "١٣١٠٢٦", "131026x", ""])
def test_a_graph_error_code_that_is_not_ascii_digits_is_no_code(code: str) -> None:
    """A code string of other digits (int() refuses a superscript, takes Arabic-Indic) is read
    as no code at all, never an exception out of the error's parsing."""
    body = json.dumps({"error": {"code": code, "message": "odd"}}).encode()
    assert read_graph_error(400, body) == GraphError(status=400, message="odd")
