"""Per-account settings: the agent each Telegram bot and WhatsApp number starts its sessions at."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from webhook_bot_gateway.agents import AgentConfigError, Registry, build_registry

from ._templates import builtin_tools
from .errors import ConfigError

if TYPE_CHECKING:  # config.py calls check_account_agents while validating
    from .config import Settings

AccountKey = tuple[str, str]  # channel, account


@dataclass(frozen=True, slots=True)
class _Account:
    key: str  # where the config declares it: telegram.bots[0]
    account: AccountKey
    starting_agent: str | None
    agents: tuple[str, ...]  # allowed there; () for every agent


def _accounts(settings: Settings) -> Iterator[_Account]:
    """Every bot and number with its own agent settings."""
    for index, bot in enumerate(settings.telegram.bots):
        key, account = f"telegram.bots[{index}]", ("telegram", bot.name)
        yield _Account(key, account, bot.starting_agent, bot.agents)
    for index, number in enumerate(settings.whatsapp.numbers):
        key, account = f"whatsapp.numbers[{index}]", ("whatsapp", number.phone_number_id)
        yield _Account(key, account, number.starting_agent, number.agents)


def account_agents(settings: Settings) -> dict[AccountKey, str]:
    """The accounts that name their own starting agent."""
    return {a.account: a.starting_agent for a in _accounts(settings) if a.starting_agent}


def account_allowed(settings: Settings) -> dict[AccountKey, tuple[str, ...]]:
    """The accounts that limit the agents their sessions may have."""
    return {a.account: a.agents for a in _accounts(settings) if a.agents}


def check_account_agents(settings: Settings, declared: Collection[str]) -> None:
    """ConfigError naming the key (``telegram.bots[1].starting_agent``, ``...agents[0]``) of an
    undeclared agent, or of a starting agent the account's own ``agents`` leaves out."""
    for entry in _accounts(settings):
        _check_account(entry, declared, settings.agents.starting_agent)


def _check_account(entry: _Account, declared: Collection[str], default: str) -> None:
    name = entry.starting_agent
    if name and name not in declared:
        raise ConfigError(f"{entry.key}.starting_agent", f"agent {name!r} is not declared")
    for index, allowed in enumerate(entry.agents):
        if allowed not in declared:
            raise ConfigError(f"{entry.key}.agents[{index}]", f"agent {allowed!r} is not declared")
    if entry.agents and (name or default) not in entry.agents:
        key = f"{entry.key}.starting_agent" if name else f"{entry.key}.agents"
        problem = f"the starting agent {name or default!r} is not among the account's agents"
        raise ConfigError(key, problem)


def declared_in_config(settings: Settings) -> list[str] | None:
    """The agents' names when the config file lists them all (no ``agents.module``)."""
    agents = settings.agents
    if agents.module or not agents.agents:
        return None
    return [agent.name for agent in agents.agents]


async def gateway_registry(settings: Settings) -> Registry:
    """The agents' registry with each account's own starting agent checked and bound; a
    declaration the config names by key fails as a ConfigError naming it."""
    try:
        registry = build_registry(settings.agents, builtin_tools=builtin_tools(settings.whatsapp))
    except AgentConfigError as exc:
        if exc.key is None:
            raise
        raise ConfigError(exc.key, exc.problem) from exc
    try:
        check_account_agents(settings, registry.names)
    except ConfigError:
        await registry.aclose()
        raise
    registry.bind_accounts(account_agents(settings), account_allowed(settings))
    return registry


def dead_letter_warnings(settings: Settings) -> list[str]:
    """The accounts whose own ``agents`` leave out ``dispatcher.dead_letter_handoff``: a dead
    letter there stays with its agent (and its apology promises no person)."""
    target = settings.dispatcher.dead_letter_handoff
    if not target:
        return []
    return [
        f"dispatcher.dead_letter_handoff {target!r} does not serve {entry.key}"
        f" ({entry.account[0]} {entry.account[1]!r}), whose agents are"
        f" {', '.join(entry.agents)}: a dead letter there leaves the session with its agent,"
        " and the user gets dispatcher.apology_no_person"
        for entry in _accounts(settings)
        if entry.agents and target not in entry.agents
    ]
