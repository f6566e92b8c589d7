"""The example's demo bot token and access token with the sandbox off: said at check-config and
at every start, since the platforms refuse them and every reply of that account would fail."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from webhook_bot_gateway.gateway._demo_credentials import demo_credential_warnings
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.gateway.config import Settings

from .test_cli_check_config import check_config

AGENTS = '[agents]\nstarting_agent = "a"\n[[agents.list]]\nname = "a"\nkind = "human"\n'
DEMO_BOT = {"name": "support", "token": "123456:demo-token-not-valid", "secret_token": "own"}
DEMO_NUMBER = {"phone_number_id": "1", "access_token": "demo-access-token"}
WA_SECRETS = {"app_secret": "own-app-secret", "verify_token": "own-verify"}
TELEGRAM_WARNING = (
    "telegram.bots[0].token is a demo value and the sandbox is off: the platform refuses it, so"
    " this account's replies cannot be sent; set your own (config.example.toml reads it from"
    " TELEGRAM_BOT_TOKEN)"
)


def settings(**raw: Any) -> Settings:
    base: dict[str, Any] = {
        "telegram": {"bots": [DEMO_BOT]},
        "whatsapp": {"numbers": [DEMO_NUMBER], **WA_SECRETS},
    }
    return Settings.model_validate(base | raw)


def test_each_demo_token_is_named_with_its_variable() -> None:
    assert demo_credential_warnings(settings()) == [
        TELEGRAM_WARNING,
        TELEGRAM_WARNING.replace(
            "telegram.bots[0].token", "whatsapp.numbers[0].access_token"
        ).replace("TELEGRAM_BOT_TOKEN", "WHATSAPP_ACCESS_TOKEN"),
    ]


def test_the_sandbox_takes_demo_tokens_without_a_word() -> None:
    assert demo_credential_warnings(settings(sandbox={"enabled": True})) == []


def test_an_api_other_than_the_platforms_own_is_left_alone() -> None:
    """A fake platform (a test's, a staging proxy) may accept whatever token it likes."""
    own = settings(
        telegram={"bots": [DEMO_BOT], "api_base_url": "http://127.0.0.1:9/tg"},
        whatsapp={"numbers": [DEMO_NUMBER], "graph_base_url": "http://127.0.0.1:9", **WA_SECRETS},
    )
    assert demo_credential_warnings(own) == []


@pytest.mark.parametrize("token", ["123:real-looking-token", "EAAG-own"])
def test_a_token_of_ones_own_is_not_warned_about(token: str) -> None:
    bot = DEMO_BOT | {"token": token}
    number = DEMO_NUMBER | {"access_token": token}
    mine = settings(telegram={"bots": [bot]}, whatsapp={"numbers": [number], **WA_SECRETS})
    assert demo_credential_warnings(mine) == []


def test_check_config_prints_the_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bot = '[[telegram.bots]]\nname = "support"\ntoken = "123456:demo-token-not-valid"\n'
    code, out, _ = check_config(tmp_path, bot + 'secret_token = "own-secret"\n' + AGENTS, capsys)
    assert code == 0
    assert f"warning: {TELEGRAM_WARNING}\n" in out


def test_a_start_logs_the_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    configured = settings(store={"url": f"sqlite:///{tmp_path / 'g.db'}"})
    with caplog.at_level(logging.WARNING, logger="gateway"):
        build_app(configured)
    assert TELEGRAM_WARNING in caplog.messages
