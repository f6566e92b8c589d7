"""The outbound base URLs of the configuration, checked at load (docs/configuration.md).

Every one must be an absolute ``http://`` or ``https://`` URL with a host; the platforms' may
also be a path, which means this gateway itself (made absolute by ``config.with_local_urls``).
Such a URL names the sandbox's fake APIs, so it is refused while the sandbox is off and the
channel has accounts: nothing would answer there, and every call would fail as a 404 that
reads like a wrong token. Messages name the key, never the value (it may hold a password).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .errors import ConfigError

if TYPE_CHECKING:
    from .config import Settings

_SCHEMES = ("http", "https")
TELEGRAM_API = "https://api.telegram.org"
GRAPH_API = "https://graph.facebook.com"


def url_problem(url: str) -> str | None:
    """Why ``url`` is not an absolute http(s) URL with a host, or None when it is one."""
    if any(char.isspace() or not char.isprintable() for char in url):
        return "holds a blank or a control character"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        return "is not a valid URL (its host or port cannot be read)"
    if parts.scheme.lower() not in _SCHEMES:
        return "must start with http:// or https://"
    if not parts.hostname:
        return "names no host"
    return None


def check_base_urls(settings: Settings, own_url: str) -> None:
    """ConfigError naming the first base URL that is not an absolute http(s) URL, or that
    points at this gateway (``own_url``) while the sandbox is off and the channel is in use."""
    for key, url, example, sandbox in _platform_urls(settings):
        problem = url_problem(url)
        if problem is not None:
            raise ConfigError(
                key,
                f"{problem}: use an absolute http(s) URL such as {example}, or a path such as"
                f" {sandbox} for this gateway's own sandbox",
            )
    for name, model in settings.agents.models.items():
        problem = url_problem(model.base_url)
        if problem is not None:
            raise ConfigError(
                f"agents.models.{name}.base_url",
                f"{problem}: use an absolute http(s) URL such as https://api.openai.com/v1",
            )
    if not settings.sandbox.enabled:
        _refuse_sandbox_urls(settings, own_url)


def _platform_urls(settings: Settings) -> Iterator[tuple[str, str, str, str]]:
    """Each platform's key, configured URL, real API and sandbox path."""
    telegram, whatsapp = settings.telegram, settings.whatsapp
    yield "telegram.api_base_url", telegram.api_base_url, TELEGRAM_API, "/sandbox/telegram"
    yield "whatsapp.graph_base_url", whatsapp.graph_base_url, GRAPH_API, "/sandbox/graph"


def _refuse_sandbox_urls(settings: Settings, own_url: str) -> None:
    in_use = {
        "telegram.api_base_url": bool(settings.telegram.bots),
        "whatsapp.graph_base_url": bool(settings.whatsapp.numbers),
    }
    for key, url, example, sandbox in _platform_urls(settings):
        if in_use[key] and url.startswith(own_url + "/"):
            raise ConfigError(
                key,
                f"points at this gateway itself (a path such as {sandbox}: the sandbox's fake"
                " API), but sandbox.enabled is false, so nothing answers there and every call"
                f" would fail. Set the platform's API ({example}), or enable the sandbox",
            )
