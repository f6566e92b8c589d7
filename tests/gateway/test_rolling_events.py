"""A rolling deploy runs two releases on one store: each reads the inbox rows the other wrote."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.channels import whatsapp_fakes as wa
from webhook_bot_gateway.channels import InboundMessage
from webhook_bot_gateway.channels._model import ADDED_SINCE_LAST_RELEASE
from webhook_bot_gateway.channels.whatsapp import WhatsAppAdapter
from webhook_bot_gateway.gateway._convert import user_input
from webhook_bot_gateway.gateway._pipeline._intake import to_parsed
from webhook_bot_gateway.store import Delivery

REFERRAL = Path(__file__).parents[1] / "fixtures" / "whatsapp" / "text_referral_ad.json"


def stored_events(body: bytes) -> list[dict[str, Any]]:
    """The inbox rows' events the intake writes for a WhatsApp delivery."""
    result = WhatsAppAdapter(wa.config()).parse(body)
    keys = frozenset(event.dedup_key for event in result.events)
    delivery = Delivery(1, "whatsapp", None, body, keys, datetime.now(UTC))
    return [row.event for row in to_parsed(delivery, result).inbox]


def test_a_plain_message_is_stored_with_only_the_fields_the_release_before_knew() -> None:
    """The release before refuses a field it does not know: a message answered there during
    the deploy failed its turns, then was dead-lettered with an apology."""
    known_before = set(InboundMessage.model_fields) - set(ADDED_SINCE_LAST_RELEASE)
    [event] = stored_events(wa.fixture_bytes("text_message.json"))
    assert set(event) <= known_before


def test_a_message_from_an_ad_keeps_its_referral() -> None:
    [event] = stored_events(REFERRAL.read_bytes())
    assert isinstance(event["referral"], dict)
    assert "referred_product" not in event  # unset: left out


def test_an_event_a_newer_release_wrote_is_read_without_its_new_fields() -> None:
    [event] = stored_events(wa.fixture_bytes("text_message.json"))
    newer = event | {"sentiment": "calm", "contacts": [{"name": "A", "phones": [], "x": 1}]}
    turn = user_input([newer])
    assert turn.text == user_input([event]).text
