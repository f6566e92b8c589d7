"""A readable summary of the settings with every secret masked (``gateway check-config``)."""

from __future__ import annotations

from pydantic import SecretStr

from .config import Settings


def mask(secret: SecretStr) -> str:
    return "***" if secret.get_secret_value() else "(empty)"


def mask_url(url: str) -> str:
    """A URL fit to print (the database's, the API base URLs'): the password and the query
    (which may hold one) hidden.

    Split by hand, not with urlsplit: a password with an unescaped ``#``, ``?`` or ``/`` would
    end up in the fragment, query or path, and be printed.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    user, at, location = rest.rpartition("@")
    if at:
        name, colon, _ = user.partition(":")
        user = f"{name}:***@" if colon else f"{name}@"
    location, question, _ = location.partition("?")
    return f"{scheme}://{user}{location}{'?***' if question else ''}"


def _store_extras(settings: Settings) -> str:
    """The store's pool (PostgreSQL) and lease: what several processes on one store need."""
    lease = f"; lease {settings.store.lease_seconds:g} s"
    if settings.store.url.startswith("postgres"):
        return f"; up to {settings.store.pool_size} connections{lease}"
    return lease


def summarize(settings: Settings) -> list[str]:
    """One line per section, secrets masked."""
    s = settings
    bots = ", ".join(
        f"{bot.name} (token {mask(bot.token)}, secret {mask(bot.secret_token)})"
        for bot in s.telegram.bots
    )
    numbers = ", ".join(
        f"{number.phone_number_id} (token {mask(number.access_token)})"
        for number in s.whatsapp.numbers
    )
    return [
        f"server: {s.server.host}:{s.server.port}",
        f"store: {mask_url(s.store.url)}{_store_extras(s)}",
        f"dedup: processed ids kept {s.dedup.ttl_hours:g} h",
        f"admin token: {_admin_token(s)}",
        f"sandbox: {'on' if s.sandbox.enabled else 'off'}",
        f"media: {s.media.root}, up to {s.media.max_bytes} bytes a file;"
        f" downloads from {', '.join(s.media.allowed_hosts) or 'the API base URLs only'}",
        f"telegram: {mask_url(s.telegram.api_base_url)}; bots: {bots or 'none'}",
        f"whatsapp: {mask_url(s.whatsapp.graph_base_url)} {s.whatsapp.api_version}; "
        f"app secret {mask(s.whatsapp.app_secret)}; verify token {mask(s.whatsapp.verify_token)}; "
        f"numbers: {numbers or 'none'}",
        f"dispatcher: double_texting = {s.dispatcher.double_texting};"
        f" up to {s.dispatcher.max_concurrent_turns} turns at once",
        f"backlog: /readyz 503 past {s.ingest.backlog_ready},"
        f" deliveries refused at {s.ingest.backlog_refuse}",
        f"agents: starting {s.agents.starting_agent}; max_turns {s.agents.max_turns}",
        f"logging: level {s.logging.level}; format {_log_format(s.logging.format)}",
    ]


def _admin_token(settings: Settings) -> str:
    """Masked; with ``admin.token_file`` not made yet (check-config makes nothing), where the
    first ``gateway serve`` will make it; with neither, that the admin API is off."""
    admin = settings.admin
    if admin.token.get_secret_value():
        return mask(admin.token)
    if admin.token_file:
        return (
            f"none yet: the first start of `gateway serve` makes one in {admin.token_file}"
            " (mode 0600) and prints it once"
        )
    return (
        "(empty): admin.token and admin.token_file are empty, so the admin API and the console"
        " are off (403 admin_disabled)"
    )


def _log_format(style: str) -> str:
    return "auto (text on a terminal, else JSON lines)" if style == "auto" else style
