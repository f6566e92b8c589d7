"""The channel adapters: built from config through channels' registry, owned by one context."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from types import MappingProxyType

import aiohttp
from aiohttp import web

from webhook_bot_gateway.channels import ADAPTERS as REGISTRY
from webhook_bot_gateway.channels import AdapterFactory, ChannelAdapter, TelegramAdapter

from ._keys import ADAPTERS, FACTORIES, SETTINGS
from .config import Settings


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
    async with open_adapters(app[SETTINGS], app.get(FACTORIES, REGISTRY)) as adapters:
        telegram = adapters.get("telegram")
        if isinstance(telegram, TelegramAdapter):
            await telegram.identify()  # its username: which group messages are for it
        app[ADAPTERS] = adapters
        yield
