"""The ``[agents]`` config section; gateway/config.py composes it into the whole file."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from ._agent import DEFAULT_HUMAN_REPLY, Agent
from ._config_bool import ConfigBool
from ._errors import AgentConfigError
from ._handoff_history import HandoffHistory
from ._rules import Rule

AGENT_NAME = r"^[A-Za-z0-9_-]{1,52}$"  # transfer_to_<name> must fit OpenAI's 64 characters
RULES = "rules"


def _text_or_empty(text: str | None) -> str | None:
    """A text sent to users: "" (or None) for none, else it must hold more than blanks (the
    channels strip what they send: a blank one would be queued, then fail with nothing to
    send)."""
    if text and not text.strip():
        raise ValueError('must hold text, or be "" for none')
    return text


UserText = Annotated[str, AfterValidator(_text_or_empty)]


class _Section(BaseModel):
    # TOML has inf and nan: a timeout of inf never fires (docs/configuration.md).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class RuleConfig(_Section):
    """``[[agents.list.rules]]``: see ``Rule``."""

    match: str | None = None
    reply: str | None = None
    tool: str | None = None
    arguments: dict[str, str] = Field(default_factory=dict)
    handoff: str | None = None
    buttons: tuple[str, ...] = ()

    def to_rule(self) -> Rule:
        return Rule(**self.model_dump())


class OpenAIModelConfig(_Section):
    """``[agents.models.<name>]``: an OpenAI-compatible chat completions server."""

    type: Literal["openai"] = "openai"
    base_url: str = "https://api.openai.com/v1"
    model: str = Field(min_length=1)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # seconds per request: well below agents.turn_timeout, so that a hung request leaves the
    # turn time for its retries (see AgentsConfig.timing_warnings)
    timeout: float = Field(default=30.0, gt=0)
    max_retries: int = Field(default=3, ge=0)  # on 429, 5xx and network errors
    backoff: float = Field(default=0.5, gt=0)  # first retry delay; doubles each time
    max_backoff: float = Field(default=30.0, gt=0)
    vision: ConfigBool = False  # the model takes images: a user's photos go as image parts
    # Turns mostly wait on the model, so the pool is sized for many waiting requests
    # (aiohttp's own default, 100, capped a whole gateway at 100 requests in flight).
    max_connections: int = Field(default=2000, gt=0)  # the HTTP pool; keep-alive reused
    max_concurrency: int | None = Field(default=None, gt=0)  # requests in flight; None: the pool

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.max_concurrency is not None and self.max_concurrency > self.max_connections:
            raise ValueError(
                f"max_concurrency ({self.max_concurrency}) is above max_connections "
                f"({self.max_connections}): raise max_connections too"
            )
        return self

    @property
    def concurrency(self) -> int:
        """Requests this model may have in flight at once."""
        return self.max_concurrency or self.max_connections


class AgentFields(_Section):
    """The fields an agent has however it is declared, ``[[agents.list]]`` or
    ``agents.module``: both are validated by this model."""

    name: str = Field(pattern=AGENT_NAME)
    kind: Literal["bot", "human"] = "bot"
    instructions: str = ""
    description: str = ""
    handoffs: tuple[str, ...] = ()
    handoff_reply: UserText = DEFAULT_HUMAN_REPLY  # human agents: told the user on handoff
    handoff_history: HandoffHistory = "full"  # what it sees of earlier agents' tool calls


class AgentConfig(AgentFields):
    """``[[agents.list]]``: one agent."""

    model: str | None = None  # "rules" or a name under [agents.models]
    tools: tuple[
        str, ...
    ] = ()  # dotted import paths: "webhook_bot_gateway.agents.demo.lookup_invoice"
    rules: tuple[RuleConfig, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        for problem in _agent_problems(self):
            raise AgentConfigError(self.name, problem)
        return self


class AgentsConfig(_Section):
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False
    )

    starting_agent: str = Field(default="triage", min_length=1)
    max_turns: int = Field(default=40, gt=0)
    max_steps: int = Field(default=8, gt=0)  # model calls per turn
    max_handoffs: int = Field(default=3, ge=0)  # handoffs per turn
    turn_timeout: float = Field(default=120.0, gt=0)  # seconds; room for a model's retries
    refusal_reply: UserText | None = Field(default=None, min_length=1)  # None: the model's
    module: str | None = None  # a Python module whose AGENTS lists Agent objects
    models: dict[str, OpenAIModelConfig] = Field(default_factory=dict)
    agents: tuple[AgentConfig, ...] = Field(default=(), alias="list")

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if RULES in self.models:
            problem = f"{RULES!r} is the built-in rules backend's name: choose another"
            raise AgentConfigError(None, problem, key=f"agents.models.{RULES}", problem=problem)
        if self.agents:
            check_agent_names(
                [(a.name, a.handoffs) for a in self.agents],
                self.starting_agent,
                complete=self.module is None,
                listed="agents.list",
            )
        for index, agent in enumerate(self.agents):
            key = f"agents.list[{index}].model"
            if agent.model not in (None, RULES, *self.models):
                problem = f"model {agent.model!r} is not declared"
                raise AgentConfigError(agent.name, problem, key=key, problem=problem)
            # after the check above: a misspelled model is named as such, not as a rules problem
            if agent.rules and agent.model not in (None, RULES):
                problem = f"rules need model = 'rules' (it has model = {agent.model!r})"
                raise AgentConfigError(agent.name, problem, key=key, problem=problem)
        return self

    def timing_warnings(self) -> list[str]:
        """Models whose request ``timeout`` leaves the turn no time to retry a hung request:
        the turn times out during the first try, and ``max_retries`` never applies to it."""
        return [
            f"agents.models.{name}.timeout ({model.timeout:g}s) is not below half of"
            f" agents.turn_timeout ({self.turn_timeout:g}s): a request that hangs uses up the"
            " turn before it can be tried again (max_retries)"
            for name, model in self.models.items()
            if model.max_retries > 0 and model.timeout * 2 > self.turn_timeout
        ]


def check_agent_names(
    agents: list[tuple[str, tuple[str, ...]]],
    starting: str,
    *,
    complete: bool = True,
    listed: str | None = None,
    keyed: int | None = None,
) -> None:
    """Refuse duplicate names, handoffs to oneself, unknown handoff targets and a missing
    starting agent.

    ``listed``: the config key of ``agents`` (``agents.list``), so that an error names the
    entry (``agents.list[2].name``); None for agents given in Python. ``keyed``: how many of
    the first agents are that list's entries, when those of ``agents.module`` follow them
    (their errors name ``agents.module``); None: all of them."""
    seen: set[str] = set()
    for index, (name, handoffs) in enumerate(agents):
        if name in seen:  # first: a copied entry not renamed may hand off to the name it kept
            key = _entry_key(listed, keyed, index, "name")
            problem = f"agent {name!r} is declared more than once"
            raise AgentConfigError(name, "declared more than once", key=key, problem=problem)
        if name in handoffs:
            key = _entry_key(listed, keyed, index, f"handoffs[{handoffs.index(name)}]")
            problem = f"agent {name!r} cannot hand off to itself"
            raise AgentConfigError(name, "cannot hand off to itself", key=key, problem=problem)
        seen.add(name)
    if not complete:
        return
    for index, (name, handoffs) in enumerate(agents):
        for place, target in enumerate(handoffs):
            if target not in seen:
                problem = f"handoff target {target!r} is not declared"
                key = _entry_key(listed, keyed, index, f"handoffs[{place}]")
                if key == MODULE_KEY:
                    problem = f"agent {name!r}: {problem}"
                problem += f" (declared: {', '.join(sorted(seen))})"
                raise AgentConfigError(name, problem, key=key, problem=problem)
    names = seen
    if starting not in names:
        problem = f"agent {starting!r} is not declared"
        if names:
            problem += f" (declared: {', '.join(sorted(names))})"
        else:
            problem += ", and no agent is: declare them in [[agents.list]] or agents.module"
        raise AgentConfigError(
            starting,
            "named by starting_agent but not declared",
            key="agents.starting_agent",
            problem=problem,
        )


MODULE_KEY = "agents.module"


def _entry_key(listed: str | None, keyed: int | None, index: int, field: str) -> str | None:
    """The config key of entry ``index``'s ``field``: in ``listed``, or ``agents.module``
    for the agents that module gave (past the first ``keyed``)."""
    if listed is None:
        return None
    if keyed is not None and index >= keyed:
        return MODULE_KEY
    return f"{listed}[{index}].{field}"


def check_agent_fields(agent: Agent) -> None:
    """Validate an agent given in Python as ``AgentFields`` validates a ``[[agents.list]]``
    entry (a ``kind`` or ``handoff_history`` outside its choices, a blank ``handoff_reply``)."""
    fields = {name: getattr(agent, name) for name in AgentFields.model_fields}
    try:
        AgentFields.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        problem = first["msg"].removeprefix("Value error, ")
        raise AgentConfigError(agent.name, f"{_field_path(first['loc'])}: {problem}") from None


def _field_path(location: tuple[int | str, ...]) -> str:
    """``("handoffs", 1)`` as ``handoffs[1]``."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in location)[1:]


def _agent_problems(agent: AgentConfig) -> list[str]:
    problems = []
    if agent.kind == "human" and (agent.model or agent.tools or agent.rules):
        problems.append("a human agent has no model, tools or rules")
    if agent.kind == "bot" and not agent.model:
        problems.append("needs a model ('rules' or a name under [agents.models])")
    for index, rule in enumerate(agent.rules):
        try:
            rule.to_rule()
        except ValueError as exc:
            problems.append(f"rules[{index}]: {exc}")
        if rule.handoff and rule.handoff not in agent.handoffs:
            problems.append(f"rule hands off to {rule.handoff!r}, which is not in its handoffs")
    return problems
