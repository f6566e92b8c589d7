"""The WhatsApp parser over every fixture, and over the missing-field and bad-envelope cases."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from webhook_bot_gateway.channels import (
    ChannelError,
    Contact,
    DeliveryStatus,
    FlowReply,
    InboundMessage,
    InteractiveReply,
    Location,
    Media,
    Order,
    OrderItem,
    ParseResult,
    PlatformError,
    Reaction,
    Referral,
    ReferredProduct,
    SystemNotice,
    TemplateUpdate,
)
from webhook_bot_gateway.channels.whatsapp import WhatsAppAdapter, parse_delivery

from .whatsapp_fakes import NUMBER_A, NUMBER_B, config, fixture_bytes, fixture_json, fixture_names

PHONE = "972987654321"
BSUID = "US.13491208655302741918"
ERR_131000 = PlatformError(
    code=131000,
    title="Something went wrong",
    message="Something went wrong",
    details="Unsupported webhook payload",
)
CTWA_CLID = (
    "Aff-n8ZTODiE79d22KtAwQKj9e_mIEOOj27vDVwFjN80dp4_0NiNhEgpGo0AHemvuSoifXaytfTzcchptiErTKCqTrJ5"
    "nW1h7IHYeYymGb5K5J5iTROpBhWAGaIAeUzHL50"
)
ERR_131051 = PlatformError(
    code=131051,
    title="Message type unknown",
    message="Message type unknown",
    details="Message type is currently not supported.",
)

# fixture -> the fields of its only event that matter (every other field is checked elsewhere)
SINGLE_MESSAGE: dict[str, dict[str, Any]] = {
    "text_message.json": {
        "kind": "text",
        "text": "Does it come in another color?",
        "account": NUMBER_B,
        "chat_id": "16505551234",
        "sender_name": "Sheena Nelson",
        "sender_user_id": None,
        "timestamp": datetime(2025, 6, 8, 20, 59, 43, tzinfo=UTC),
    },
    "text_message_with_bsuid.json": {
        "kind": "text",
        "text": "Body Text",
        "chat_id": PHONE,
        "sender_user_id": BSUID,
    },
    "text_no_contacts.json": {
        "kind": "text",
        "account": NUMBER_B,
        "chat_id": "16505551234",
        "sender_name": None,
    },
    "text_contact_without_profile.json": {"kind": "text", "chat_id": PHONE, "sender_name": None},
    "username_user_id_only.json": {
        "kind": "text",
        "chat_id": BSUID,
        "sender_id": BSUID,
        "sender_name": "Bob",
        "sender_user_id": None,
    },
    "reply_with_context.json": {
        "kind": "text",
        "text": "replied text",
        "reply_to": "wamid.xyzxyz==",
    },
    "image_with_caption.json": {
        "kind": "image",
        "text": "caption",
        "media": Media(
            id="65463453",
            mime_type="image/jpeg",
            caption="caption",
            url="https://lookaside.fbsbx.com/whatsapp_business/attachments/?mid=65463453"
            "&source=webhook&ext=487r9re&hash=heiwchueowbcew-dnedcw",
        ),
    },
    "audio.json": {
        "kind": "audio",
        "media": Media(id="1234567890987654321", mime_type="audio/ogg; codecs=opus"),
        "reply_to": None,
    },
    "audio_voice.json": {"kind": "voice", "platform_type": "audio"},
    "video.json": {
        "kind": "video",
        "media": Media(id="765756756", mime_type="video/mp4", caption="caption"),
    },
    "document.json": {
        "kind": "document",
        "media": Media(
            id="1234567890987654321",
            mime_type="application/pdf",
            caption="caption",
            file_name="filename.pdf",
        ),
    },
    "sticker.json": {
        "kind": "sticker",
        "media": Media(id="1234567890987654321", mime_type="image/webp"),
    },
    "location.json": {
        "kind": "location",
        "location": Location(
            latitude=37.4611978,
            longitude=-122.2164385,
            name="Facebook HQ",
            address="1 Hacker Way, Menlo Park, CA 94025",
            url="https://maps.google.com/?cid=2000000000000000000",
        ),
    },
    "contacts.json": {
        "kind": "contacts",
        "contacts": (
            Contact(name="Chandler Bing", phones=("+1 555-555-5555",), user_id=PHONE),
            Contact(name="Monica", phones=("+1 666-666-6666",), user_id=PHONE),
            Contact(name="Rachel Green", phones=("+1 777-777-7777",), user_id=PHONE),
        ),
    },
    "interactive_button_reply.json": {
        "kind": "interactive",
        "text": "title",
        "interactive": InteractiveReply(id="callback_data", title="title"),
        "reply_to": "wamid.xyzxyz",
    },
    "interactive_list_reply.json": {
        "kind": "interactive",
        "interactive": InteractiveReply(
            id="callback_data", title="title", description="description"
        ),
    },
    "template_quick_reply_button.json": {
        "kind": "interactive",
        "platform_type": "button",
        "interactive": InteractiveReply(id="callback_data", title="title"),
        "reply_to": "wamid.xyzxyz==",
    },
    "reaction.json": {
        "kind": "reaction",
        "reaction": Reaction(message_id="wamid.yzxyzx=", emoji="😮"),
    },
    "reaction_removed.json": {
        "kind": "reaction",
        "reaction": Reaction(message_id="wamid.yzxyzx=", emoji=None),
    },
    "reaction_no_emoji.json": {
        "kind": "reaction",
        "reaction": Reaction(message_id="wamid.yzxyzx=", emoji=None),
    },
    "interactive_nfm_reply.json": {
        "kind": "flow",
        "text": None,
        "platform_type": "interactive.nfm_reply",
        "reply_to": "wamid.flowinvite==",
        "flow": FlowReply(
            name="flow",
            body="Sent",
            flow_token="ticket-4711",
            response={
                "flow_token": "ticket-4711",
                "issue": "damaged_item",
                "order_number": "A-1017",
                "contact_by_phone": True,
            },
        ),
    },
    "location_current.json": {
        "kind": "location",
        "location": Location(latitude=32.0853, longitude=34.7818),
    },
    "order.json": {
        "kind": "order",
        "text": None,
        "order": Order(
            catalog_id="354160437058781",
            items=(
                OrderItem(product_id="HAMBURGER", quantity=3, item_price=30, currency="ILS"),
                OrderItem(product_id="FRENCH_FRIES", quantity=2, item_price=35, currency="ILS"),
                OrderItem(product_id="SODA", quantity=2, item_price=10, currency="ILS"),
            ),
        ),
    },
    "system_user_changed_number.json": {
        "kind": "system",
        "chat_id": PHONE,
        "sender_name": None,
        "system": SystemNotice(
            type="user_changed_number",
            body="User A changed from 972987654321 to 972912345678",
            new_user_id="972912345678",
        ),
    },
    "unsupported.json": {
        "kind": "unsupported",
        "platform_type": "pool",
        "errors": (ERR_131051,),
    },
    "unknown_type.json": {"kind": "unsupported", "platform_type": "request_welcome"},
    "text_referral_ad.json": {
        "kind": "text",
        "text": "Hi! Do you ship the aloe to Haifa?",
        "reply_to": None,
        "referred_product": None,
        "referral": Referral(
            source_type="ad",
            source_id="120226305854810726",
            source_url="https://fb.me/3cr4Wqqkv",
            headline="Chat with us",
            body="Summer succulents are here!",
            media_type="image",
            image_url="https://scontent.xx.fbcdn.net/v/t45.1600-4/"
            "434531036_120226305854700726_n.png",
            ctwa_clid=CTWA_CLID,
            welcome_message="Hi there! Let us know how we can help!",
        ),
    },
    "image_referral_video_ad.json": {
        "kind": "image",
        "media": Media(id="1003383421387256", mime_type="image/jpeg"),
        "referral": Referral(
            source_type="ad",
            source_id="120226305854810990",
            source_url="https://fb.me/9kLp2Xw7q",
            headline="Repot like a pro",
            body="Repotting in 3 easy steps.\nWatch, then ask us anything.",
            media_type="video",
            video_url="https://video.xx.fbcdn.net/v/t42.1790-2/449276345_120226305854811026_n.mp4",
            thumbnail_url="https://scontent.xx.fbcdn.net/v/t15.5256-10/"
            "449276345_120226305854811026_n.jpg",
            welcome_message="Hi there! Let us know how we can help!",
        ),
    },
    "text_referred_product.json": {
        "kind": "text",
        "text": "Is this in stock?",
        "reply_to": "wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA",
        "referral": None,
        "referred_product": ReferredProduct(product_id="HAMBURGER", catalog_id="354160437058781"),
    },
    "errors_value_level.json": {
        "kind": "unsupported",
        "platform_type": "interactive",
        "reply_to": "wamid.gvwegfretge==",
        "errors": (ERR_131000,),
    },
}

SINGLE_STATUS: dict[str, dict[str, Any]] = {
    "status_sent.json": {"state": "sent", "dedup_key": "whatsapp:wamid.xyzxyz:sent"},
    "status_delivered.json": {"state": "delivered", "chat_id": PHONE},
    "status_read.json": {"state": "read", "errors": ()},
    "status_failed.json": {
        "state": "failed",
        "errors": (
            PlatformError(
                code=130472,
                title="User's number is part of an experiment",
                message="User's number is part of an experiment",
                details="Failed to send message because this user's phone number is part of "
                "an experiment",
            ),
        ),
    },
}

TEMPLATE_UPDATES = {
    "template_status_update.json": {
        "field": "message_template_status_update",
        "event": "REJECTED",
        "reason": "INVALID_FORMAT",
        "new_quality": None,
    },
    "template_quality_update.json": {
        "field": "message_template_quality_update",
        "event": None,
        "previous_quality": "GREEN",
        "new_quality": "YELLOW",
    },
}

MULTI = {"batch.json", "mixed_good_and_broken.json", "status_played.json", "value_errors_only.json"}


def parse(name: str) -> ParseResult:
    return parse_delivery(fixture_bytes(name))


def test_fixture_tables_cover_every_fixture_file() -> None:
    covered = set(SINGLE_MESSAGE) | set(SINGLE_STATUS) | set(TEMPLATE_UPDATES) | MULTI
    assert covered == set(fixture_names())


@pytest.mark.parametrize("name", sorted(SINGLE_MESSAGE))
def test_parse_message_fixture_gives_one_event_with_its_fields(name: str) -> None:
    result = parse(name)
    assert result.failures == ()
    assert result.ignored == ()
    (event,) = result.events
    assert isinstance(event, InboundMessage)
    raw = fixture_json(name)["entry"][0]["changes"][0]["value"]["messages"][0]
    assert event.channel == "whatsapp"
    assert event.message_id == raw["id"]
    assert event.dedup_key == f"whatsapp:{raw['id']}"
    assert event.timestamp == datetime.fromtimestamp(int(raw["timestamp"]), tz=UTC)
    assert event.chat_id == event.sender_id
    expected = {"account": NUMBER_A, "chat_id": PHONE, "platform_type": raw["type"]}
    expected.update(SINGLE_MESSAGE[name])
    assert {key: getattr(event, key) for key in expected} == expected


@pytest.mark.parametrize("name", sorted(SINGLE_STATUS))
def test_parse_status_fixture_gives_one_delivery_status(name: str) -> None:
    result = parse(name)
    assert result.failures == ()
    (event,) = result.events
    assert isinstance(event, DeliveryStatus)
    expected = {"account": NUMBER_A, "chat_id": PHONE, "message_id": "wamid.xyzxyz"}
    expected.update(SINGLE_STATUS[name])
    assert event.dedup_key == f"whatsapp:wamid.xyzxyz:{event.state}"
    assert {key: getattr(event, key) for key in expected} == expected


@pytest.mark.parametrize("name", sorted(TEMPLATE_UPDATES))
def test_parse_template_update_fixture_gives_one_template_update(name: str) -> None:
    result = parse(name)
    assert (result.failures, result.ignored) == ((), ())
    (event,) = result.events
    assert isinstance(event, TemplateUpdate)
    expected = {
        "account": "1234567890987654321",
        "template_id": "594425479261596",
        "name": "follow_up",
        "language": "en_US",
        **TEMPLATE_UPDATES[name],
    }
    assert {key: getattr(event, key) for key in expected} == expected
    assert parse(name).events[0].dedup_key == event.dedup_key  # the same delivery, the same key


def test_parse_flow_reply_whose_response_json_is_not_an_object_fails() -> None:
    raw = fixture_json("interactive_nfm_reply.json")
    message = raw["entry"][0]["changes"][0]["value"]["messages"][0]
    for broken, reason in (("{not json", "is not JSON"), ("[1, 2]", "is not a JSON object")):
        message["interactive"]["nfm_reply"]["response_json"] = broken
        result = parse_delivery(json.dumps(raw).encode())
        assert result.events == ()
        [failure] = result.failures
        assert reason in failure


def test_parse_batch_keeps_every_entry_change_message_and_status() -> None:
    result = parse("batch.json")
    assert result.failures == ("entry[0].changes[1]: field account_update is not handled",)
    assert result.ignored == ()
    summary = [
        (e.type, e.account, e.chat_id, e.message_id, getattr(e, "sender_name", None))
        for e in result.events
    ]
    assert summary == [
        ("message", NUMBER_A, PHONE, "wamid.batch1", "Test Name"),
        ("message", NUMBER_A, "972911111111", "wamid.batch2", "Other Name"),
        ("status", NUMBER_A, PHONE, "wamid.ours1", None),
        ("message", NUMBER_B, "16505551234", "wamid.batch3", "Sheena Nelson"),
    ]
    assert len({e.dedup_key for e in result.events}) == 4


def test_parse_keeps_good_messages_around_a_broken_one() -> None:
    result = parse("mixed_good_and_broken.json")
    assert [e.message_id for e in result.events] == ["wamid.good1", "wamid.good2"]
    assert len(result.failures) == 2
    broken, status = result.failures
    assert "messages[1]" in broken
    assert "wamid.broken" in broken
    assert "timestamp" in broken
    assert "statuses[0]" in status
    assert "recipient" in status
    assert "broken one" not in " ".join(result.failures)  # user content stays out of reasons


def test_parse_ignores_delivery_states_the_model_does_not_track() -> None:
    result = parse("status_played.json")
    assert result.events == ()
    assert result.failures == ()
    assert result.ignored == ("status:played",)


def test_parse_value_errors_without_messages_become_a_failure_reason() -> None:
    result = parse("value_errors_only.json")
    assert result.events == ()
    (reason,) = result.failures
    assert "130429" in reason
    assert "Cloud API message throughput has been reached." in reason


def test_parse_value_errors_attach_to_every_event_of_that_value() -> None:
    body = fixture_json("batch.json")
    body["entry"][0]["changes"][0]["value"]["errors"] = [{"code": 131000, "title": "x"}]
    result = parse_delivery(json.dumps(body).encode())
    codes = [[err.code for err in e.errors] for e in result.events]
    assert codes == [[131000], [131000], [131000], []]
    assert all("account_update" in failure for failure in result.failures)


def test_parse_message_errors_follow_value_errors() -> None:
    body = fixture_json("unsupported.json")
    body["entry"][0]["changes"][0]["value"]["errors"] = [{"code": 1, "title": "value"}]
    (event,) = parse_delivery(json.dumps(body).encode()).events
    assert [err.code for err in event.errors] == [1, 131051]


def test_parse_unreadable_error_entry_is_kept_as_an_error() -> None:
    body = fixture_json("status_failed.json")
    body["entry"][0]["changes"][0]["value"]["statuses"][0]["errors"] = ["nonsense"]
    (event,) = parse_delivery(json.dumps(body).encode()).events
    assert event.errors == (PlatformError(title="unreadable error entry"),)


def _text_body(message: dict[str, Any], contacts: list[Any] | None) -> bytes:
    value: dict[str, Any] = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "972123456789", "phone_number_id": NUMBER_A},
        "messages": [{"id": "wamid.m", "timestamp": "1697043223", "type": "text", **message}],
    }
    if contacts is not None:
        value["contacts"] = contacts
    envelope = {"field": "messages", "value": value}
    return json.dumps(
        {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [envelope]}]}
    ).encode()


@pytest.mark.parametrize(
    ("message", "contacts", "chat_id", "name"),
    [
        ({"from": PHONE}, None, PHONE, None),
        ({"from": PHONE}, [{"wa_id": PHONE}], PHONE, None),
        ({"from": PHONE}, [{"profile": {}, "wa_id": PHONE}], PHONE, None),
        ({"from": PHONE}, [{"profile": {"name": "N"}}], PHONE, "N"),
        ({"from": PHONE}, [{"profile": {"name": "N"}, "wa_id": "other"}], PHONE, None),
        ({}, [{"profile": {"name": "N"}, "wa_id": PHONE}], PHONE, "N"),
        ({}, [{"profile": {"name": "N"}, "user_id": BSUID}], BSUID, "N"),
        ({"from_user_id": BSUID}, None, BSUID, None),
        ({"from_user_id": BSUID}, [{"user_id": BSUID, "wa_id": PHONE}], BSUID, None),
        ({"from": PHONE, "from_user_id": BSUID}, [{"user_id": BSUID}], PHONE, None),
        ({"from": PHONE}, "not a list", PHONE, None),
        (
            {"from": PHONE},
            [17, {"profile": "x"}, {"profile": {"name": "N"}, "wa_id": PHONE}],
            PHONE,
            "N",
        ),
    ],
)
def test_parse_sender_survives_missing_contact_fields(
    message: dict[str, Any], contacts: Any, chat_id: str, name: str | None
) -> None:
    result = parse_delivery(_text_body({"text": {"body": "hi"}, **message}, contacts))
    (event,) = result.events
    assert isinstance(event, InboundMessage)
    assert (event.chat_id, event.sender_id, event.sender_name) == (chat_id, chat_id, name)


def test_parse_keeps_the_bsuid_beside_a_phone_number() -> None:
    body = _text_body({"from": PHONE, "from_user_id": BSUID, "text": {"body": "hi"}}, None)
    (event,) = parse_delivery(body).events
    assert isinstance(event, InboundMessage)
    assert (event.chat_id, event.sender_user_id) == (PHONE, BSUID)


def test_parse_message_without_any_sender_is_a_failure() -> None:
    result = parse_delivery(_text_body({"text": {"body": "hi"}}, None))
    assert result.events == ()
    (reason,) = result.failures
    assert "no sender" in reason


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"type": "text", "text": "not an object"}, "text"),
        ({"type": "image", "image": {"mime_type": "image/jpeg"}}, "id"),
        ({"timestamp": "-5"}, "timestamp"),
        ({"timestamp": "99999999999999999999"}, "timestamp"),
        ({"timestamp": 1.5}, "timestamp"),
        ({"id": ""}, "id"),
        ({"type": "contacts", "contacts": {"name": "x"}}, "contacts"),
        ({"type": "reaction", "reaction": {"emoji": "x"}}, "message_id"),
        ({"referral": "an ad"}, "referral: Input should be"),
        ({"referral": {"source_url": 17}}, "referral.source_url: Input should be"),
        ({"referral": {"welcome_message": "hi"}}, "referral.welcome_message: Input should be"),
        ({"context": {"referred_product": {"catalog_id": "1"}}}, "product_retailer_id"),
        ({"context": {"referred_product": {"product_retailer_id": ""}}}, "product_retailer_id"),
        ({"context": {"referred_product": []}}, "context.referred_product: Input should be"),
    ],
)
def test_parse_bad_message_parts_become_failures(change: dict[str, Any], reason: str) -> None:
    message = {"from": PHONE, "text": {"body": "hi"}, **change}
    result = parse_delivery(_text_body(message, None))
    assert result.events == ()
    (failure,) = result.failures
    assert reason in failure


def test_parse_referral_and_referred_product_ignore_keys_they_do_not_know() -> None:
    referral = {"source_url": "https://fb.me/x", "ads_context_data": {"photo_url": "u"}, "n": 1}
    product = {"product_retailer_id": "SKU-1", "catalog_id": "9", "variant": {"size": "L"}}
    context = {"from": "972123456789", "id": "wamid.p", "referred_product": product}
    message = {"from": PHONE, "text": {"body": "hi"}, "referral": referral, "context": context}
    (event,) = parse_delivery(_text_body(message, None)).events
    assert isinstance(event, InboundMessage)
    assert event.referral == Referral(source_url="https://fb.me/x")
    assert event.referred_product == ReferredProduct(product_id="SKU-1", catalog_id="9")


def test_parse_message_without_referral_or_product_has_neither() -> None:
    (event,) = parse("reply_with_context.json").events
    assert isinstance(event, InboundMessage)
    assert (event.referral, event.referred_product) == (None, None)


def test_parse_integer_timestamp_is_accepted() -> None:
    (event,) = parse_delivery(
        _text_body({"from": PHONE, "timestamp": 0, "text": {"body": "x"}}, None)
    ).events
    assert event.timestamp == datetime(1970, 1, 1, tzinfo=UTC)


def test_parse_interactive_of_unknown_subtype_is_unsupported_with_its_name() -> None:
    message = {"from": PHONE, "type": "interactive", "interactive": {"type": "nfm_reply"}}
    (event,) = parse_delivery(_text_body(message, None)).events
    assert isinstance(event, InboundMessage)
    assert (event.kind, event.platform_type) == ("unsupported", "interactive.nfm_reply")


def test_parse_status_of_a_username_user_uses_recipient_user_id() -> None:
    body = fixture_json("status_sent.json")
    status = body["entry"][0]["changes"][0]["value"]["statuses"][0]
    del status["recipient_id"]
    status["recipient_user_id"] = BSUID
    (event,) = parse_delivery(json.dumps(body).encode()).events
    assert event.chat_id == BSUID


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "not JSON"),
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[" * 100_000, "not JSON"),
        (b"[]", "not a JSON object"),
        (b'"text"', "not a JSON object"),
        (b"{}", '"object"'),
        (b'{"object": "page", "entry": []}', '"object"'),
        (b'{"object": "whatsapp_business_account"}', '"entry"'),
        (b'{"object": "whatsapp_business_account", "entry": {}}', '"entry"'),
    ],
)
def test_parse_unusable_body_raises_channel_error(body: bytes, reason: str) -> None:
    with pytest.raises(ChannelError) as caught:
        parse_delivery(body)
    assert caught.value.channel == "whatsapp"
    assert reason in caught.value.reason


@pytest.mark.parametrize(
    ("entry", "failure"),
    [
        ("x", "entry[0]: not an object"),
        ({"changes": "x"}, "entry[0]: not an object with a changes list"),
        ({"changes": ["x"]}, "entry[0].changes[0]: not an object"),
        ({"changes": [{"field": "messages"}]}, "phone_number_id"),
        ({"changes": [{"field": "messages", "value": {"metadata": {}}}]}, "phone_number_id"),
        (
            {
                "changes": [
                    {
                        "field": "messages",
                        "value": {"metadata": {"phone_number_id": "1"}, "messages": {}},
                    }
                ]
            },
            "messages: not a list",
        ),
    ],
)
def test_parse_bad_entries_and_changes_become_failures(entry: Any, failure: str) -> None:
    body = json.dumps({"object": "whatsapp_business_account", "entry": [entry]}).encode()
    result = parse_delivery(body)
    assert result.events == ()
    (reason,) = result.failures
    assert failure in reason


def test_parse_other_fields_are_failures_so_the_delivery_is_quarantined() -> None:
    changes = [{"field": "account_update", "value": {}}, {"value": {}}]
    body = json.dumps(
        {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": changes}]}
    ).encode()
    result = parse_delivery(body)
    assert (result.events, result.ignored) == ((), ())
    assert result.failures == (
        "entry[0].changes[0]: field account_update is not handled",
        "entry[0].changes[1]: field None is not handled",
    )


def test_adapter_parse_is_the_parser() -> None:
    adapter = WhatsAppAdapter(config())
    assert adapter.parse(fixture_bytes("batch.json")) == parse("batch.json")


def test_adapter_parse_turns_an_unexpected_parser_bug_into_channel_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(body: bytes) -> ParseResult:
        raise KeyError("bug")

    monkeypatch.setattr("webhook_bot_gateway.channels._whatsapp._adapter.parse_delivery", broken)
    with pytest.raises(ChannelError, match="parser error: KeyError"):
        WhatsAppAdapter(config()).parse(b"{}")
    assert "parser failed" in caplog.text
