"""delivery_keys: the same keys parse gives, over every fixture and under random mutation."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook_bot_gateway.channels import (
    ChannelError,
    TemplateUpdate,
    UnknownAccount,
    WhatsAppNumberConfig,
)
from webhook_bot_gateway.channels.telegram import TelegramAdapter
from webhook_bot_gateway.channels.whatsapp import WhatsAppAdapter

from . import telegram_fakes as tg
from . import whatsapp_fakes as wa
from .test_whatsapp_fuzz import _mutate, json_values

WHATSAPP = WhatsAppAdapter(wa.config())  # no request is made: nothing to close
WHATSAPP_NUMBERS = {number.phone_number_id for number in wa.config().numbers}
TELEGRAM = TelegramAdapter(tg.config(), identities=tg.FIXTURE_BOTS)
# A bot that answers every message it gets: its parse keys are every key delivery_keys claims
# (a message another bot would not answer still claims its key, so its retries are dropped).
FOR_ANOTHER_BOT = {"33_group_command_other_bot.json"}
TELEGRAM_ALL = TelegramAdapter(
    tg.config(groups="all", edited_messages="new_turn"), identities=tg.FIXTURE_BOTS
)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def parsed_keys(
    adapter: WhatsAppAdapter | TelegramAdapter, body: bytes, account: str | None
) -> Any:
    """The event keys of parse, or the ChannelError it raises."""
    try:
        result = adapter.parse(body, account)
    except ChannelError as exc:
        return exc
    return result, list(dict.fromkeys(event.dedup_key for event in result.events))


@pytest.mark.parametrize("name", wa.fixture_names())
def test_whatsapp_delivery_keys_equal_parse_keys_on_every_fixture(name: str) -> None:
    body = wa.fixture_bytes(name)
    result, keys = parsed_keys(WHATSAPP, body, None)
    if not keys and result.failures:
        with pytest.raises(ChannelError):
            WHATSAPP.delivery_keys(body)
    else:
        assert WHATSAPP.delivery_keys(body) == keys


@pytest.mark.parametrize("name", tg.fixture_names())
def test_telegram_delivery_keys_equal_parse_keys_on_every_fixture(name: str) -> None:
    body = tg.fixture_bytes(name)
    parsed = parsed_keys(TELEGRAM_ALL, body, "support")
    if isinstance(parsed, ChannelError):  # an update type not handled: quarantined whole
        with pytest.raises(ChannelError, match=re.escape(parsed.reason)):
            TELEGRAM.delivery_keys(body, "support")
        return
    _, keys = parsed
    if name in FOR_ANOTHER_BOT:  # no bot of ours answers it, yet its key is claimed
        keys = [f"telegram:support:{json.loads(body)['update_id']}"]
    assert TELEGRAM.delivery_keys(body, "support") == keys


def test_whatsapp_delivery_keys_skip_unconfigured_numbers() -> None:
    only_b = WhatsAppAdapter(
        wa.config(numbers=(WhatsAppNumberConfig(phone_number_id=wa.NUMBER_B, access_token="t"),))
    )
    assert WHATSAPP.delivery_keys(wa.fixture_bytes("image_with_caption.json"))
    assert only_b.delivery_keys(wa.fixture_bytes("image_with_caption.json")) == []


def test_whatsapp_delivery_keys_keep_good_parts_beside_broken_ones() -> None:
    keys = WHATSAPP.delivery_keys(wa.fixture_bytes("mixed_good_and_broken.json"))
    assert keys == ["whatsapp:wamid.good1", "whatsapp:wamid.good2"]


@pytest.mark.parametrize(
    "body",
    [b"not json", b"\xff\xfe", b"[1, 2]", b'{"object": "page", "entry": []}', b'{"object": 1}'],
)
def test_whatsapp_delivery_keys_refuse_what_is_not_the_envelope(body: bytes) -> None:
    with pytest.raises(ChannelError):
        WHATSAPP.delivery_keys(body)


def test_whatsapp_delivery_keys_refuse_a_delivery_with_only_broken_parts() -> None:
    body = wa.fixture_json("text_message.json")
    body["entry"][0]["changes"][0]["value"]["messages"][0]["timestamp"] = "yesterday"
    with pytest.raises(ChannelError, match="no usable part"):
        WHATSAPP.delivery_keys(json.dumps(body).encode())


@pytest.mark.parametrize(
    ("part", "fixture"), [("messages", "text_message.json"), ("statuses", "status_sent.json")]
)
@pytest.mark.parametrize("stamp", [False, True, 1.5])
def test_a_timestamp_that_is_not_a_string_or_an_integer_is_no_event_and_claims_no_key(
    part: str, fixture: str, stamp: object
) -> None:
    """pydantic read false as 0, so parse made an event whose key delivery_keys had not
    claimed (found by the mutation test below)."""
    body = wa.fixture_json(fixture)
    body["entry"][0]["changes"][0]["value"][part][0]["timestamp"] = stamp
    raw = json.dumps(body).encode()
    result, keys = parsed_keys(WHATSAPP, raw, None)
    assert keys == []
    assert result.failures
    with pytest.raises(ChannelError, match="no usable part"):
        WHATSAPP.delivery_keys(raw)


def test_whatsapp_a_delivery_of_a_field_not_handled_is_refused_for_quarantine() -> None:
    body = {"object": "whatsapp_business_account", "entry": [{"changes": [{"field": "calls"}]}]}
    with pytest.raises(ChannelError, match="field calls is not handled"):
        WHATSAPP.delivery_keys(json.dumps(body).encode())


@pytest.mark.parametrize(
    "body",
    [b"nope", b"[]", b'{"message": {}}', b'{"update_id": "1", "message": {}}', b'{"update_id": 1}'],
)
def test_telegram_delivery_keys_refuse_what_is_not_an_update(body: bytes) -> None:
    with pytest.raises(ChannelError):
        TELEGRAM.delivery_keys(body, "support")


def test_telegram_delivery_keys_of_an_unknown_bot_raise_unknown_account() -> None:
    with pytest.raises(UnknownAccount):
        TELEGRAM.delivery_keys(tg.fixture_bytes("01_private_text.json"), "nobody")


def test_telegram_delivery_keys_name_the_bot() -> None:
    body = tg.fixture_bytes("01_private_text.json")
    update_id = json.loads(body)["update_id"]
    assert TELEGRAM.delivery_keys(body, "sales") == [f"telegram:sales:{update_id}"]


def keys_or_error(
    adapter: WhatsAppAdapter | TelegramAdapter, body: bytes, account: str | None
) -> Any:
    try:
        return adapter.delivery_keys(body, account)
    except ChannelError as exc:
        return exc


def is_ours(adapter: WhatsAppAdapter | TelegramAdapter, event: Any) -> bool:
    """An event of a configured account: delivery_keys skips the others by design (their
    values are known to be irrelevant to this gateway), while parse keeps them."""
    if adapter is not WHATSAPP or isinstance(event, TemplateUpdate):  # a WABA's, not a number's
        return True
    return bool(event.account in WHATSAPP_NUMBERS)


def assert_consistent(
    adapter: WhatsAppAdapter | TelegramAdapter, body: bytes, account: str | None
) -> None:
    """Every event of a configured account that parse gives has its key claimed; a refusal
    means parse has no such event either."""
    parsed = parsed_keys(adapter, body, account)
    keys = keys_or_error(adapter, body, account)
    event_keys = (
        []
        if isinstance(parsed, ChannelError)
        else list(dict.fromkeys(e.dedup_key for e in parsed[0].events if is_ours(adapter, e)))
    )
    if isinstance(keys, ChannelError):
        assert event_keys == []
    else:
        assert set(event_keys) <= set(keys)


WA_FIXTURES = {name: wa.fixture_json(name) for name in wa.fixture_names()}
TG_FIXTURES = {name: json.loads(tg.fixture_bytes(name)) for name in tg.fixture_names()}


@SETTINGS
@given(data=st.data(), name=st.sampled_from(sorted(WA_FIXTURES)))
def test_whatsapp_delivery_keys_cover_every_event_of_mutated_fixtures(
    data: st.DataObject, name: str
) -> None:
    body = copy.deepcopy(WA_FIXTURES[name])
    for _ in range(data.draw(st.integers(min_value=1, max_value=3), label="mutations")):
        body = _mutate(data, body)
    assert_consistent(WHATSAPP, json.dumps(body).encode(), None)


@SETTINGS
@given(data=st.data(), name=st.sampled_from(sorted(TG_FIXTURES)))
def test_telegram_delivery_keys_cover_every_event_of_mutated_fixtures(
    data: st.DataObject, name: str
) -> None:
    body = copy.deepcopy(TG_FIXTURES[name])
    for _ in range(data.draw(st.integers(min_value=1, max_value=3), label="mutations")):
        body = _mutate(data, body)
    assert_consistent(TELEGRAM, json.dumps(body).encode(), "support")


@SETTINGS
@given(value=json_values)
def test_delivery_keys_on_random_json_raise_only_channel_error(value: Any) -> None:
    body = json.dumps(value).encode()
    assert_consistent(WHATSAPP, body, None)
    assert_consistent(TELEGRAM, body, "support")


def with_number(body: dict[str, Any], number: str) -> dict[str, Any]:
    """A copy of a one-change delivery, addressed to ``number``."""
    body = copy.deepcopy(body)
    body["entry"][0]["changes"][0]["value"]["metadata"]["phone_number_id"] = number
    return body


def test_an_unconfigured_number_claims_no_key_though_parse_keeps_its_event() -> None:
    """Found by the mutation test: a phone_number_id of "null" is a number of another
    gateway, so its message claims no key, while parse still returns its event."""
    raw = json.dumps(with_number(wa.fixture_json("text_message.json"), "null")).encode()
    result, keys = parsed_keys(WHATSAPP, raw, None)
    assert keys, "parse keeps the event of a number it does not know"
    assert WHATSAPP.delivery_keys(raw) == []
    assert_consistent(WHATSAPP, raw, None)


def test_a_configured_number_beside_an_unconfigured_one_claims_its_own_keys() -> None:
    ours = wa.fixture_json("text_message.json")
    theirs = with_number(wa.fixture_json("image_with_caption.json"), "999")
    ours["entry"] += theirs["entry"]
    raw = json.dumps(ours).encode()
    ours_key = f"whatsapp:{ours['entry'][0]['changes'][0]['value']['messages'][0]['id']}"
    assert WHATSAPP.delivery_keys(raw) == [ours_key]
    assert_consistent(WHATSAPP, raw, None)
