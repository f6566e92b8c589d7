"""check-config prints no credential of an API base URL, in its summary or its warnings
(docs/security.md, "Secrets")."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from webhook_bot_gateway.gateway._sandbox import sandbox_warnings
from webhook_bot_gateway.gateway._summary import summarize
from webhook_bot_gateway.gateway.cli import main
from webhook_bot_gateway.gateway.config import Settings

AGENTS = '[agents]\nstarting_agent = "a"\n[[agents.list]]\nname = "a"\nkind = "human"\n'
BOT = {"name": "support", "token": "1:t", "secret_token": "own-secret"}
NUMBER = {"phone_number_id": "1", "access_token": "own-token"}


@pytest.mark.parametrize(
    ("url", "secret", "shown"),
    [
        (
            "https://user:tg-pass-1@proxy.example/tg",
            "tg-pass-1",
            "https://user:***@proxy.example/tg",
        ),
        ("https://proxy.example/tg?token=tg-query-2", "tg-query-2", "https://proxy.example/tg?***"),
        ("https://u:p#ss@proxy.example/tg", "p#ss", "https://u:***@proxy.example/tg"),
    ],
)
def test_the_telegram_api_base_url_is_masked(url: str, secret: str, shown: str) -> None:
    lines = summarize(Settings.model_validate({"telegram": {"api_base_url": url}}))
    [line] = [line for line in lines if line.startswith("telegram:")]
    assert secret not in line
    assert line.startswith(f"telegram: {shown}; bots:")


@pytest.mark.parametrize(
    ("url", "secret", "shown"),
    [
        ("https://meta:wa-pass-1@graph.example", "wa-pass-1", "https://meta:***@graph.example"),
        ("https://graph.example?access_token=wa-2", "wa-2", "https://graph.example?***"),
    ],
)
def test_the_whatsapp_graph_base_url_is_masked(url: str, secret: str, shown: str) -> None:
    lines = summarize(Settings.model_validate({"whatsapp": {"graph_base_url": url}}))
    [line] = [line for line in lines if line.startswith("whatsapp:")]
    assert secret not in line
    assert line.startswith(f"whatsapp: {shown} v21.0;")


def test_check_config_prints_no_credential_of_a_base_url(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[telegram]\napi_base_url = "https://bot:TG-PROXY-PASSWORD@proxy.example/tg"\n'
        '[whatsapp]\ngraph_base_url = "https://graph.example/?key=WA-QUERY-KEY"\n' + AGENTS,
        encoding="utf-8",
    )
    out = io.StringIO()
    assert main(["check-config", "--config", str(path)], out=out) == 0
    printed = out.getvalue()
    assert "TG-PROXY-PASSWORD" not in printed
    assert "WA-QUERY-KEY" not in printed
    assert "telegram: https://bot:***@proxy.example/tg; bots: none" in printed


def test_a_base_url_without_credentials_is_shown_whole() -> None:
    lines = summarize(Settings())
    assert "telegram: https://api.telegram.org; bots: none" in lines
    assert any(line.startswith("whatsapp: https://graph.facebook.com v21.0;") for line in lines)


@pytest.mark.parametrize(
    ("key", "url", "shown"),
    [
        (
            "telegram.api_base_url",
            "https://user:tgpass@tg.example.com/x?k=qq",
            "https://user:***@tg.example.com/x?***",
        ),
        (
            "whatsapp.graph_base_url",
            "https://user:wapass@graph.example.com/?access_token=zz",
            "https://user:***@graph.example.com/?***",
        ),
    ],
)
def test_the_sandbox_warning_about_a_base_url_masks_its_password_and_query(
    key: str, url: str, shown: str
) -> None:
    """It printed the URL whole, once in check-config and once in every start's log."""
    section, option = key.split(".")
    accounts = {"telegram": {"bots": [BOT]}, "whatsapp": {"numbers": [NUMBER]}}[section]
    raw = {"sandbox": {"enabled": True}, section: {option: url} | accounts}
    settings = Settings.model_validate(raw)
    [warning] = [line for line in sandbox_warnings(settings) if key in line]
    assert warning == f"the sandbox is enabled but {key} does not point at it: {shown}"


def test_check_config_prints_no_credential_of_a_base_url_in_its_warnings(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        "[sandbox]\nenabled = true\n"
        '[telegram]\napi_base_url = "https://user:TG-PASS@tg.example/x?k=TG-QUERY"\n'
        '[[telegram.bots]]\nname = "support"\ntoken = "1:t"\nsecret_token = "own-secret"\n'
        '[whatsapp]\ngraph_base_url = "https://user:WA-PASS@graph.example/?access_token=WA-Q"\n'
        'app_secret = "own-app-secret"\nverify_token = "own-verify"\n'
        '[[whatsapp.numbers]]\nphone_number_id = "1"\naccess_token = "own-token"\n' + AGENTS,
        encoding="utf-8",
    )
    out = io.StringIO()
    assert main(["check-config", "--config", str(path)], out=out) == 0
    printed = out.getvalue()
    for secret in ("TG-PASS", "TG-QUERY", "WA-PASS", "WA-Q"):
        assert secret not in printed
    assert (
        "warning: the sandbox is enabled but telegram.api_base_url does not point at it:"
        " https://user:***@tg.example/x?***\n"
    ) in printed
