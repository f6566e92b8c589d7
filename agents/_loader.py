"""Build the registry from ``[agents]``: agents from the list and from ``agents.module``."""

from __future__ import annotations

import importlib
import importlib.util
import os
import traceback
from collections.abc import Mapping
from typing import Any, NoReturn

import aiohttp

from ._agent import Agent
from ._config import MODULE_KEY, RULES, AgentConfig, AgentsConfig, check_agent_names
from ._errors import AgentConfigError
from ._model import ModelBackend
from ._openai import OpenAIModel, Sleep
from ._registry import Registry, check_agent
from ._rules import RulesModel, argument_problem
from ._tools import Tool, make_tool

# The import package the four folders are installed under ("webhook_bot_gateway").
IMPORT_PACKAGE = __name__.split(".")[0]
OLD_TOP_LEVEL = ("agents", "channels", "gateway", "store")


def build_registry(
    config: AgentsConfig,
    *,
    environ: Mapping[str, str] = os.environ,
    session: aiohttp.ClientSession | None = None,
    sleep: Sleep | None = None,
    builtin_tools: Mapping[str, Tool] | None = None,
) -> Registry:
    """Import tools and modules, build the backends, validate; errors name the agent.

    ``builtin_tools``: tools an agent names without a dot (the gateway's, such as
    ``whatsapp_template``), given rather than imported as they need the application's config.
    """
    models = {name: _openai(name, config, environ, session, sleep) for name in config.models}
    agents = [
        agent_from_config(spec, builtin_tools or {}, key=f"agents.list[{index}]")
        for index, spec in enumerate(config.agents)
    ]
    if config.module:
        listed = len(agents)
        found = module_agents(config.module)
        for agent in found:
            _check_module_agent(agent, models)
        agents += found
        # Checked together here (the config could not: the module's agents were not known),
        # so that an error still names the key (agents.list[0].handoffs[1], agents.module).
        check_agent_names(
            [(a.name, tuple(a.handoffs)) for a in agents],
            config.starting_agent,
            listed="agents.list",
            keyed=listed,
        )
    return Registry(agents, config.starting_agent, models=models)


def agent_from_config(
    spec: AgentConfig, builtin_tools: Mapping[str, Tool] | None = None, *, key: str | None = None
) -> Agent:
    """One ``[[agents.list]]`` entry (at config ``key``, if known) as an ``Agent``; its tools
    imported by dotted path."""
    builtin = builtin_tools or {}
    model: ModelBackend | str | None = spec.model
    if spec.model == RULES:
        model = RulesModel([rule.to_rule() for rule in spec.rules])
    tools = [
        builtin.get(path) or import_tool(spec.name, path, key=key and f"{key}.tools[{index}]")
        for index, path in enumerate(spec.tools)
    ]
    _check_rule_tools(spec, tools, key)
    return Agent(
        name=spec.name,
        instructions=spec.instructions,
        tools=tools,
        handoffs=spec.handoffs,
        model=model,
        kind=spec.kind,
        description=spec.description,
        handoff_reply=spec.handoff_reply,
        handoff_history=spec.handoff_history,
    )


def _check_rule_tools(spec: AgentConfig, tools: list[Tool], key: str | None) -> None:
    """A rule's ``tool`` names one of the agent's tools, and its ``arguments`` fit that tool's
    parameters (both known only once the tools are imported)."""
    named = {tool.name: tool for tool in tools}
    for index, rule in enumerate(spec.rules):
        if not rule.tool:
            continue
        tool = named.get(rule.tool)
        if tool is None:
            problem = (
                f"tool {rule.tool!r} is not among the agent's tools"
                f" ({', '.join(map(repr, named)) or 'it has none'})"
            )
            rule_key = key and f"{key}.rules[{index}].tool"
            raise AgentConfigError(spec.name, f"a rule's {problem}", key=rule_key, problem=problem)
        wrong = argument_problem(rule.arguments, tool)
        if wrong is not None:
            argument, problem = wrong
            rule_key = key and f"{key}.rules[{index}].arguments"
            if argument is not None:
                rule_key = rule_key and f"{rule_key}.{argument}"
            message = f"rules[{index}]: {problem}"
            raise AgentConfigError(
                spec.name, message, key=rule_key, problem=f"agent {spec.name!r}: {problem}"
            )


def import_tool(agent: str, path: str, *, key: str | None = None) -> Tool:
    """The ``Tool`` at ``package.module.name`` (a plain function is wrapped with ``@tool``);
    ``key``: where the config names it, for the error."""
    moved = moved_path(path)
    if moved:
        problem = f"{path!r} is now {moved!r}: {MOVED_REASON}"
        raise AgentConfigError(agent, f"tool {problem}", key=key, problem=problem)
    try:
        found = _import(path)
        return found if isinstance(found, Tool) else make_tool(found)
    except Exception as exc:
        message = f"tool {path!r} cannot be imported: {exc}"
        problem = f"cannot import {path!r}: {exc}"
        raise AgentConfigError(agent, message, key=key, problem=problem) from exc


def _import_failure(exc: Exception, module_name: str) -> str:
    """Why the module did not import, with the hint a missing one needs: the ``gateway``
    command does not look in the working directory."""
    if isinstance(exc, ModuleNotFoundError) and exc.name == module_name.split(".")[0]:
        return (
            f"{exc}: put the folder that holds it on PYTHONPATH (the working directory is not"
            " searched: PYTHONPATH=. gateway ...)"
        )
    if isinstance(exc, SyntaxError | ModuleNotFoundError):
        return str(exc)  # Python's own words: a module's name, a file and a line
    # The message is the module's own and may hold a secret (a database url): not shown.
    return f"{type(exc).__name__} raised at {_raised_at(exc, module_name)}"


def _raised_at(exc: Exception, module_name: str) -> str:
    """``file:line`` of the last traceback frame in the module's own file, else the last."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = _source_file(module_name)
    frame = next((f for f in reversed(frames) if f.filename == own), frames[-1])
    return f"{frame.filename}:{frame.lineno}"


def _source_file(module_name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(module_name)
    except Exception:  # a parent package whose import fails again
        return None
    return spec.origin if spec else None


def module_agents(module_name: str) -> list[Agent]:
    """The ``AGENTS`` sequence of ``module_name``."""
    moved = moved_path(module_name, module=True)
    if moved:
        _module_error(module_name, f"is now {moved!r}: {MOVED_REASON}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        failure = _import_failure(exc, module_name)
        message = f"agents.module {module_name!r} cannot be imported: {failure}"
        problem = f"cannot import {module_name!r}: {failure}"
        raise AgentConfigError(None, message, key=MODULE_KEY, problem=problem) from exc
    found = getattr(module, "AGENTS", None)
    if not isinstance(found, list | tuple) or not all(isinstance(a, Agent) for a in found):
        _module_error(module_name, "must define AGENTS, a list of Agent objects")
    return list(found)


def _check_module_agent(agent: Agent, models: Mapping[str, ModelBackend]) -> None:
    """One of the module's ``AGENTS`` checked as the registry checks it, the error naming the
    config key that brought it (``agents.module``), as a ``[[agents.list]]`` entry's does."""
    try:
        check_agent(agent, models)
    except AgentConfigError as exc:
        exc.key = MODULE_KEY  # its problem, the message, already names the agent
        raise


def _module_error(module_name: str, problem: str) -> NoReturn:
    problem = f"{module_name!r} {problem}"
    raise AgentConfigError(None, f"agents.module {problem}", key="agents.module", problem=problem)


MOVED_REASON = f"the gateway's packages are installed under {IMPORT_PACKAGE}"


def moved_path(path: str, *, module: bool = False) -> str | None:
    """The new dotted path of a gateway path written with the old top-level names, such as
    ``agents.demo.lookup_invoice``; None for any other path (a user's own ``agents`` package
    stays theirs)."""
    if path.split(".")[0] not in OLD_TOP_LEVEL:
        return None
    module_name = path if module else path.rpartition(".")[0]
    try:
        found = importlib.util.find_spec(f"{IMPORT_PACKAGE}.{module_name}")
    except ImportError:
        found = None
    return f"{IMPORT_PACKAGE}.{path}" if found else None


def _import(path: str) -> Any:
    module_name, _, attribute = path.rpartition(".")
    if not module_name:
        raise ValueError("expected a dotted path such as package.module.function")
    found = getattr(importlib.import_module(module_name), attribute, None)
    if found is None or not callable(found):
        raise ValueError(f"{module_name} has no callable {attribute!r}")
    return found


def _openai(
    name: str,
    config: AgentsConfig,
    environ: Mapping[str, str],
    session: aiohttp.ClientSession | None,
    sleep: Sleep | None,
) -> OpenAIModel:
    settings = config.models[name]
    api_key = None
    if settings.api_key_env:
        api_key = environ.get(settings.api_key_env)
        if not api_key:
            message = f"environment variable {settings.api_key_env} (its API key) is not set"
            key = f"agents.models.{name}.api_key_env"
            raise AgentConfigError(
                None, f"agents.models.{name}: {message}", key=key, problem=message
            )
    extra: dict[str, Any] = {"sleep": sleep} if sleep else {}
    return OpenAIModel(name, settings, api_key=api_key, session=session, **extra)
