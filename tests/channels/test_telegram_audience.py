"""Which Telegram messages a bot answers: groups, mentions, replies, commands for other bots,
edits, and the identity getMe gives it."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from aiohttp import web

from webhook_bot_gateway.channels import ChannelError, InboundMessage, ParseResult
from webhook_bot_gateway.channels._telegram._identify import retry
from webhook_bot_gateway.channels.telegram import USERNAME_UNKNOWN, BotIdentity, TelegramAdapter

from . import telegram_fakes as tg

GROUP = {"id": -1001987654321, "title": "Example Support Group", "type": "supergroup"}
BOB = {"id": 987654321, "is_bot": False, "first_name": "Bob"}

bot_api = tg.bot_api  # the fixture: a FakeBotApi on loopback and its url


def adapter(identity: BotIdentity | None = tg.FIXTURE_BOT, **options: str) -> TelegramAdapter:
    known = {"support": identity} if identity is not None else None
    return TelegramAdapter(tg.config(**options), identities=known)


def group_message(text: str, update_id: int = 1, **fields: Any) -> bytes:
    message = {
        "message_id": 10 + update_id,
        "date": 1735690500,
        "chat": GROUP,
        "from": BOB,
        "text": text,
        **fields,
    }
    return json.dumps({"update_id": update_id, "message": message}).encode()


def entity(kind: str, text: str, word: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "offset": text.index(word), "length": len(word), **extra}


def command(text: str) -> bytes:
    return group_message(text, entities=[entity("bot_command", text, text.split()[0])])


def answered(bot: TelegramAdapter, body: bytes) -> bool:
    result: ParseResult = bot.parse(body, "support")
    assert result.failures == ()
    if result.events:
        return True
    assert result.ignored == ("message",)
    return False


def test_group_chatter_is_not_answered_but_keeps_its_dedup_key() -> None:
    body = tg.fixture_bytes("30_group_chatter.json")
    bot = adapter()
    assert not answered(bot, body)
    # Claimed at the door like any message: a retried delivery of it is dropped there.
    assert bot.delivery_keys(body, "support") == ["telegram:support:871234530"]


def test_group_mention_reply_and_commands_for_the_bot_are_answered() -> None:
    bot = adapter()
    for name in ("31_group_mention.json", "32_group_reply_to_bot.json", "20_group_command.json"):
        assert answered(bot, tg.fixture_bytes(name)), name


def test_mention_of_the_bot_is_matched_without_letter_case() -> None:
    text = "hey @Gateway_Test_BOT help"
    body = group_message(text, entities=[entity("mention", text, "@Gateway_Test_BOT")])
    assert answered(adapter(), body)


def test_mention_of_someone_else_is_not_addressed() -> None:
    text = "ask @gateway_test_bot_fan instead"
    body = group_message(text, entities=[entity("mention", text, "@gateway_test_bot_fan")])
    assert not answered(adapter(), body)


def test_a_plain_at_word_without_a_mention_entity_is_not_addressed() -> None:
    assert not answered(adapter(), group_message("@gateway_test_bot is not an entity here"))


def test_text_mention_of_the_bot_by_id_is_addressed() -> None:
    text = "Gateway Bot, my bill?"
    user = {"id": 7000000001, "is_bot": True, "first_name": "Gateway Bot"}
    body = group_message(text, entities=[entity("text_mention", text, "Gateway Bot", user=user)])
    assert answered(adapter(), body)


def test_caption_mention_of_a_photo_is_addressed() -> None:
    caption = "@gateway_test_bot is this damage covered?"
    photo = [{"file_id": "p1", "file_unique_id": "u1", "width": 90, "height": 90}]
    message = {
        "message_id": 20,
        "date": 1735690500,
        "chat": GROUP,
        "from": BOB,
        "photo": photo,
        "caption": caption,
        "caption_entities": [entity("mention", caption, "@gateway_test_bot")],
    }
    body = json.dumps({"update_id": 2, "message": message}).encode()
    assert answered(adapter(), body)


def test_reply_to_another_users_message_is_not_addressed() -> None:
    original = {"message_id": 3, "date": 1735690400, "chat": GROUP, "from": BOB, "text": "x"}
    assert not answered(adapter(), group_message("me too", reply_to_message=original))


def test_command_for_another_bot_is_ignored_in_groups_and_private_chats() -> None:
    bot = adapter(groups="all")
    assert not answered(bot, tg.fixture_bytes("33_group_command_other_bot.json"))
    private = json.loads(tg.fixture_bytes("01_private_text.json"))
    private["message"]["text"] = "/help@someotherbot"
    private["message"]["entities"] = [{"type": "bot_command", "offset": 0, "length": 18}]
    assert not answered(bot, json.dumps(private).encode())


def test_bare_command_in_a_group_is_addressed() -> None:
    assert answered(adapter(), command("/help me"))


def test_groups_all_answers_unaddressed_chatter() -> None:
    assert answered(adapter(groups="all"), tg.fixture_bytes("30_group_chatter.json"))


def test_private_chat_is_answered_without_being_addressed() -> None:
    assert answered(adapter(), tg.fixture_bytes("01_private_text.json"))


def test_edited_message_is_ignored_by_default_and_a_new_turn_when_configured() -> None:
    body = tg.fixture_bytes("07_edited_message.json")
    assert not adapter().parse(body, "support").events
    assert adapter().parse(body, "support").ignored == ("edited_message",)
    [event] = adapter(edited_messages="new_turn").parse(body, "support").events
    assert isinstance(event, InboundMessage)
    assert (event.kind, event.edited_message_id) == ("edited", "1365")


def undecided(bot: TelegramAdapter, body: bytes) -> bool:
    """Whether parsing refuses ``body`` as depending on the unknown username (quarantined)."""
    try:
        bot.parse(body, "support")
    except ChannelError as exc:
        return exc.reason == USERNAME_UNKNOWN
    return False


def test_without_a_username_what_depends_on_it_is_quarantined_and_the_rest_decided() -> None:
    """getMe failed: the username is unknown, the id still comes from the token. A command
    with a name and a group mention cannot be told ours or not: they are quarantined (the
    gateway replays them once getMe answers), not dropped; replies and bare commands count,
    and group chatter with no mention is still not the bot's."""
    bot = adapter(identity=None)
    assert undecided(bot, tg.fixture_bytes("20_group_command.json"))
    text = "@someone hello"
    assert undecided(bot, group_message(text, entities=[entity("mention", text, "@someone")]))
    me = {"id": int(tg.TOKEN.split(":")[0]), "is_bot": True, "first_name": "Bot"}
    original = {"message_id": 3, "date": 1735690400, "chat": GROUP, "from": me, "text": "x"}
    assert answered(bot, group_message("thanks", reply_to_message=original))
    assert answered(bot, command("/help"))
    assert not undecided(bot, group_message("just chatting"))
    assert not answered(bot, group_message("just chatting"))


async def test_identify_asks_get_me_once_and_uses_the_username(
    bot_api: tuple[tg.FakeBotApi, str],
) -> None:
    fake, url = bot_api
    async with TelegramAdapter(tg.config(url)) as bot:
        await bot.identify()
        await bot.identify()  # known now: not asked again
        identity = bot.identity("support")
        text = "@gw_bot hello"
        mention = group_message(text, entities=[entity("mention", text, "@gw_bot")])
        assert answered(bot, mention)
    assert identity == BotIdentity(7000000001, "gw_bot")
    assert fake.methods() == ["getMe", "getMe"]  # one per bot, support and sales
    assert {call.token for call in fake.calls} == {tg.TOKEN, tg.OTHER_TOKEN}


async def test_identify_failure_is_logged_without_the_token_and_leaves_it_unknown(
    bot_api: tuple[tg.FakeBotApi, str], caplog: pytest.LogCaptureFixture
) -> None:
    fake, url = bot_api
    fake.script("getMe", tg.error(401, "Unauthorized"), tg.error(401, "Unauthorized"))
    async with TelegramAdapter(tg.config(url)) as bot:
        with caplog.at_level(logging.WARNING, logger="channels.telegram"):
            await bot.identify()
        identity = bot.identity("support")
    assert identity == BotIdentity(int(tg.TOKEN.split(":")[0]), None)
    assert "getMe failed" in caplog.text
    assert tg.TOKEN not in caplog.text


async def test_identify_of_an_answer_that_is_not_a_user_is_logged_and_the_start_goes_on(
    bot_api: tuple[tg.FakeBotApi, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A Bot API stand-in that answers ``true`` to every method once stopped the gateway's
    start with PTB's TypeError."""

    async def not_a_user(request: web.Request, call: tg.Recorded) -> web.StreamResponse:
        return tg.ok(True)

    fake, url = bot_api
    fake.script("getMe", not_a_user, not_a_user)
    async with TelegramAdapter(tg.config(url)) as bot:
        with caplog.at_level(logging.WARNING, logger="channels.telegram"):
            await bot.identify()
        identity = bot.identity("support")
    assert identity == BotIdentity(int(tg.TOKEN.split(":")[0]), None)
    assert "getMe failed (its answer is not a User (TypeError))" in caplog.text


class ManualClock:
    """The retry's pauses: recorded, and over only when the test says so."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._paused = asyncio.Event()
        self._wake: asyncio.Queue[None] = asyncio.Queue()

    async def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self._paused.set()
        await self._wake.get()

    async def paused(self, count: int) -> None:
        """Until the retry has begun its ``count``-th pause."""
        async with asyncio.timeout(5):
            while len(self.pauses) < count:
                self._paused.clear()
                await self._paused.wait()

    def wake(self) -> None:
        self._wake.put_nowait(None)


async def test_identity_that_failed_at_start_is_learned_later_without_a_restart(
    bot_api: tuple[tg.FakeBotApi, str], caplog: pytest.LogCaptureFixture
) -> None:
    """The Bot API is down at start (502), then back: the retry learns the username and
    mentions of the bot are answered, each failing bot warned about once."""
    fake, url = bot_api
    down = tg.error(502, "Bad Gateway")
    fake.script("getMe", down, down, down)  # support and sales at start, support's first retry
    text = "@gw_bot hello"
    mention = group_message(text, entities=[entity("mention", text, "@gw_bot")])
    clock = ManualClock()
    async with TelegramAdapter(tg.config(url)) as bot:
        with caplog.at_level(logging.DEBUG, logger="channels.telegram"):
            assert await bot.identify(again_later=True) == {"support", "sales"}
            assert undecided(bot, mention)
            known = asyncio.create_task(bot.identified())
            retrying = asyncio.create_task(bot.keep_identifying(clock.sleep))
            await clock.paused(1)
            clock.wake()
            await clock.paused(2)
            assert bot.identity("sales") == BotIdentity(7000000001, "gw_bot")
            assert bot.identity("support").username is None  # failed once more
            assert not known.done()  # one bot is still unknown
            clock.wake()
            async with asyncio.timeout(5):
                await retrying
            assert bot.identity("support") == BotIdentity(7000000001, "gw_bot")
            async with asyncio.timeout(5):
                await known
            assert answered(bot, mention)
    assert clock.pauses == [1.0, 2.0]
    assert fake.methods() == ["getMe"] * 5
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2
    assert all("asked again in the background" in line for line in warned)
    assert "bot support: getMe answered: @gw_bot" in caplog.text
    assert tg.TOKEN not in caplog.text


async def test_identify_retry_pauses_grow_to_30_seconds_and_log_only_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures = [{"support": "NetworkError: down"}] * 8 + [{}]
    clock = ManualClock()

    async def attempt() -> dict[str, str]:
        return failures.pop(0)

    with caplog.at_level(logging.DEBUG, logger="channels.telegram"):
        retrying = asyncio.create_task(retry(attempt, clock.sleep))
        for count in range(1, 10):
            await clock.paused(count)
            clock.wake()
        async with asyncio.timeout(5):
            assert await retrying == 9
    assert clock.pauses == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]
    assert {r.levelno for r in caplog.records} == {logging.DEBUG}


async def test_identify_retry_stops_once_the_adapter_is_closed(
    bot_api: tuple[tg.FakeBotApi, str],
) -> None:
    fake, url = bot_api
    fake.script("getMe", tg.error(502, "Bad Gateway"), tg.error(502, "Bad Gateway"))
    clock = ManualClock()
    bot = TelegramAdapter(tg.config(url))
    await bot.start()
    assert await bot.identify() == {"support", "sales"}
    retrying = asyncio.create_task(bot.keep_identifying(clock.sleep))
    await clock.paused(1)
    await bot.aclose()
    clock.wake()
    async with asyncio.timeout(5):
        await retrying
    assert fake.methods() == ["getMe", "getMe"]  # none after the close
