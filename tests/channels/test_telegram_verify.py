"""The secret-token check: a header compared in constant time, never depending on the body."""

from __future__ import annotations

import hmac
import json
from collections.abc import AsyncIterator

import pytest
from multidict import CIMultiDict

from tests.channels.telegram_fakes import OTHER_SECRET, SECRET, config, fixture_bytes
from webhook_bot_gateway.channels import ADAPTERS, BadSecretToken, UnknownAccount
from webhook_bot_gateway.channels._telegram import _adapter
from webhook_bot_gateway.channels.telegram import SECRET_HEADER, TelegramAdapter

BODY = fixture_bytes("01_private_text.json")


@pytest.fixture
async def adapter() -> AsyncIterator[TelegramAdapter]:
    adapter = TelegramAdapter(config())
    yield adapter
    await adapter.aclose()


def headers(secret: str) -> CIMultiDict[str]:
    return CIMultiDict({SECRET_HEADER: secret, "Content-Type": "application/json"})


def test_verify_accepts_the_bots_secret(adapter: TelegramAdapter) -> None:
    adapter.verify(headers(SECRET), BODY, "support")
    adapter.verify(headers(OTHER_SECRET), BODY, "sales")


@pytest.mark.parametrize("secret", ["", "wrong", SECRET[:-1], SECRET + "x", SECRET.upper(), "é"])
def test_verify_rejects_a_wrong_secret(adapter: TelegramAdapter, secret: str) -> None:
    with pytest.raises(BadSecretToken) as caught:
        adapter.verify(headers(secret), BODY, "support")
    assert caught.value.status == 401


def test_verify_rejects_another_bots_secret(adapter: TelegramAdapter) -> None:
    with pytest.raises(BadSecretToken):
        adapter.verify(headers(OTHER_SECRET), BODY, "support")


def test_verify_rejects_a_missing_secret(adapter: TelegramAdapter) -> None:
    with pytest.raises(BadSecretToken):
        adapter.verify(CIMultiDict({"Content-Type": "application/json"}), BODY, "support")


@pytest.mark.parametrize("account", ["nope", None, ""])
def test_verify_rejects_an_unknown_bot_with_404(
    adapter: TelegramAdapter, account: str | None
) -> None:
    with pytest.raises(UnknownAccount) as caught:
        adapter.verify(headers(SECRET), BODY, account)
    assert caught.value.status == 404


def test_verify_reads_the_header_in_any_case_from_a_plain_dict(adapter: TelegramAdapter) -> None:
    adapter.verify({SECRET_HEADER.lower(): SECRET}, BODY, "support")


def test_verify_compares_bytes_in_constant_time(
    adapter: TelegramAdapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[tuple[object, object]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(_adapter.hmac, "compare_digest", spy)
    adapter.verify(headers(SECRET), BODY, "support")
    assert compared == [(SECRET.encode(), SECRET.encode())]


@pytest.mark.parametrize("body", [BODY[:-2] + b"X}", b"", b"not json at all", b"\xff" * 10])
def test_verify_does_not_depend_on_the_body(adapter: TelegramAdapter, body: bytes) -> None:
    # Telegram's secret is a header, not a signature: any body passes, and nothing is parsed.
    adapter.verify(headers(SECRET), body, "support")


def test_verify_with_a_body_changed_by_one_byte_still_passes(adapter: TelegramAdapter) -> None:
    changed = BODY.replace(b"Hello", b"Jello")
    assert len(changed) == len(BODY)
    assert changed != BODY
    adapter.verify(headers(SECRET), changed, "support")


def test_parse_of_a_reserialized_body_gives_the_same_events(adapter: TelegramAdapter) -> None:
    compact = json.dumps(json.loads(BODY), separators=(",", ":")).encode()
    spaced = json.dumps(json.loads(BODY), indent=8, ensure_ascii=True).encode()
    assert compact != BODY != spaced
    results = [adapter.parse(body, "support") for body in (BODY, compact, spaced)]
    assert results[0] == results[1] == results[2]


async def test_registry_builds_the_telegram_adapter() -> None:
    adapter = ADAPTERS["telegram"](config(), None)
    assert isinstance(adapter, TelegramAdapter)
    assert (adapter.name, adapter.accounts) == ("telegram", frozenset({"support", "sales"}))
    await adapter.aclose()
