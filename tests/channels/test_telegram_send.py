"""Sending through PTB against a fake Bot API server on loopback: exact requests, error mapping."""

from __future__ import annotations

import logging
import traceback
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer

from tests.channels.telegram_fakes import (
    OTHER_TOKEN,
    TOKEN,
    FakeBotApi,
    config,
    echo_path,
    error,
    hang,
)
from webhook_bot_gateway.channels import (
    Button,
    ChatMigrated,
    FatalSendError,
    OutboundMedia,
    OutboundMessage,
    PermanentSendError,
    RetryableSendError,
    SendError,
    UncertainDelivery,
)
from webhook_bot_gateway.channels.telegram import TelegramAdapter

CHAT = "123456789"


@pytest.fixture
async def fake() -> AsyncIterator[FakeBotApi]:
    api = FakeBotApi()
    yield api
    api.release.set()  # let hanging handlers finish before the server shuts down


@pytest.fixture
async def server(fake: FakeBotApi, aiohttp_server: AiohttpServer) -> TestServer:
    return await aiohttp_server(fake.app())


@pytest.fixture
async def adapter(server: TestServer) -> AsyncIterator[TelegramAdapter]:
    async with TelegramAdapter(config(str(server.make_url("")).rstrip("/"))) as adapter:
        yield adapter


def reply(text: str | None = None, **fields: object) -> OutboundMessage:
    return OutboundMessage(channel="telegram", account="support", chat_id=CHAT, text=text, **fields)


async def test_send_posts_send_message_with_the_bot_token_in_the_path(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    result = await adapter.send(reply("Hello"))

    [call] = fake.calls
    assert (call.method, call.token) == ("sendMessage", TOKEN)
    assert call.content_type == "application/x-www-form-urlencoded"
    assert call.fields == {"chat_id": CHAT, "text": "Hello"}
    assert result.message_ids == ("5001",)


async def test_send_uses_each_accounts_own_token(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    await adapter.send(OutboundMessage(channel="telegram", account="sales", chat_id="5", text="x"))
    assert fake.calls[0].token == OTHER_TOKEN


async def test_send_splits_long_text_reply_on_first_keyboard_on_last(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    text = "A" * 3000 + "\n\n" + "B" * 3000
    buttons = (Button(id="yes", title="Yes"),)
    result = await adapter.send(reply(text, buttons=buttons, reply_to="1370"))

    first, second = fake.calls
    assert [first.fields["text"], second.fields["text"]] == ["A" * 3000, "B" * 3000]
    assert first.json_field("reply_parameters") == {
        "message_id": 1370,
        "allow_sending_without_reply": True,
    }
    assert "reply_markup" not in first.fields
    assert "reply_parameters" not in second.fields
    assert second.json_field("reply_markup") == {
        "inline_keyboard": [[{"text": "Yes", "callback_data": "yes"}]]
    }
    assert result.message_ids == ("5001", "5002")


async def test_send_posts_every_part_into_the_forum_topic(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    await adapter.send(reply("A" * 3000 + "\n\n" + "B" * 3000, thread_id="3001"))
    assert [call.fields["message_thread_id"] for call in fake.calls] == ["3001", "3001"]


async def test_send_outside_a_forum_sends_no_topic(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    await adapter.send(reply("hi"))
    assert "message_thread_id" not in fake.calls[0].fields


async def test_send_refuses_a_malformed_topic_before_any_request(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    with pytest.raises(PermanentSendError, match="thread_id"):
        await adapter.send(reply("hi", thread_id="general"))
    assert fake.calls == []


async def test_send_makes_one_keyboard_row_per_button(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    buttons = (Button(id="order:5531", title="Order 5531"), Button(id="cancel", title="Cancel"))
    await adapter.send(reply("Which order?", buttons=buttons))
    assert fake.calls[0].json_field("reply_markup") == {
        "inline_keyboard": [
            [{"text": "Order 5531", "callback_data": "order:5531"}],
            [{"text": "Cancel", "callback_data": "cancel"}],
        ]
    }


async def test_send_refuses_callback_data_over_64_bytes_before_any_request(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    buttons = (Button(id="é" * 33, title="Too long"),)  # 66 bytes in UTF-8, 33 characters
    with pytest.raises(PermanentSendError, match="64 bytes"):
        await adapter.send(reply("Pick", buttons=buttons))
    assert fake.calls == []


async def test_send_refuses_a_non_numeric_reply_to(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    with pytest.raises(PermanentSendError, match="reply_to"):
        await adapter.send(reply("x", reply_to="wamid.123"))
    assert fake.calls == []


async def test_send_refuses_an_empty_message(adapter: TelegramAdapter, fake: FakeBotApi) -> None:
    with pytest.raises(PermanentSendError, match="nothing to send"):
        await adapter.send(reply("  \n "))
    assert fake.calls == []


@pytest.mark.parametrize(
    ("kind", "method", "field"),
    [
        ("image", "sendPhoto", "photo"),
        ("audio", "sendAudio", "audio"),
        ("video", "sendVideo", "video"),
        ("document", "sendDocument", "document"),
    ],
)
async def test_send_media_by_url_uses_the_kinds_method(
    adapter: TelegramAdapter, fake: FakeBotApi, kind: str, method: str, field: str
) -> None:
    url = "https://example.com/files/receipt"
    media = OutboundMedia(kind=kind, url=url, caption="Your receipt")  # type: ignore[arg-type]
    await adapter.send(reply(media=media))
    [call] = fake.calls
    assert call.method == method
    assert call.fields == {"chat_id": CHAT, field: url, "caption": "Your receipt"}


async def test_send_media_by_file_id_then_text_with_the_keyboard_last(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    media = OutboundMedia(kind="document", id="BQACAgIAAxkBAAIFXGd0AAFhdocQQgAAp7cMRuY7xhLAAEA")
    buttons = (Button(id="ok", title="OK"),)
    await adapter.send(reply("Here it is", media=media, buttons=buttons, reply_to="7"))

    document, text = fake.calls
    assert document.method == "sendDocument"
    assert document.fields["document"] == media.id
    assert document.json_field("reply_parameters")["message_id"] == 7
    assert "reply_markup" not in document.fields
    assert text.method == "sendMessage"
    assert text.json_field("reply_markup")["inline_keyboard"][0][0]["callback_data"] == "ok"


async def test_send_sticker_sends_its_caption_as_text_after_it(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    media = OutboundMedia(
        kind="sticker", id="CAACAgIAAxkBAAIFYWd0AAFhstickerAAJ7cMRuY7xhLHgQ", caption="hi"
    )
    await adapter.send(reply(media=media))
    assert fake.methods() == ["sendSticker", "sendMessage"]
    assert "caption" not in fake.calls[0].fields
    assert fake.calls[1].fields["text"] == "hi"


@pytest.mark.parametrize(
    "media",
    [
        OutboundMedia(kind="document", url="/etc/passwd"),
        OutboundMedia(kind="document", url="file:///etc/passwd"),
        OutboundMedia(kind="document", id="/etc/passwd"),
        OutboundMedia(kind="image"),
        OutboundMedia(kind="image", url="https://example.com/x.png", caption="c" * 1025),
    ],
)
async def test_send_refuses_media_that_is_not_a_url_or_file_id(
    adapter: TelegramAdapter, fake: FakeBotApi, media: OutboundMedia
) -> None:
    # PTB would upload a local path it is given: never let one through.
    with pytest.raises(PermanentSendError):
        await adapter.send(reply(media=media))
    assert fake.calls == []


async def test_send_typing_posts_the_typing_chat_action(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    await adapter.send_typing("support", CHAT)
    [call] = fake.calls
    assert (call.method, call.fields) == ("sendChatAction", {"chat_id": CHAT, "action": "typing"})


async def test_answer_callback_posts_the_query_id(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    await adapter.answer_callback("support", "530328474913466721")
    [call] = fake.calls
    assert call.method == "answerCallbackQuery"
    assert call.fields == {"callback_query_id": "530328474913466721"}


async def test_download_media_gets_the_file_then_its_bytes(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    fake.files["docs/BQACfile.pdf"] = b"%PDF-1.7 fake"
    data = await adapter.download_media("support", "BQACfile")

    assert data == b"%PDF-1.7 fake"
    get_file, download = fake.calls
    assert (get_file.method, get_file.fields) == ("getFile", {"file_id": "BQACfile"})
    assert (download.http_method, download.path) == ("GET", f"/file/bot{TOKEN}/docs/BQACfile.pdf")


async def test_download_media_refuses_a_local_file_path(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    async def local_path(request: object, call: object) -> object:
        from tests.channels.telegram_fakes import ok

        return ok({"file_id": "x", "file_unique_id": "u", "file_path": "/etc/hostname"})

    fake.script("getFile", local_path)  # type: ignore[arg-type]
    with pytest.raises(PermanentSendError, match="file_path"):
        await adapter.download_media("support", "x")
    assert fake.methods() == ["getFile"]


async def test_send_maps_429_to_retryable_with_retry_after(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    fake.script("sendMessage", error(429, "Too Many Requests: retry after 9", retry_after=9))
    with pytest.raises(RetryableSendError) as caught:
        await adapter.send(reply("x"))
    assert caught.value.retry_after == 9.0
    assert caught.value.disposition == "retryable"


async def test_send_maps_a_blocked_bot_to_permanent(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    fake.script("sendMessage", error(403, "Forbidden: bot was blocked by the user"))
    with pytest.raises(PermanentSendError, match="blocked by the user") as caught:
        await adapter.send(reply("x"))
    assert caught.value.status == 403


async def test_send_maps_bad_request_to_permanent(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    fake.script("sendMessage", error(400, "Bad Request: chat not found"))
    with pytest.raises(PermanentSendError, match="not found") as caught:
        await adapter.send(reply("x"))
    assert (type(caught.value), caught.value.status) == (PermanentSendError, 400)


async def test_send_maps_a_migrated_group_to_chat_migrated_with_the_new_id(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    upgraded = error(
        400,
        "Bad Request: group chat was upgraded to a supergroup chat",
        migrate_to_chat_id=-1001987654321,
    )
    fake.script("sendMessage", upgraded)
    with pytest.raises(ChatMigrated) as caught:
        await adapter.send(reply("x"))
    assert caught.value.new_chat_id == "-1001987654321"


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_send_maps_server_errors_to_retryable(
    adapter: TelegramAdapter, fake: FakeBotApi, status: int
) -> None:
    fake.script("sendMessage", error(status, "Internal Server Error"))
    with pytest.raises(RetryableSendError):
        await adapter.send(reply("x"))


async def test_send_maps_a_rejected_token_to_fatal(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    fake.script("sendMessage", error(401, "Unauthorized"))
    with pytest.raises(FatalSendError):
        await adapter.send(reply("x"))


async def test_send_maps_a_timeout_after_sending_to_uncertain_delivery(
    server: TestServer, fake: FakeBotApi
) -> None:
    fake.script("sendMessage", hang(fake))
    base = str(server.make_url("")).rstrip("/")
    async with TelegramAdapter(config(base, timeout=0.2)) as adapter:
        with pytest.raises(UncertainDelivery, match="ReadTimeout"):
            await adapter.send(reply("x"))
    assert fake.hanging.is_set()  # the request did reach the server


async def test_send_maps_a_refused_connection_to_retryable(unused_tcp_port: int) -> None:
    async with TelegramAdapter(config(f"http://127.0.0.1:{unused_tcp_port}")) as adapter:
        with pytest.raises(RetryableSendError, match="ConnectError"):
            await adapter.send(reply("x"))


async def test_send_stops_at_the_first_failing_part(
    adapter: TelegramAdapter, fake: FakeBotApi
) -> None:
    fake.script("sendMessage", error(400, "Bad Request: message is too long"))
    with pytest.raises(PermanentSendError):
        await adapter.send(reply("A" * 5000))
    assert fake.methods() == ["sendMessage"]


async def test_send_failure_never_shows_the_token(
    adapter: TelegramAdapter, fake: FakeBotApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.script("sendMessage", echo_path(400))
    with pytest.raises(SendError) as caught:
        await adapter.send(reply("x"))

    error = caught.value
    shown = "".join(traceback.format_exception(error)) + str(error) + repr(error)
    assert "<redacted>" in str(error)  # the description did carry the path (PTB lowercased it)
    assert TOKEN.split(":")[1].lower() not in shown.lower()


async def test_request_logs_never_show_the_token(
    server: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with TelegramAdapter(config(str(server.make_url("")).rstrip("/"))) as adapter:
        await adapter.send(reply("x"))
    # The fake server's own access log shows the path; only the client side is ours.
    ours = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("aiohttp"))
    assert "Set Bot API URL" in ours  # PTB logged its base URL...
    assert "HTTP Request: POST" in ours  # ...and httpx the request URL...
    assert "<redacted>" in ours
    assert TOKEN.split(":")[1] not in ours  # ...without the token


async def test_send_to_an_unknown_bot_is_fatal(adapter: TelegramAdapter, fake: FakeBotApi) -> None:
    with pytest.raises(FatalSendError, match="unknown bot"):
        await adapter.send(
            OutboundMessage(channel="telegram", account="nope", chat_id="1", text="x")
        )
    assert fake.calls == []


async def test_send_after_aclose_is_retryable_and_aclose_is_idempotent(server: TestServer) -> None:
    adapter = TelegramAdapter(config(str(server.make_url("")).rstrip("/")))
    await adapter.aclose()
    await adapter.aclose()
    with pytest.raises(RetryableSendError, match="closed"):
        await adapter.send(reply("x"))
