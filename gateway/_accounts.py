"""Per-account settings: the agent each Telegram bot and WhatsApp number starts its sessions at."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING

from webhook_bot_gateway.agents import Registry, build_registry

from .errors import ConfigError

if TYPE_CHECKING:  # config.py calls check_account_agents while validating
    from .config import Settings

AccountKey = tuple[str, str]  # channel, account


def _accounts(settings: Settings) -> Iterator[tuple[str, AccountKey, str | None]]:
    """(config key, (channel, account), its starting_agent) of every bot and number."""
    for index, bot in enumerate(settings.telegram.bots):
        yield f"telegram.bots[{index}]", ("telegram", bot.name), bot.starting_agent
    for index, number in enumerate(settings.whatsapp.numbers):
        key = f"whatsapp.numbers[{index}]"
        yield key, ("whatsapp", number.phone_number_id), number.starting_agent


def account_agents(settings: Settings) -> dict[AccountKey, str]:
    """The accounts that name their own starting agent."""
    return {account: name for _, account, name in _accounts(settings) if name}


def check_account_agents(settings: Settings, declared: Collection[str]) -> None:
    """ConfigError naming ``telegram.bots[i].starting_agent`` (or a number's) if undeclared."""
    for key, _, name in _accounts(settings):
        if name and name not in declared:
            raise ConfigError(f"{key}.starting_agent", f"agent {name!r} is not declared")


def declared_in_config(settings: Settings) -> list[str] | None:
    """The agents' names when the config file lists them all (no ``agents.module``)."""
    agents = settings.agents
    if agents.module or not agents.agents:
        return None
    return [agent.name for agent in agents.agents]


async def gateway_registry(settings: Settings) -> Registry:
    """The agents' registry with each account's own starting agent checked and bound."""
    registry = build_registry(settings.agents)
    try:
        check_account_agents(settings, registry.names)
    except ConfigError:
        await registry.aclose()
        raise
    registry.bind_accounts(account_agents(settings))
    return registry
