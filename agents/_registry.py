"""The registry: every agent by name, validated once at start; the resolver's lookup table."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._agent import Agent, handoff_spec
from ._config import RULES, check_agent_fields, check_agent_names
from ._errors import AgentConfigError
from ._model import ModelBackend, ToolSpec
from ._rules import RulesModel, argument_problem
from ._tools import Tool


class Registry:
    """Agents by name plus the named model backends they refer to."""

    def __init__(
        self,
        agents: Iterable[Agent],
        starting_agent: str,
        *,
        models: Mapping[str, ModelBackend] | None = None,
        account_agents: Mapping[tuple[str, str], str] | None = None,
    ) -> None:
        listed = list(agents)
        check_agent_names([(a.name, tuple(a.handoffs)) for a in listed], starting_agent)
        self._agents = {agent.name: agent for agent in listed}
        self._models = dict(models or {})
        for agent in listed:
            check_agent(agent, self._models)
        self.starting_agent = self._agents[starting_agent]
        self._account_agents: dict[tuple[str, str], Agent] = {}
        self._allowed: dict[tuple[str, str], frozenset[str]] = {}
        self.bind_accounts(account_agents or {})

    def bind_accounts(
        self,
        names: Mapping[tuple[str, str], str],
        allowed: Mapping[tuple[str, str], Iterable[str]] | None = None,
    ) -> None:
        """Give (channel, account) pairs their own starting agent and, optionally, the only
        agents their sessions may have; an undeclared name is refused."""
        self._account_agents = _account_agents(self._agents, names)
        self._allowed = {}
        for (channel, account), listed in (allowed or {}).items():
            chosen = frozenset(listed)
            for name in sorted(chosen - set(self._agents)):
                raise AgentConfigError(
                    name, f"allowed on {channel} account {account!r} but not declared"
                )
            self._allowed[channel, account] = chosen

    def allows(self, channel: str, account: str, name: str) -> bool:
        """Whether a session of this account may have the agent ``name``."""
        chosen = self._allowed.get((channel, account))
        return chosen is None or name in chosen

    def starting_for(self, channel: str, account: str) -> Agent:
        """The agent a session of this account starts at: the account's own, else the global."""
        return self._account_agents.get((channel, account), self.starting_agent)

    @property
    def names(self) -> list[str]:
        """Every declared agent's name, in declaration order."""
        return list(self._agents)

    def get(self, name: str) -> Agent | None:
        """The agent called ``name``, or None when it is not (or no longer) declared."""
        return self._agents.get(name)

    def model_for(self, agent: Agent) -> ModelBackend:
        """The backend that answers for ``agent`` (a bot agent always has one)."""
        if isinstance(agent.model, str):
            return self._models[agent.model]
        if agent.model is None:
            raise AgentConfigError(agent.name, "has no model")
        return agent.model

    def model_name(self, agent: Agent) -> str:
        """The name of ``agent``'s backend as configured: a ``[agents.models]`` name, ``rules``,
        or the class of a backend object given in Python (names from config only: bounded)."""
        if isinstance(agent.model, str):
            return agent.model
        if isinstance(agent.model, RulesModel):
            return RULES
        return type(agent.model).__name__

    def tool_specs(self, agent: Agent, account: tuple[str, str] | None = None) -> list[ToolSpec]:
        """The agent's tools, then one ``transfer_to_<name>`` tool per handoff target (on
        ``account``, (channel, account), only the targets allowed there)."""
        specs = [tool.spec() for tool in agent.tools]
        targets = [n for n in agent.handoffs if account is None or self.allows(*account, n)]
        return specs + [handoff_spec(self._agents[name]) for name in targets]

    async def aclose(self) -> None:
        """Close every backend once."""
        backends: dict[int, Any] = {id(m): m for m in self._models.values()}
        for agent in self._agents.values():
            if agent.model is not None and not isinstance(agent.model, str):
                backends[id(agent.model)] = agent.model
        for backend in backends.values():
            await backend.aclose()


def _account_agents(
    agents: Mapping[str, Agent], names: Mapping[tuple[str, str], str]
) -> dict[tuple[str, str], Agent]:
    """Each (channel, account)'s own starting agent; a name not declared is refused."""
    chosen: dict[tuple[str, str], Agent] = {}
    for (channel, account), name in names.items():
        agent = agents.get(name)
        if agent is None:
            raise AgentConfigError(name, f"named by {channel} account {account!r} but not declared")
        chosen[channel, account] = agent
    return chosen


def check_agent(agent: Agent, models: Mapping[str, ModelBackend]) -> None:
    """Refuse an agent that cannot run: its fields as ``[[agents.list]]`` checks them, its
    tools, and its model among ``models``."""
    check_agent_fields(agent)
    _check_tools(agent)
    if agent.kind == "human" and (agent.model is not None or agent.tools):
        raise AgentConfigError(agent.name, "a human agent has no model or tools")
    if agent.kind == "bot" and agent.model is None:
        raise AgentConfigError(agent.name, "needs a model")
    if isinstance(agent.model, str) and agent.model not in models:
        raise AgentConfigError(agent.name, f"model {agent.model!r} is not declared")
    names = [tool.name for tool in agent.tools]
    if len(set(names)) != len(names):
        raise AgentConfigError(agent.name, "two tools share a name")
    if isinstance(agent.model, RulesModel):
        _check_rules(agent, agent.model)


def _check_tools(agent: Agent) -> None:
    for index, entry in enumerate(agent.tools):
        if isinstance(entry, Tool):
            continue
        problem = f"tools[{index}] is a {type(entry).__name__}, not a function decorated with @tool"
        if isinstance(entry, str):  # the form [[agents.list]] takes
            problem += " (a dotted path names a tool only in [[agents.list]]: import the function)"
        raise AgentConfigError(agent.name, problem)


def _check_rules(agent: Agent, model: RulesModel) -> None:
    for index, rule in enumerate(model.rules):
        tool = agent.tool_named(rule.tool) if rule.tool else None
        if rule.tool and tool is None:
            message = f"a rule calls tool {rule.tool!r}, which is not among its tools"
            raise AgentConfigError(agent.name, message)
        wrong = argument_problem(rule.arguments, tool) if tool is not None else None
        if wrong is not None:
            raise AgentConfigError(agent.name, f"rules[{index}]: {wrong[1]}")
        if rule.handoff and rule.handoff not in agent.handoffs:
            message = f"a rule hands off to {rule.handoff!r}, which is not in its handoffs"
            raise AgentConfigError(agent.name, message)
