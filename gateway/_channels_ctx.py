"""The channel adapters: built from config through channels' registry, owned by one context."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from types import MappingProxyType

import aiohttp
from aiohttp import web
from yarl import URL

from webhook_bot_gateway.channels import ADAPTERS as REGISTRY
from webhook_bot_gateway.channels import AdapterFactory, ChannelAdapter, TelegramAdapter

from ._admin_token import is_loopback
from ._keys import ADAPTERS, FACTORIES, SETTINGS
from .config import ServerConfig, Settings

LISTEN_POLL_SECONDS = 0.05  # how often the sandbox's getMe checks whether the server listens
LISTEN_WAIT_SECONDS = 30.0  # ... and for how long at most; then getMe tries (and retries) anyway
WILDCARDS = ("", "0.0.0.0", "::")


def build_adapters(
    settings: Settings,
    session: aiohttp.ClientSession,
    factories: Mapping[str, AdapterFactory] = REGISTRY,
) -> dict[str, ChannelAdapter]:
    """One adapter per registered channel that has a config section."""
    adapters: dict[str, ChannelAdapter] = {}
    for name, factory in factories.items():
        section = getattr(settings, name, None)
        if section is not None:
            adapters[name] = factory(section, session)
    return adapters


@asynccontextmanager
async def open_adapters(
    settings: Settings, factories: Mapping[str, AdapterFactory] = REGISTRY
) -> AsyncIterator[Mapping[str, ChannelAdapter]]:
    """A shared HTTP session and every adapter, closed in reverse on exit."""
    async with AsyncExitStack() as stack:
        session = await stack.enter_async_context(aiohttp.ClientSession())
        adapters = build_adapters(settings, session, factories)
        for adapter in adapters.values():
            if isinstance(adapter, AbstractAsyncContextManager):
                await stack.enter_async_context(adapter)  # e.g. Telegram opens its clients
            else:
                stack.push_async_callback(adapter.aclose)
        yield MappingProxyType(adapters)


async def channels_ctx(app: web.Application) -> AsyncIterator[None]:
    """The application's adapters, under ``ADAPTERS``; each Telegram bot asks who it is."""
    settings = app[SETTINGS]
    async with open_adapters(settings, app.get(FACTORIES, REGISTRY)) as adapters:
        telegram = adapters.get("telegram")
        task = None
        if isinstance(telegram, TelegramAdapter):
            task = await start_identifying(telegram, settings)
        app[ADAPTERS] = adapters
        try:
            yield
        finally:
            if task is not None:  # before the adapters close
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def start_identifying(
    telegram: TelegramAdapter, settings: Settings
) -> asyncio.Task[None] | None:
    """Each bot's username (which group messages are for it): ``getMe`` now, before the server
    serves, and again in a background task while it fails. A Bot API served by this very
    server (the sandbox's) cannot answer before it listens: there the first ``getMe`` waits
    for that too, in the background."""
    here = served_here(settings.telegram.api_base_url, settings.server)
    if here is None:
        if not await telegram.identify(again_later=True):
            return None
        return asyncio.create_task(telegram.keep_identifying(), name="telegram-identify")
    return asyncio.create_task(_identify_here(telegram, here), name="telegram-identify")


async def _identify_here(telegram: TelegramAdapter, address: tuple[str, int]) -> None:
    await until_listening(*address)
    if await telegram.identify(again_later=True):
        await telegram.keep_identifying()


def served_here(url: str, server: ServerConfig) -> tuple[str, int] | None:
    """Host and port of ``url`` when that is this server's own address (an API base URL given
    as a path, which the config makes absolute: the sandbox's); None otherwise."""
    parsed = URL(url)
    host, port = parsed.host, parsed.port
    if host is None or port != server.port:
        return None
    own = server.host.strip("[]")
    if host == own or (own in WILDCARDS and is_loopback(host)):
        return host, port
    return None


async def until_listening(
    host: str,
    port: int,
    *,
    every: float = LISTEN_POLL_SECONDS,
    bound: float = LISTEN_WAIT_SECONDS,
) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``bound`` seconds (asked every
    ``every``): aiohttp starts listening only after every cleanup context has started."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound
    while True:
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(every)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True
