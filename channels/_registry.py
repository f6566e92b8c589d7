"""Channel adapters by name. A platform registers here exactly as a third-party one would."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

import aiohttp

from ._protocol import ChannelAdapter
from ._telegram import TelegramAdapter
from ._web import WebAdapter
from ._whatsapp import WhatsAppAdapter

# factory(config section of the channel, shared HTTP session or None) -> adapter
AdapterFactory = Callable[[Any, aiohttp.ClientSession | None], ChannelAdapter]

ADAPTERS: Final[Mapping[str, AdapterFactory]] = MappingProxyType(
    {
        "telegram": TelegramAdapter.from_config,
        "whatsapp": WhatsAppAdapter,
        "web": WebAdapter,
    }
)
