"""media_source against the fake Graph and Bot API servers: the request, the answer, the errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer

from webhook_bot_gateway.channels import MediaSource, PermanentSendError, SendError
from webhook_bot_gateway.channels.telegram import TelegramAdapter
from webhook_bot_gateway.channels.whatsapp import WhatsAppAdapter

from . import telegram_fakes as tg
from . import whatsapp_fakes as wa


def assert_no_secret(exc: BaseException, *secrets: str) -> None:
    text = f"{exc} {exc!r} {getattr(exc, 'reason', '')}"
    for secret in secrets:
        assert secret not in text


async def get(url: str, headers: Any) -> bytes:
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        assert response.status == 200
        return await response.read()


# WhatsApp


@pytest.fixture
async def graph(aiohttp_server: AiohttpServer) -> AsyncIterator[tuple[wa.FakeGraph, TestServer]]:
    fake = wa.FakeGraph()
    server = await aiohttp_server(fake.app())
    yield fake, server
    fake.release.set()


@pytest.fixture
async def whatsapp(graph: tuple[wa.FakeGraph, TestServer]) -> AsyncIterator[WhatsAppAdapter]:
    async with aiohttp.ClientSession() as session:
        yield WhatsAppAdapter(wa.config(str(graph[1].make_url("/"))), session)


async def test_whatsapp_media_source_asks_graph_with_the_numbers_token(
    whatsapp: WhatsAppAdapter, graph: tuple[wa.FakeGraph, TestServer]
) -> None:
    fake, server = graph
    source = await whatsapp.media_source(wa.NUMBER_B, "4567")

    [info] = fake.requests  # nothing downloaded yet
    assert (info.method, info.path) == ("GET", f"/{wa.API_VERSION}/4567")
    assert info.authorization == f"Bearer {wa.TOKEN_B}"
    assert source == MediaSource(
        url=str(server.make_url("/download/4567")),
        headers={"Authorization": f"Bearer {wa.TOKEN_B}"},
        trusted_origin=f"http://{server.host}:{server.port}",
        content_type="image/png",
        size=len(wa.MEDIA_BYTES),
    )
    assert await get(source.url, source.headers) == wa.MEDIA_BYTES
    assert wa.TOKEN_B not in repr(source)


async def test_whatsapp_media_source_keeps_the_media_id_in_one_segment(
    whatsapp: WhatsAppAdapter, graph: tuple[wa.FakeGraph, TestServer]
) -> None:
    fake, _ = graph
    fake.graph_error(400, 100, "Unsupported get request")
    with pytest.raises(PermanentSendError):
        await whatsapp.media_source(wa.NUMBER_A, "../me")
    assert fake.requests[0].path == f"/{wa.API_VERSION}/../me"


async def test_whatsapp_media_source_404_is_a_send_error_without_the_token(
    whatsapp: WhatsAppAdapter, graph: tuple[wa.FakeGraph, TestServer]
) -> None:
    fake, _ = graph
    fake.graph_error(404, 100, f"Object does not exist (token {wa.TOKEN_A})")
    with pytest.raises(PermanentSendError) as caught:
        await whatsapp.media_source(wa.NUMBER_A, "4567")
    assert caught.value.status == 404
    assert_no_secret(caught.value, wa.TOKEN_A)


@pytest.mark.parametrize(
    "answer",
    [{"id": "4567"}, {"url": 5}, {"url": "file:///etc/passwd"}],
    ids=["missing", "not-a-string", "not-http"],
)
async def test_whatsapp_media_source_without_a_url_is_permanent(
    whatsapp: WhatsAppAdapter, graph: tuple[wa.FakeGraph, TestServer], answer: dict[str, Any]
) -> None:
    graph[0].answer(200, answer)
    with pytest.raises(PermanentSendError, match="no download url") as caught:
        await whatsapp.media_source(wa.NUMBER_A, "4567")
    assert_no_secret(caught.value, wa.TOKEN_A)


async def test_whatsapp_media_source_tolerates_odd_sizes_and_types(
    whatsapp: WhatsAppAdapter, graph: tuple[wa.FakeGraph, TestServer]
) -> None:
    graph[0].answer(200, {"url": "https://lookaside.fbsbx.com/x?mid=1", "file_size": "12"})
    graph[0].answer(200, {"url": "https://lookaside.fbsbx.com/x", "file_size": -1, "mime_type": 3})
    first = await whatsapp.media_source(wa.NUMBER_A, "1")
    second = await whatsapp.media_source(wa.NUMBER_A, "2")
    assert (first.size, first.content_type) == (12, None)
    assert (second.size, second.content_type) == (None, None)


async def test_whatsapp_media_source_unknown_number_is_a_send_error(
    whatsapp: WhatsAppAdapter,
) -> None:
    with pytest.raises(SendError, match="not configured"):
        await whatsapp.media_source("999", "4567")


# Telegram


@pytest.fixture
async def bot_api(aiohttp_server: AiohttpServer) -> AsyncIterator[tuple[tg.FakeBotApi, TestServer]]:
    fake = tg.FakeBotApi()
    server = await aiohttp_server(fake.app())
    yield fake, server
    fake.release.set()


@pytest.fixture
async def telegram(bot_api: tuple[tg.FakeBotApi, TestServer]) -> AsyncIterator[TelegramAdapter]:
    base = str(bot_api[1].make_url("")).rstrip("/")
    async with TelegramAdapter(tg.config(base)) as adapter:
        yield adapter


def get_file_answer(**result: Any) -> tg.Reply:
    async def reply(request: web.Request, call: tg.Recorded) -> web.StreamResponse:
        return tg.ok({"file_id": call.fields["file_id"], "file_unique_id": "u1", **result})

    return reply


async def test_telegram_media_source_calls_get_file_and_builds_the_file_url(
    telegram: TelegramAdapter, bot_api: tuple[tg.FakeBotApi, TestServer]
) -> None:
    fake, server = bot_api
    fake.script("getFile", get_file_answer(file_path="documents/file_7.pdf", file_size=13))
    fake.files["documents/file_7.pdf"] = b"%PDF-1.7 fake"
    source = await telegram.media_source("support", "BQACfile")

    [call] = fake.calls  # nothing downloaded yet
    assert (call.method, call.token, call.fields) == ("getFile", tg.TOKEN, {"file_id": "BQACfile"})
    base = f"http://{server.host}:{server.port}"
    assert source == MediaSource(
        url=f"{base}/file/bot{tg.TOKEN}/documents/file_7.pdf",
        headers={},
        trusted_origin=base,
        file_name="file_7.pdf",
        size=13,
    )
    assert await get(source.url, source.headers) == b"%PDF-1.7 fake"
    assert tg.TOKEN not in repr(source)


async def test_telegram_media_source_quotes_the_file_path(
    telegram: TelegramAdapter, bot_api: tuple[tg.FakeBotApi, TestServer]
) -> None:
    bot_api[0].script("getFile", get_file_answer(file_path="photos/a b?c#d.jpg"))
    source = await telegram.media_source("support", "x")
    assert source.url.endswith(f"/file/bot{tg.TOKEN}/photos/a%20b%3Fc%23d.jpg")
    assert (source.file_name, source.size) == ("a b?c#d.jpg", None)


@pytest.mark.parametrize(
    "file_path", [None, "/etc/hostname", "docs/../../bot/getMe", "docs//x"], ids=repr
)
async def test_telegram_media_source_refuses_a_path_it_cannot_fetch(
    telegram: TelegramAdapter, bot_api: tuple[tg.FakeBotApi, TestServer], file_path: str | None
) -> None:
    fake = bot_api[0]
    fake.script("getFile", get_file_answer(**({"file_path": file_path} if file_path else {})))
    with pytest.raises(PermanentSendError, match="file_path") as caught:
        await telegram.media_source("support", "x")
    assert fake.methods() == ["getFile"]
    assert_no_secret(caught.value, tg.TOKEN)


@pytest.mark.parametrize(
    "reply",
    [tg.error(400, "Bad Request: invalid file_id"), tg.echo_path(400)],
    ids=["bad-request", "echoes-the-path"],
)
async def test_telegram_media_source_get_file_failure_has_no_token(
    telegram: TelegramAdapter, bot_api: tuple[tg.FakeBotApi, TestServer], reply: tg.Reply
) -> None:
    bot_api[0].script("getFile", reply)
    with pytest.raises(PermanentSendError) as caught:
        await telegram.media_source("support", "x")
    assert caught.value.status == 400
    assert caught.value.__cause__ is None
    assert_no_secret(caught.value, tg.TOKEN)


async def test_telegram_media_source_unknown_bot_is_a_send_error(
    telegram: TelegramAdapter,
) -> None:
    with pytest.raises(SendError, match="unknown bot"):
        await telegram.media_source("nobody", "x")
