"""Every outbound base URL of the config is an absolute http(s) URL, checked at load and named
in the error; the sandbox's own URLs are refused while the sandbox is off
(docs/configuration.md)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from webhook_bot_gateway.gateway.config import parse_settings
from webhook_bot_gateway.gateway.errors import ConfigError

from .test_cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config.example.toml"
STRONG = "x7Vq-3nLw_9TzpA2kR5mY8sD1fG4hJ6b"
# config.example.toml going live: its secrets and the platforms' real APIs from the environment.
LIVE = {
    "GATEWAY_ADMIN_TOKEN": STRONG,
    "TELEGRAM_SECRET_TOKEN": STRONG + "-tg",
    "WHATSAPP_APP_SECRET": STRONG + "-app",
    "WHATSAPP_VERIFY_TOKEN": STRONG + "-verify",
    "TELEGRAM_API_BASE_URL": "https://api.telegram.org",
    "WHATSAPP_GRAPH_BASE_URL": "https://graph.facebook.com",
}
MODEL = {"local": {"base_url": "http://127.0.0.1:11434/v1", "model": "m"}}

BAD_URLS = [
    "not a url",
    "ftp://x",
    "api.telegram.org",
    "https://",
    "https:///path",
    "http://host:99999",
    "http://[::1",
    "https://api.telegram.org\n",
    "sandbox/telegram",
]


def example(**sections: dict[str, Any]) -> dict[str, Any]:
    raw = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return raw


def refusal(raw: dict[str, Any], environ: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_settings(raw, environ or {})
    return caught.value


def with_url(key: str, url: str) -> dict[str, Any]:
    """The example with ``url`` at ``key`` (a model added for a model's base_url)."""
    if key == "telegram.api_base_url":
        return example(telegram={"api_base_url": url})
    if key == "whatsapp.graph_base_url":
        return example(whatsapp={"graph_base_url": url})
    return example(agents={"models": {"local": {**MODEL["local"], "base_url": url}}})


KEYS = ["telegram.api_base_url", "whatsapp.graph_base_url", "agents.models.local.base_url"]


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("url", BAD_URLS)
def test_a_base_url_that_is_not_an_absolute_http_url_is_refused_naming_the_key(
    key: str, url: str
) -> None:
    error = refusal(with_url(key, url))
    assert error.key == key
    assert "http" in error.problem
    assert "\n" not in str(error)


@pytest.mark.parametrize("key", KEYS)
def test_the_refusal_never_shows_the_url(key: str) -> None:
    error = refusal(with_url(key, "ftp://bot:HIDDEN-PASSWORD@proxy.example/tg"))
    assert error.key == key
    assert "HIDDEN-PASSWORD" not in str(error)


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize(
    "url", ["https://api.example", "http://127.0.0.1:9/v1", "HTTPS://u:p@[::1]:8443/x?key=v"]
)
def test_absolute_http_urls_are_accepted(key: str, url: str) -> None:
    parse_settings(with_url(key, url), {})


def test_a_path_means_this_gateway_for_the_platforms_but_not_for_a_model() -> None:
    settings = parse_settings(example(), {})
    assert settings.telegram.api_base_url == "http://127.0.0.1:8080/sandbox/telegram"
    assert settings.whatsapp.graph_base_url == "http://127.0.0.1:8080/sandbox/graph"
    error = refusal(with_url("agents.models.local.base_url", "/v1"))
    assert error.key == "agents.models.local.base_url"


@pytest.mark.parametrize(
    ("variable", "key"),
    [
        ("TELEGRAM_API_BASE_URL", "telegram.api_base_url"),
        ("WHATSAPP_GRAPH_BASE_URL", "whatsapp.graph_base_url"),
    ],
)
@pytest.mark.parametrize(
    "sandbox_url", ["/sandbox/telegram", "/sandbox/graph", "http://127.0.0.1:8080/sandbox/x"]
)
def test_the_sandbox_url_is_refused_while_the_sandbox_is_off(
    variable: str, key: str, sandbox_url: str
) -> None:
    """The README's "for real platforms" step with a base URL forgotten: every call would get
    the gateway's 404, which read like a wrong bot token (`getMe failed (InvalidToken)`)."""
    error = refusal(example(sandbox={"enabled": False}), LIVE | {variable: sandbox_url})
    assert error.key == key
    assert "sandbox.enabled is false" in error.problem


def test_the_sandbox_url_of_a_channel_without_accounts_is_fine_with_the_sandbox_off() -> None:
    raw = example(sandbox={"enabled": False}, whatsapp={"numbers": []})
    environ = {k: v for k, v in LIVE.items() if k != "WHATSAPP_GRAPH_BASE_URL"}
    assert parse_settings(raw, environ).whatsapp.graph_base_url.endswith("/sandbox/graph")


def test_check_config_of_a_bad_base_url_exits_1_with_one_line_naming_the_key() -> None:
    result = run_cli("check-config", "--config", str(EXAMPLE), env={"TELEGRAM_API_BASE_URL": "x"})
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {EXAMPLE}: telegram.api_base_url: must start")


def test_serve_with_the_sandbox_url_and_the_sandbox_off_exits_1_before_binding(
    tmp_path: Path,
) -> None:
    config = tmp_path / "c.toml"
    text = EXAMPLE.read_text(encoding="utf-8").replace("enabled = true", "enabled = false")
    config.write_text(text, encoding="utf-8")
    environ = {k: v for k, v in LIVE.items() if k != "TELEGRAM_API_BASE_URL"}
    result = run_cli("serve", "--config", str(config), env=environ | {"GATEWAY_PORT": "1"})
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: {config}: telegram.api_base_url: points at this gateway itself (a path"
        " such as /sandbox/telegram: the sandbox's fake API), but sandbox.enabled is false, so"
        " nothing answers there and every call would fail. Set the platform's API"
        " (https://api.telegram.org), or enable the sandbox (the value comes from the default"
        " of ${TELEGRAM_API_BASE_URL}, as TELEGRAM_API_BASE_URL is not set)"
    ]
