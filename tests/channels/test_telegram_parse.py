"""Parsing every stored Update, and the malformed ones that must become ChannelError."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from telegram import Bot, TelegramObject, Update

from tests.channels.telegram_fakes import (
    FIXTURE_BOTS,
    FIXTURES,
    config,
    fixture_bytes,
    fixture_names,
)
from webhook_bot_gateway.channels import (
    ChannelError,
    InboundMessage,
    MembershipEvent,
    UnknownAccount,
)
from webhook_bot_gateway.channels._telegram._content import type_of_name
from webhook_bot_gateway.channels.telegram import TelegramAdapter

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ALICE = {"sender_id": "123456789", "sender_name": "Alice Example", "chat_id": "123456789"}
BOB_IN_GROUP = {"sender_id": "987654321", "sender_name": "Bob", "chat_id": "-1001987654321"}
CHANNEL_POST = {"sender_id": "-1001122334455", "sender_name": "Example Announcements"}


def at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


# Fixture -> the fields its one event must have (None: the update is acknowledged and ignored).
EXPECTED: dict[str, dict[str, Any] | None] = {
    "01_private_text.json": {
        **ALICE,
        "kind": "text",
        "message_id": "1365",
        "timestamp": at(1735689600),
        "text": "Hello, can you help me with my order?",
    },
    "02_start_command.json": {
        **ALICE,
        "kind": "command",
        "text": "/start ref_campaign42",
        "command": {"name": "start", "args": "ref_campaign42"},
    },
    "03_photo_with_caption.json": {
        **ALICE,
        "kind": "image",
        "text": None,
        "media": {
            "id": "AgACAgIAAxkBAAIFW2d0AAFhxlargeQgAAp7cMRuY7xhLAAEAAwIAA3kAAzYE",
            "size": 190881,
            "caption": "Receipt for *order* 5531",
            "mime_type": None,
            "file_name": None,
            "url": None,
        },
    },
    "04_document.json": {
        **ALICE,
        "kind": "document",
        "media": {
            "id": "BQACAgIAAxkBAAIFXGd0AAFhdocQQgAAp7cMRuY7xhLAAEAAwIAA3kAAzYE",
            "mime_type": "application/pdf",
            "file_name": "invoice-5531.pdf",
            "size": 536392,
            "caption": "Here is the invoice",
            "url": None,
        },
    },
    "34_document_without_mime_type.json": {
        **ALICE,
        "kind": "document",
        "message_id": "2090",
        "media": {
            "id": "BQACAgIAAxkBAAIIKmd0AAFhnomimeQgAAp7cMRuY7xhLAAEAAwIAA3kAAzYE",
            "mime_type": "application/pdf",  # Telegram named none: from the name's extension
            "file_name": "report.pdf",
            "size": 48213,
            "caption": None,
            "url": None,
        },
    },
    "05_location.json": {
        **ALICE,
        "kind": "location",
        "location": {
            "latitude": 52.520008,
            "longitude": 13.404954,
            "name": None,
            "address": None,
            "url": None,
        },
    },
    "06_callback_query_inline_keyboard.json": {
        **ALICE,
        "kind": "interactive",
        "message_id": "530328474913466721",
        "callback_query_id": "530328474913466721",
        "reply_to": "1370",
        "timestamp": NOW,
        "interactive": {"id": "order:5531", "title": "Order 5531", "description": None},
    },
    "07_edited_message.json": {
        **ALICE,
        "kind": "edited",
        "message_id": "1365",
        "edited_message_id": "1365",
        "text": "Hello, can you help me with my order 5531?",
        "timestamp": at(1735689700),
    },
    "08_channel_post.json": {
        **CHANNEL_POST,
        "chat_id": "-1001122334455",
        "kind": "text",
        "message_id": "42",
        "text": "Maintenance tonight from 22:00 UTC.",
    },
    "09_edited_channel_post.json": {
        **CHANNEL_POST,
        "chat_id": "-1001122334455",
        "kind": "edited",
        "edited_message_id": "42",
        "text": "Maintenance tonight from 23:00 UTC.",
        "timestamp": at(1735689860),
    },
    "10_audio.json": {
        **ALICE,
        "kind": "audio",
        "media": {
            "id": "CQACAgIAAxkBAAIFX2d0AAFhaudioAAJ7cMRuY7xhLHgQ",
            "mime_type": "audio/mpeg",
            "file_name": "hold-music.mp3",
            "size": 3433216,
            "caption": "Is this your hold music?",
            "url": None,
        },
    },
    "11_video.json": {
        **ALICE,
        "kind": "video",
        "media": {
            "id": "BAACAgIAAxkBAAIFYGd0AAFhvideoAAJ7cMRuY7xhLHgQ",
            "mime_type": "video/mp4",
            "file_name": "damaged-box.mp4",
            "size": 2483100,
            "caption": "The box arrived like this",
            "url": None,
        },
    },
    "12_sticker.json": {
        **ALICE,
        "kind": "sticker",
        "text": "\U0001f44d",
        "media": {
            "id": "CAACAgIAAxkBAAIFYWd0AAFhstickerAAJ7cMRuY7xhLHgQ",
            "size": 22134,
            "mime_type": None,
            "file_name": None,
            "caption": None,
            "url": None,
        },
    },
    "13_contact.json": {
        **ALICE,
        "kind": "contacts",
        "contacts": (
            {"name": "Bob Builder", "phones": ("+4915112345678",), "user_id": "987654321"},
        ),
    },
    "14_voice.json": {
        **ALICE,
        "kind": "voice",
        "media": {
            "id": "AwACAgIAAxkBAAIFXmd0AAFhvoiceAAJ7cMRuY7xhLHgQ",
            "mime_type": "audio/ogg",
            "size": 23000,
            "file_name": None,
            "caption": None,
            "url": None,
        },
    },
    "15_my_chat_member_kicked.json": {
        "type": "membership",
        "state": "blocked",
        "chat_id": "123456789",
        "sender_id": "123456789",
        "timestamp": at(1735690000),
    },
    "16_my_chat_member_unblocked.json": {
        "type": "membership",
        "state": "unblocked",
        "chat_id": "123456789",
        "sender_id": "123456789",
    },
    "17_message_reaction.json": {
        **BOB_IN_GROUP,
        "kind": "reaction",
        "message_id": "update:871234517",
        "reaction": {"message_id": "2044", "emoji": "\U0001f44d"},
        "timestamp": at(1735690200),
    },
    "18_message_reaction_removed.json": {
        **BOB_IN_GROUP,
        "kind": "reaction",
        "reaction": {"message_id": "2044", "emoji": None},
    },
    "19_reply_to_message.json": {
        **ALICE,
        "kind": "text",
        "text": "Yes, that one",
        "reply_to": "1371",
        "message_id": "1377",
    },
    "20_group_command.json": {
        **BOB_IN_GROUP,
        "thread_id": None,  # not a forum: no topic
        "kind": "command",
        "command": {"name": "help", "args": "refunds please"},
    },
    "21_dice.json": {**ALICE, "kind": "unsupported", "platform_type": "dice", "text": None},
    "22_poll_message.json": {**BOB_IN_GROUP, "kind": "unsupported", "platform_type": "poll"},
    "25_venue.json": {
        **ALICE,
        "kind": "location",
        "location": {
            "latitude": 52.516275,
            "longitude": 13.377704,
            "name": "Brandenburg Gate",
            "address": "Pariser Platz, 10117 Berlin",
            "url": None,
        },
    },
    "26_animation.json": {
        **ALICE,
        "kind": "video",
        "media": {
            "id": "CgACAgIAAxkBAAIFYmd0AAFhanimAAJ7cMRuY7xhLHgQ",
            "mime_type": "video/mp4",
            "file_name": "thumbs-up.mp4",
            "size": 98304,
            "caption": None,
            "url": None,
        },
    },
    "27_my_chat_member_added_to_group.json": None,
    "30_group_chatter.json": {
        **BOB_IN_GROUP,
        "kind": "text",
        "text": "did anyone see the match last night?",
    },
    "31_group_mention.json": {
        **BOB_IN_GROUP,
        "kind": "text",
        "text": "@gateway_test_bot where is my refund?",
    },
    "32_group_reply_to_bot.json": {**BOB_IN_GROUP, "kind": "text", "reply_to": "2052"},
    "33_group_command_other_bot.json": None,  # for another bot: ignored even by this one
    "29_forum_topic_message.json": {
        **BOB_IN_GROUP,
        "kind": "text",
        "text": "My invoice is wrong",
        "thread_id": "3001",
    },
    "28_callback_query_inline_message.json": {
        **ALICE,
        "kind": "interactive",
        "reply_to": None,
        "timestamp": NOW,
        "interactive": {"id": "track:5531", "title": None, "description": None},
        "callback_query_id": "530328474913466722",
    },
}


@pytest.fixture
async def adapter() -> AsyncIterator[TelegramAdapter]:
    # A bot that answers every message, as the fixtures' bot: the shapes are what is tested
    # here; which messages a bot answers is tested in test_telegram_audience.py.
    everything = config(groups="all", edited_messages="new_turn")
    adapter = TelegramAdapter(everything, clock=lambda: NOW, identities=FIXTURE_BOTS)
    yield adapter
    await adapter.aclose()


def update_body(**update: Any) -> bytes:
    return json.dumps({"update_id": 5, **update}).encode()


def test_fixtures_all_have_an_expectation() -> None:
    assert sorted([*EXPECTED, *NOT_HANDLED]) == fixture_names()


@pytest.mark.parametrize("name", fixture_names())
def test_fixture_parses_with_ptb_without_unknown_fields(name: str) -> None:
    update = Update.de_json(json.loads(fixture_bytes(name)), Bot("1:x"))
    assert unknown_fields(update) == []


def unknown_fields(value: object, path: str = "update") -> list[str]:
    """PTB keeps fields it does not know in api_kwargs: none may be left anywhere."""
    if isinstance(value, tuple):
        return [p for i, item in enumerate(value) for p in unknown_fields(item, f"{path}[{i}]")]
    if not isinstance(value, TelegramObject):
        return []
    found = [f"{path}: {sorted(value.api_kwargs)}"] if value.api_kwargs else []
    for key, item in value._get_attrs(recursive=False).items():
        found += unknown_fields(item, f"{path}.{key}")
    return found


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parse_fixture_gives_the_expected_event(adapter: TelegramAdapter, name: str) -> None:
    result = adapter.parse(fixture_bytes(name), "support")
    expected = EXPECTED[name]
    update_id = json.loads(fixture_bytes(name))["update_id"]
    assert result.failures == ()
    if expected is None:
        assert result.events == ()
        assert result.ignored == (
            next(k for k in json.loads(fixture_bytes(name)) if k != "update_id"),
        )
        return
    [event] = result.events
    assert result.ignored == ()
    dumped = event.model_dump()
    assert {key: dumped[key] for key in expected} == expected
    assert (event.channel, event.account) == ("telegram", "support")
    assert event.dedup_key == f"telegram:support:{update_id}"
    assert event.timestamp.utcoffset() is not None


def test_parse_dedup_key_names_the_bot(adapter: TelegramAdapter) -> None:
    body = fixture_bytes("01_private_text.json")
    [support] = adapter.parse(body, "support").events
    [sales] = adapter.parse(body, "sales").events
    assert (support.dedup_key, sales.dedup_key) == (
        "telegram:support:871234501",
        "telegram:sales:871234501",
    )


def test_parse_membership_event_is_a_membership_event(adapter: TelegramAdapter) -> None:
    [event] = adapter.parse(fixture_bytes("15_my_chat_member_kicked.json"), "support").events
    assert isinstance(event, MembershipEvent)


def test_parse_unknown_account_is_rejected(adapter: TelegramAdapter) -> None:
    with pytest.raises(UnknownAccount):
        adapter.parse(fixture_bytes("01_private_text.json"), "nope")


NOT_HANDLED = ("23_chat_join_request.json", "24_poll_update.json")


@pytest.mark.parametrize("name", NOT_HANDLED)
def test_parse_refuses_an_update_type_it_does_not_handle(
    adapter: TelegramAdapter, name: str
) -> None:
    kind = next(k for k in json.loads(fixture_bytes(name)) if k != "update_id")
    with pytest.raises(ChannelError, match=f"update type '{kind}' is not handled"):
        adapter.parse(fixture_bytes(name), "support")


def test_parse_refuses_an_update_type_ptb_does_not_know(adapter: TelegramAdapter) -> None:
    with pytest.raises(ChannelError, match="'brand_new_update' is not handled"):
        adapter.parse(update_body(brand_new_update={"id": 1}), "support")


def message(**fields: Any) -> dict[str, Any]:
    chat = {"id": 42, "type": "private", "first_name": "Al"}
    return {"message_id": 7, "date": 1735689600, "chat": chat, **fields}


def parse_one(adapter: TelegramAdapter, **update: Any) -> InboundMessage:
    [event] = adapter.parse(update_body(**update), "support").events
    assert isinstance(event, InboundMessage)
    return event


def test_parse_anonymous_group_admin_speaks_as_the_group(adapter: TelegramAdapter) -> None:
    group = {"id": -1001, "title": "Team", "type": "supergroup"}
    # Telegram fills `from` with the placeholder user @GroupAnonymousBot for compatibility.
    placeholder = {
        "id": 1087968824,
        "is_bot": True,
        "first_name": "Group",
        "username": "GroupAnonymousBot",
    }
    anonymous = message(chat=group, sender_chat=group, text="hi", **{"from": placeholder})
    event = parse_one(adapter, message=anonymous)
    assert (event.sender_id, event.sender_name, event.chat_id) == ("-1001", "Team", "-1001")


def test_parse_message_without_sender_uses_the_chat(adapter: TelegramAdapter) -> None:
    event = parse_one(adapter, message=message(text="hi"))
    assert event.sender_id == "42"


def test_parse_a_lone_surrogate_in_a_text_or_a_name_is_u_fffd(adapter: TelegramAdapter) -> None:
    """json.dumps escapes a lone surrogate as \\udc00: the parsed text must still be storable."""
    sender = {"id": 42, "is_bot": False, "first_name": "A\ud800l"}
    event = parse_one(adapter, message=message(text="hi \udc00", **{"from": sender}))
    assert (event.text, event.sender_name) == ("hi \ufffd", "A\ufffdl")


def test_parse_callback_on_an_inaccessible_message(adapter: TelegramAdapter) -> None:
    old = {"chat": {"id": 42, "type": "private"}, "message_id": 3, "date": 0}
    user = {"id": 42, "is_bot": False, "first_name": "Al"}
    query = {"id": "99", "from": user, "chat_instance": "1", "message": old, "data": "go"}
    event = parse_one(adapter, callback_query=query)
    assert (event.chat_id, event.reply_to, event.interactive) == ("42", "3", event.interactive)
    assert event.interactive is not None
    assert (event.interactive.id, event.interactive.title) == ("go", None)


def test_parse_callback_in_a_forum_topic_keeps_the_topic(adapter: TelegramAdapter) -> None:
    """A button pressed under the bot's message in a topic: the answer goes to that topic,
    not to General (Telegram puts a message without message_thread_id there)."""
    forum = {"id": -1001, "title": "Desk", "type": "supergroup", "is_forum": True}
    bot = {"id": 1, "is_bot": True, "first_name": "Support", "username": "support_bot"}
    keyboard = {"inline_keyboard": [[{"text": "Billing", "callback_data": "billing"}]]}
    origin = message(
        chat=forum,
        text="Pick one",
        message_thread_id=3001,
        is_topic_message=True,
        reply_markup=keyboard,
        **{"from": bot},
    )
    user = {"id": 42, "is_bot": False, "first_name": "Al"}
    query = {"id": "99", "from": user, "chat_instance": "1", "message": origin, "data": "billing"}
    event = parse_one(adapter, callback_query=query)
    assert (event.chat_id, event.thread_id, event.reply_to) == ("-1001", "3001", "7")


def test_parse_game_callback_is_unsupported_but_keeps_the_query_id(
    adapter: TelegramAdapter,
) -> None:
    user = {"id": 42, "is_bot": False, "first_name": "Al"}
    query = {"id": "99", "from": user, "chat_instance": "1", "game_short_name": "tetris"}
    event = parse_one(adapter, callback_query=query)
    assert (event.kind, event.platform_type, event.callback_query_id) == (
        "unsupported",
        "callback_query",
        "99",
    )


@pytest.mark.parametrize(
    ("reaction", "emoji"),
    [
        ({"type": "custom_emoji", "custom_emoji_id": "5368324170671202286"}, "5368324170671202286"),
        ({"type": "paid"}, "\u2b50"),
    ],
)
def test_parse_reaction_types_other_than_emoji(
    adapter: TelegramAdapter, reaction: dict[str, str], emoji: str
) -> None:
    change = {
        "chat": {"id": 42, "type": "private"},
        "message_id": 3,
        "date": 1735689600,
        "actor_chat": {"id": -100, "type": "channel", "title": "News"},
        "old_reaction": [],
        "new_reaction": [reaction],
    }
    event = parse_one(adapter, message_reaction=change)
    assert event.reaction is not None
    assert event.reaction.emoji == emoji
    assert (event.sender_id, event.sender_name) == ("-100", "News")


def test_parse_command_needs_the_entity_at_offset_zero(adapter: TelegramAdapter) -> None:
    entity = {"type": "bot_command", "offset": 4, "length": 5}
    event = parse_one(adapter, message=message(text="see /help", entities=[entity]))
    assert (event.kind, event.command) == ("text", None)


def test_parse_command_counts_entities_in_utf16(adapter: TelegramAdapter) -> None:
    entity = {"type": "bot_command", "offset": 0, "length": 3}
    event = parse_one(adapter, message=message(text="/go \U0001f680 now", entities=[entity]))
    assert event.command is not None
    assert (event.command.name, event.command.args) == ("go", "\U0001f680 now")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "not JSON"),
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not an object"),
        (b'"update"', "not an object"),
        (b"[" * 100_000, "not JSON"),
        (b"{}", "update_id"),
        (b'{"update_id": "5", "message": {}}', "update_id"),
        (b'{"update_id": true, "message": {}}', "update_id"),
        (b'{"update_id": 5}', "without a type"),
        (b'{"update_id": 5, "message": "hello"}', "message"),
        (b'{"update_id": 5, "message": {"message_id": 1, "date": 1}}', "chat"),
        (
            b'{"update_id": 5, "message": {"message_id": 1, "chat": {"id": 1, "type": "private"}}}',
            "message",
        ),
        (
            b'{"update_id": 5, "message": {"message_id": "1", "date": 1, '
            b'"chat": {"id": 1, "type": "private"}}}',
            "message_id",
        ),
        (
            b'{"update_id": 5, "message": {"message_id": 1, "date": "yesterday", '
            b'"chat": {"id": 1, "type": "private"}}}',
            "message",
        ),
        (b'{"update_id": 5, "callback_query": {}}', "callback_query"),
        (
            b'{"update_id": 5, "my_chat_member": {"chat": {"id": 1, "type": "private"}}}',
            "my_chat_member",
        ),
    ],
)
def test_parse_malformed_body_raises_channel_error_with_a_reason(
    adapter: TelegramAdapter, body: bytes, reason: str
) -> None:
    with pytest.raises(ChannelError, match=reason) as caught:
        adapter.parse(body, "support")
    assert type(caught.value) is ChannelError
    assert caught.value.channel == "telegram"


def test_fixtures_directory_is_the_one_documented() -> None:
    readme = (FIXTURES / "README.md").read_text()
    assert all(name in readme for name in fixture_names())


def test_parse_a_video_note_is_an_mp4_video(adapter: TelegramAdapter) -> None:
    """A VideoNote has no mime_type field: the Bot API sends "rounded square MPEG4 videos"."""
    note = {"file_id": "vn-1", "file_unique_id": "vn1", "length": 240, "duration": 2}
    event = parse_one(adapter, message=message(video_note=note))
    assert event.kind == "video"
    assert event.media is not None
    assert (event.media.id, event.media.mime_type) == ("vn-1", "video/mp4")


def test_parse_a_files_own_mime_type_wins_over_its_name(adapter: TelegramAdapter) -> None:
    """The name is only read when Telegram sent no mime_type."""
    document = {
        "file_id": "d-1",
        "file_unique_id": "d1",
        "file_name": "scan.pdf",
        "mime_type": "image/png",
    }
    event = parse_one(adapter, message=message(document=document))
    assert event.media is not None
    assert event.media.mime_type == "image/png"


@pytest.mark.parametrize(
    ("field", "file", "expected"),
    [
        ("audio", {"duration": 1, "file_name": "hold.MP3"}, "audio/mpeg"),
        ("video", {"duration": 1, "width": 1, "height": 1, "file_name": "clip.mp4"}, "video/mp4"),
        ("document", {"file_name": "notes.txt"}, "text/plain"),
    ],
)
def test_parse_a_file_without_mime_type_is_typed_by_its_name(
    adapter: TelegramAdapter, field: str, file: dict[str, Any], expected: str
) -> None:
    body = {"file_id": "f-1", "file_unique_id": "f1", **file}
    event = parse_one(adapter, message=message(**{field: body}))
    assert event.media is not None
    assert event.media.mime_type == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("report.pdf", "application/pdf"),
        ("REPORT.PDF", "application/pdf"),
        ("a.b.c.jpg", "image/jpeg"),
        ("C:\\Users\\alice\\scan.pdf", "application/pdf"),
        ("../../etc/scan.pdf", "application/pdf"),
        ("x" * 5000 + ".pdf", "application/pdf"),
        (None, None),
        ("", None),
        ("README", None),  # no extension
        (".pdf", None),  # a hidden file named "pdf", no extension
        ("report.", None),
        ("folder/", None),
        ("report.pdf ", None),  # the extension is "pdf ", in no table
        ("report.unknownext", None),
        ("archive.tar.gz", None),  # gzip bytes: guess_type would say tar
        ("backup.tgz", None),
        ("data:text/html,x", None),  # guess_type would read it as a data: URL of text/html
        ("https://example.com/a.html?x=report", None),  # the suffix is ".html?x=report"
    ],
)
def test_type_of_name_reads_only_the_last_extension(name: str | None, expected: str | None) -> None:
    assert type_of_name(name) == expected


def test_parse_a_document_with_an_odd_name_and_no_type_stays_untyped(
    adapter: TelegramAdapter,
) -> None:
    document = {"file_id": "d-2", "file_unique_id": "d2", "file_name": "data:text/html,x"}
    event = parse_one(adapter, message=message(document=document))
    assert event.media is not None
    assert (event.media.mime_type, event.media.file_name) == (None, "data:text/html,x")


@pytest.mark.parametrize(
    ("field", "system"),
    [
        (
            {"migrate_to_chat_id": -1001987654321},
            {
                "type": "migrate_to_chat_id",
                "body": "this group became the supergroup -1001987654321",
                "new_user_id": "-1001987654321",
            },
        ),
        (
            {"migrate_from_chat_id": -4001},
            {
                "type": "migrate_from_chat_id",
                "body": "this supergroup was the group -4001",
                "new_user_id": None,
            },
        ),
    ],
)
async def test_parse_a_group_upgrade_is_a_notice_even_unaddressed(
    field: dict[str, Any], system: dict[str, Any]
) -> None:
    """Telegram sends the upgrade's service messages to every bot of the group; they are not
    addressed to the bot, yet they say where the group's replies go now."""
    addressed = TelegramAdapter(config(), clock=lambda: NOW, identities=FIXTURE_BOTS)
    try:
        group = {"id": -4001, "title": "Team", "type": "group"}
        user = {"id": 42, "is_bot": False, "first_name": "Al"}
        event = parse_one(addressed, message=message(chat=group, **{"from": user}, **field))
    finally:
        await addressed.aclose()
    assert (event.kind, event.text, event.chat_id) == ("system", None, "-4001")
    assert event.system is not None
    assert event.system.model_dump() == system


PINNED = {"message_id": 3, "date": 1735689500, "chat": {"id": 42, "type": "private"}, "text": "x"}


@pytest.mark.parametrize(
    ("field", "value", "chat"),
    [
        ("pinned_message", PINNED, {"id": 42, "type": "private", "first_name": "Al"}),
        ("new_chat_members", [{"id": 9, "is_bot": False, "first_name": "Bo"}], None),
        ("left_chat_member", {"id": 9, "is_bot": False, "first_name": "Bo"}, None),
        ("new_chat_title", "Support team", None),
        ("forum_topic_created", {"name": "Refunds", "icon_color": 7322096}, None),
    ],
)
def test_parse_a_service_message_about_the_chat_is_a_notice(
    adapter: TelegramAdapter, field: str, value: Any, chat: dict[str, Any] | None
) -> None:
    """A pin, a member joining or leaving, a new title: nobody asked the bot anything, and the
    agent answered them as messages it could not read (in a private chat, or with groups =
    "all"). They are notices now, which no agent answers."""
    where = chat or {"id": -4001, "title": "Team", "type": "group"}
    user = {"id": 42, "is_bot": False, "first_name": "Al"}
    event = parse_one(adapter, message=message(chat=where, **{"from": user, field: value}))
    assert (event.kind, event.platform_type, event.text) == ("system", field, None)
    assert event.system is not None
    assert event.system.type == field


def test_parse_a_service_message_a_user_sends_the_bot_stays_a_message(
    adapter: TelegramAdapter,
) -> None:
    """users_shared answers the bot's own request button: the agent reads it (as unsupported,
    until it is a kind of its own)."""
    shared = {"request_id": 1, "users": [{"user_id": 9}]}
    event = parse_one(
        adapter,
        message=message(
            **{"from": {"id": 42, "is_bot": False, "first_name": "Al"}, "users_shared": shared}
        ),
    )
    assert (event.kind, event.platform_type) == ("unsupported", "users_shared")


def test_parse_an_album_part_names_its_album(adapter: TelegramAdapter) -> None:
    photo = [{"file_id": "AgAD1", "file_unique_id": "u1", "width": 90, "height": 90}]
    user = {"id": 42, "is_bot": False, "first_name": "Al"}
    part = message(**{"from": user, "photo": photo, "media_group_id": "13579"})
    event = parse_one(adapter, message=part)
    assert (event.kind, event.media_group) == ("image", "13579")
