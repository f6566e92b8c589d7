"""No configured secret reaches a log line, whichever library logs it, in its message, its
arguments or its traceback (docs/security.md, "Secrets")."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from webhook_bot_gateway.gateway._logging import configure_logging, configured_secrets
from webhook_bot_gateway.gateway.cli import main
from webhook_bot_gateway.gateway.config import Settings

from .logging_helpers import fresh_root_logging, redirect_root_handlers

BOT_TOKEN = "111222333:AAF-bot_token-of-support-0123456789ab"
OTHER_BOT_TOKEN = "444555666:AAG-bot_token-of-sales-9876543210zz"
WEBHOOK_SECRET = "webhook-secret-of-support_42"
OTHER_WEBHOOK_SECRET = "webhook-secret-of-sales_43"
APP_SECRET = "0123456789abcdef-app-secret"
VERIFY_TOKEN = "verify-token-of-the-subscription"
ACCESS_TOKEN = "EAAG-access-token-of-the-number"
ADMIN_TOKEN = "admin-bearer-token-xyz"
DB_PASSWORD = "db-pa$$word-7"
SECRETS = {
    "telegram.bots[0].token": BOT_TOKEN,
    "telegram.bots[1].token": OTHER_BOT_TOKEN,
    "telegram.bots[0].secret_token": WEBHOOK_SECRET,
    "telegram.bots[1].secret_token": OTHER_WEBHOOK_SECRET,
    "whatsapp.app_secret": APP_SECRET,
    "whatsapp.verify_token": VERIFY_TOKEN,
    "whatsapp.numbers[0].access_token": ACCESS_TOKEN,
    "admin.token": ADMIN_TOKEN,
    "store.url password": DB_PASSWORD,
}


def settings() -> Settings:
    return Settings.model_validate(
        {
            "store": {"url": f"postgresql://gw:{DB_PASSWORD}@db:5432/gw"},
            "admin": {"token": ADMIN_TOKEN},
            "telegram": {
                "bots": [
                    {"name": "support", "token": BOT_TOKEN, "secret_token": WEBHOOK_SECRET},
                    {
                        "name": "sales",
                        "token": OTHER_BOT_TOKEN,
                        "secret_token": OTHER_WEBHOOK_SECRET,
                    },
                ]
            },
            "whatsapp": {
                "app_secret": APP_SECRET,
                "verify_token": VERIFY_TOKEN,
                "numbers": [{"phone_number_id": "1555", "access_token": ACCESS_TOKEN}],
            },
        }
    )


@pytest.fixture
def logged() -> Iterator[io.StringIO]:
    """configure_logging(settings) on a root logger of its own, its handler writing to a buffer."""
    with fresh_root_logging():
        configure_logging(settings())
        yield redirect_root_handlers()


def test_every_configured_secret_is_known_to_the_filter() -> None:
    assert set(SECRETS.values()) <= set(configured_secrets(settings()))


def test_ptb_logging_a_proxy_page_that_echoes_the_path_keeps_the_token_out(
    logged: io.StringIO,
) -> None:
    body = (
        f"<html><body>502 Bad Gateway: POST /bot{BOT_TOKEN}/setWebhook"
        f"?secret_token={WEBHOOK_SECRET}</body></html>"
    )
    logging.getLogger("telegram.request.BaseRequest").error("Can not load invalid JSON: %s", body)
    logging.getLogger("telegram.request").error("bad response %s", body)
    text = logged.getvalue()
    assert "502 Bad Gateway" in text
    assert BOT_TOKEN not in text
    assert BOT_TOKEN.split(":")[1] not in text
    assert WEBHOOK_SECRET not in text
    assert "/bot<redacted>/setWebhook" in text


@pytest.mark.parametrize("where", sorted(SECRETS))
def test_each_configured_secret_is_scrubbed_from_any_logger(
    where: str, logged: io.StringIO
) -> None:
    secret = SECRETS[where]
    logging.getLogger("some.library").warning("value: %s and %r", secret, secret.encode())
    logging.getLogger("gateway").error(f"inline {secret}")  # noqa: G004 - in msg, not in args
    text = logged.getvalue()
    assert secret not in text
    assert text.count("<redacted>") == 3


def test_a_secret_in_an_exception_and_its_traceback_is_scrubbed(
    logged: io.StringIO,
) -> None:
    def fail() -> None:
        raise RuntimeError(f"upstream said: token {ACCESS_TOKEN} is invalid")

    try:
        fail()
    except RuntimeError:
        logging.getLogger("aiohttp.client").exception("request failed")
    text = logged.getvalue()
    assert "Traceback" in text
    assert "RuntimeError: upstream said: token" in text
    assert ACCESS_TOKEN not in text


def test_percent_encoded_and_other_letter_cases_are_scrubbed_too(
    logged: io.StringIO,
) -> None:
    log = logging.getLogger("httpx")
    log.warning("GET https://api.telegram.org/bot%s/getMe", BOT_TOKEN.replace(":", "%3A"))
    log.warning("Bad request: %s", WEBHOOK_SECRET.upper())
    log.warning("db: %s", DB_PASSWORD.replace("$", "%24"))
    text = logged.getvalue()
    assert BOT_TOKEN.split(":")[1] not in text
    assert WEBHOOK_SECRET.upper() not in text
    assert "db-pa%24%24word-7" not in text


def test_an_unconfigured_token_in_a_bot_path_is_scrubbed_generically(
    logged: io.StringIO,
) -> None:
    log = logging.getLogger("telegram.request")
    log.error("answer of https://proxy/bot999:ZZZ-not-configured/sendMessage: 502")
    log.error("file https://proxy/file/bot888:YYY-not-configured/photos/1.jpg")
    log.error("base url https://proxy/bot777:XXX-not-configured")
    text = logged.getvalue()
    assert "not-configured" not in text
    assert "https://proxy/bot<redacted>/sendMessage: 502" in text


def test_web_session_ids_are_still_shortened(logged: io.StringIO) -> None:
    logging.getLogger("gateway").info("socket of %s", "web-1128e765-9ac8-4b2e-8c4d-0123456789ab")
    assert "socket of web-1128e765…" in logged.getvalue()


def test_a_broken_log_call_is_left_to_logging_to_report(logged: io.StringIO) -> None:
    logging.raiseExceptions, before = False, logging.raiseExceptions
    try:
        logging.getLogger("x").error("two args %s %s", "only one")  # must not raise here
    finally:
        logging.raiseExceptions = before


def test_the_cli_configures_the_filter_with_the_loaded_settings(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        f'[admin]\ntoken = "{ADMIN_TOKEN}"\n'
        f'[whatsapp]\napp_secret = "{APP_SECRET}"\n'
        '[agents]\nstarting_agent = "a"\n[[agents.list]]\nname = "a"\nkind = "human"\n',
        encoding="utf-8",
    )
    with fresh_root_logging():
        assert main(["check-config", "--config", str(path)], out=io.StringIO()) == 0
        logged = redirect_root_handlers()
        logging.getLogger("aiohttp.access").warning("%s %s", ADMIN_TOKEN, APP_SECRET)
    text = logged.getvalue()
    assert ADMIN_TOKEN not in text
    assert APP_SECRET not in text
    assert "<redacted> <redacted>" in text


def test_url_passwords_and_model_api_keys_are_known_to_the_filter() -> None:
    model = {"base_url": "https://u:model-pass@llm.example/v1", "model": "x", "api_key_env": "K"}
    configured = Settings.model_validate(
        {
            "telegram": {"api_base_url": "https://tg:tg-proxy-pass@proxy.example/tg"},
            "whatsapp": {"graph_base_url": "https://graph.example/?access_token=wa-query-token"},
            "agents": {
                "starting_agent": "a",
                "models": {"m": model},
                "list": [{"name": "a", "model": "m"}],
            },
        }
    )
    found = configured_secrets(configured, {"K": "sk-model-api-key"})
    for secret in ("model-pass", "sk-model-api-key", "tg-proxy-pass", "wa-query-token"):
        assert secret in found
    assert "tg" not in found  # a user name is no secret
