"""X-Hub-Signature-256 over the raw body, and the GET subscription handshake."""

from __future__ import annotations

import json

import pytest
from multidict import CIMultiDict

from webhook_bot_gateway.channels import ADAPTERS, BadSignature, BadVerifyToken, WebhookRejected
from webhook_bot_gateway.channels.whatsapp import SIGNATURE_HEADER, WhatsAppAdapter

from .whatsapp_fakes import (
    APP_SECRET,
    NUMBER_A,
    NUMBER_B,
    VERIFY_TOKEN,
    config,
    fixture_bytes,
    sign,
)

BODY = fixture_bytes("text_message.json")


@pytest.fixture
def adapter() -> WhatsAppAdapter:
    return WhatsAppAdapter(config())


def test_verify_accepts_the_signature_of_the_raw_body(adapter: WhatsAppAdapter) -> None:
    adapter.verify(CIMultiDict({SIGNATURE_HEADER: sign(BODY)}), BODY)


def test_verify_reads_the_header_case_insensitively(adapter: WhatsAppAdapter) -> None:
    adapter.verify({"x-hub-signature-256": sign(BODY)}, BODY)


def test_verify_accepts_an_uppercase_hex_digest(adapter: WhatsAppAdapter) -> None:
    signature = sign(BODY)
    adapter.verify({SIGNATURE_HEADER: "sha256=" + signature.removeprefix("sha256=").upper()}, BODY)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Hub-Signature": "sha1=" + "0" * 40},
        {SIGNATURE_HEADER: ""},
        {SIGNATURE_HEADER: sign(BODY).removeprefix("sha256=")},
        {SIGNATURE_HEADER: "sha1=" + sign(BODY).removeprefix("sha256=")},
        {SIGNATURE_HEADER: sign(BODY)[:-1]},
        {SIGNATURE_HEADER: sign(BODY) + "0"},
        {SIGNATURE_HEADER: " " + sign(BODY)},
        {SIGNATURE_HEADER: "sha256=" + "zz" * 32},
        {SIGNATURE_HEADER: "sha256=" + "é" * 64},
    ],
    ids=[
        "missing",
        "sha1-only",
        "empty",
        "no-prefix",
        "wrong-prefix",
        "short",
        "long",
        "leading-space",
        "not-hex",
        "non-ascii",
    ],
)
def test_verify_rejects_missing_or_malformed_header(
    adapter: WhatsAppAdapter, headers: dict[str, str]
) -> None:
    with pytest.raises(BadSignature) as caught:
        adapter.verify(headers, BODY)
    assert caught.value.status == 401


def test_verify_rejects_a_signature_made_with_another_secret(adapter: WhatsAppAdapter) -> None:
    with pytest.raises(BadSignature, match="does not match"):
        adapter.verify({SIGNATURE_HEADER: sign(BODY, "another-secret")}, BODY)


def test_verify_rejects_a_body_changed_by_one_byte(adapter: WhatsAppAdapter) -> None:
    changed = BODY.replace(b"another color", b"another colour", 1)[: len(BODY)]
    flipped = bytes([BODY[0] ^ 1]) + BODY[1:]
    for body in (changed, flipped, BODY + b" ", BODY[:-1]):
        with pytest.raises(BadSignature):
            adapter.verify({SIGNATURE_HEADER: sign(BODY)}, body)


def test_verify_rejects_the_same_json_reserialized(adapter: WhatsAppAdapter) -> None:
    compact = json.dumps(json.loads(BODY), separators=(",", ":")).encode()
    assert json.loads(compact) == json.loads(BODY)
    with pytest.raises(BadSignature):
        adapter.verify({SIGNATURE_HEADER: sign(BODY)}, compact)
    adapter.verify({SIGNATURE_HEADER: sign(compact)}, compact)  # signed as sent: fine


def test_verify_with_an_empty_app_secret_rejects_everything() -> None:
    adapter = WhatsAppAdapter(config(app_secret=""))
    for signature in (sign(BODY, ""), sign(BODY)):
        with pytest.raises(BadSignature, match="not configured"):
            adapter.verify({SIGNATURE_HEADER: signature}, BODY)


def test_verify_reasons_do_not_carry_the_secret_or_signature(adapter: WhatsAppAdapter) -> None:
    wrong = sign(BODY, "another-secret")
    with pytest.raises(BadSignature) as caught:
        adapter.verify({SIGNATURE_HEADER: wrong}, BODY)
    assert APP_SECRET not in str(caught.value)
    assert wrong.removeprefix("sha256=") not in str(caught.value)


SUBSCRIBE = {
    "hub.mode": "subscribe",
    "hub.challenge": "1158201444",
    "hub.verify_token": VERIFY_TOKEN,
}


def test_verify_subscription_returns_the_challenge(adapter: WhatsAppAdapter) -> None:
    assert adapter.verify_subscription(SUBSCRIBE) == "1158201444"


@pytest.mark.parametrize(
    "query",
    [
        {**SUBSCRIBE, "hub.verify_token": "wrong"},
        {**SUBSCRIBE, "hub.verify_token": ""},
        {**SUBSCRIBE, "hub.verify_token": VERIFY_TOKEN + "x"},
        {**SUBSCRIBE, "hub.verify_token": "é\udcff"},
        {**SUBSCRIBE, "hub.mode": "unsubscribe"},
        {k: v for k, v in SUBSCRIBE.items() if k != "hub.mode"},
        {k: v for k, v in SUBSCRIBE.items() if k != "hub.verify_token"},
        {k: v for k, v in SUBSCRIBE.items() if k != "hub.challenge"},
        {**SUBSCRIBE, "hub.challenge": "<script>alert(1)</script>"},
        {**SUBSCRIBE, "hub.challenge": "1" * 257},
        {},
    ],
)
def test_verify_subscription_rejects_with_403(
    adapter: WhatsAppAdapter, query: dict[str, str]
) -> None:
    with pytest.raises(BadVerifyToken) as caught:
        adapter.verify_subscription(query)
    assert isinstance(caught.value, WebhookRejected)
    assert caught.value.status == 403
    assert caught.value.code == "bad_verify_token"


def test_verify_subscription_with_an_empty_verify_token_rejects_everything() -> None:
    adapter = WhatsAppAdapter(config(verify_token=""))
    with pytest.raises(BadVerifyToken, match="not configured"):
        adapter.verify_subscription({**SUBSCRIBE, "hub.verify_token": ""})


def test_registry_builds_the_whatsapp_adapter() -> None:
    adapter = ADAPTERS["whatsapp"](config(), None)
    assert isinstance(adapter, WhatsAppAdapter)
    assert adapter.name == "whatsapp"


def test_adapter_knows_its_configured_numbers(adapter: WhatsAppAdapter) -> None:
    assert adapter.accounts == {NUMBER_A, NUMBER_B}
