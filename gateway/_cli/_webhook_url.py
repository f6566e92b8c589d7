"""``gateway telegram set-webhook --url``: the URL checked before Telegram (or the sandbox's
fake, which takes anything) is asked to call it.

The Bot API calls webhooks over https only, on ports 443, 80, 88 and 8443
(https://core.telegram.org/bots/webhooks). Errors and warnings never repeat the URL, which may
carry a password (``https://user:pass@host/...``).
"""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

WEBHOOK_PORTS = (443, 80, 88, 8443)


def webhook_path(bot: str) -> str:
    """Where this gateway takes ``bot``'s updates."""
    return f"/webhooks/telegram/{bot}"


def check_webhook_url(url: str, bot: str) -> list[str]:
    """ValueError (``error: --url ...``) for a URL Telegram would never call; else the warnings
    (a path that is not the bot's webhook route: fine only behind a proxy that rewrites it)."""
    parts = _absolute_https(url, bot)
    port = _port(parts)
    if port not in WEBHOOK_PORTS:
        ports = ", ".join(map(str, WEBHOOK_PORTS[:-1])) + f" or {WEBHOOK_PORTS[-1]}"
        raise ValueError(f"--url's port must be {ports} (Telegram calls no other), not {port}")
    if not parts.path.endswith(webhook_path(bot)):
        return [
            f"--url does not end with {webhook_path(bot)}, where this gateway takes bot {bot}'s"
            " updates; Telegram will post to the URL as given (fine if a proxy in front"
            " rewrites the path)"
        ]
    return []


def _absolute_https(url: str, bot: str) -> SplitResult:
    example = f"https://bots.example.com{webhook_path(bot)}"
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        parts = SplitResult("", "", "", "", "")
    if parts.scheme.lower() == "http":
        raise ValueError(f"--url must be https: Telegram calls no plain-http webhook ({example})")
    if parts.scheme.lower() != "https" or not parts.hostname:
        raise ValueError(f"--url must be an absolute https URL, such as {example}")
    return parts


def _port(parts: SplitResult) -> int:
    try:
        port = parts.port
    except ValueError:  # not a number, or above 65535
        raise ValueError("--url's port is not a number from 0 to 65535") from None
    return 443 if port is None else port
