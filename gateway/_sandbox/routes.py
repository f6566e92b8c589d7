"""Registers the sandbox's routes (only when enabled) and says loudly when it is misplaced."""

from __future__ import annotations

import re

from aiohttp import web

from .._admin_token import is_loopback
from .._summary import mask_url
from ..config import Settings
from .keys import SANDBOX
from .platforms import add_platform_routes
from .simulate import sent, simulate
from .state import SandboxState

_REAL_TELEGRAM_TOKEN = re.compile(r"[0-9]{8,10}:[A-Za-z0-9_-]{35}")


def add_sandbox_routes(app: web.Application, settings: Settings) -> None:
    """``/sandbox/*`` when ``[sandbox] enabled``; nothing at all otherwise."""
    if not settings.sandbox.enabled:
        return
    app[SANDBOX] = SandboxState()
    app.on_shutdown.append(_end_long_polls)
    add_platform_routes(app)
    app.router.add_post("/sandbox/api/simulate", simulate)
    app.router.add_get("/sandbox/api/sent", sent)


async def _end_long_polls(app: web.Application) -> None:
    state = app[SANDBOX]
    state.closing = True
    state.changed.set()


def sandbox_warnings(settings: Settings) -> list[str]:
    """What is wrong with running the sandbox here: it is for one machine and fake accounts."""
    if not settings.sandbox.enabled:
        return []
    warnings = []
    if not is_loopback(settings.server.host):
        warnings.append(
            f"the sandbox is enabled on {settings.server.host}, not a loopback address: anyone"
            " who reaches it can post simulated deliveries (with the admin token)"
        )
    if any(
        _REAL_TELEGRAM_TOKEN.fullmatch(b.token.get_secret_value()) for b in settings.telegram.bots
    ):
        warnings.append("the sandbox is enabled with a real-looking Telegram bot token")
    if any(n.access_token.get_secret_value().startswith("EAA") for n in settings.whatsapp.numbers):
        warnings.append("the sandbox is enabled with a real-looking WhatsApp access token")
    for key, url, has_accounts in (
        ("telegram.api_base_url", settings.telegram.api_base_url, bool(settings.telegram.bots)),
        (
            "whatsapp.graph_base_url",
            settings.whatsapp.graph_base_url,
            bool(settings.whatsapp.numbers),
        ),
    ):
        # A channel without accounts never calls its API: where its URL points does not matter.
        if has_accounts and "/sandbox/" not in url:
            shown = mask_url(url)  # its password or query may be a credential
            warnings.append(f"the sandbox is enabled but {key} does not point at it: {shown}")
    return warnings
