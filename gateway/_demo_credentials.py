"""The example config's demo credentials left in place with the sandbox off.

Telegram and Meta refuse them, so every reply of that account would fail (Telegram) or be held
while the account is paused (WhatsApp). Unlike the demo webhook secrets they let no stranger
in, so they do not stop the start: ``check-config`` and ``gateway serve`` warn, naming the key
and the variable config.example.toml reads it from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ._admin_token import is_demo_value

if TYPE_CHECKING:
    from .config import Settings

DEMO_BOT_TOKEN = "123456:demo-token-not-valid"  # config.example.toml's fallback
TELEGRAM_HOST = "api.telegram.org"
GRAPH_HOST = "graph.facebook.com"


def demo_credential_warnings(settings: Settings) -> list[str]:
    """One line per bot token or access token that is a demo value while the sandbox is off
    and the channel talks to the real platform (a test's fake API is its own business)."""
    if settings.sandbox.enabled:
        return []
    found: list[tuple[str, str]] = []
    if _host(settings.telegram.api_base_url) == TELEGRAM_HOST:
        found += [
            (f"telegram.bots[{index}].token", "TELEGRAM_BOT_TOKEN")
            for index, bot in enumerate(settings.telegram.bots)
            if _is_demo(bot.token.get_secret_value())
        ]
    if _host(settings.whatsapp.graph_base_url) == GRAPH_HOST:
        found += [
            (f"whatsapp.numbers[{index}].access_token", "WHATSAPP_ACCESS_TOKEN")
            for index, number in enumerate(settings.whatsapp.numbers)
            if _is_demo(number.access_token.get_secret_value())
        ]
    return [
        f"{key} is a demo value and the sandbox is off: the platform refuses it, so this"
        f" account's replies cannot be sent; set your own (config.example.toml reads it from"
        f" {variable})"
        for key, variable in found
    ]


def _is_demo(value: str) -> bool:
    return value.strip() == DEMO_BOT_TOKEN or is_demo_value(value)


def _host(url: str) -> str | None:
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None
