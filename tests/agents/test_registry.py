"""Agents from config or a module; validation at start names the agent."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from webhook_bot_gateway.agents import (
    Agent,
    AgentConfigError,
    AgentsConfig,
    Registry,
    Rule,
    RulesModel,
    Tool,
    build_registry,
)
from webhook_bot_gateway.agents._loader import import_tool
from webhook_bot_gateway.agents.testing import ScriptedModel


def config(*agents: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"starting_agent": "triage", **top, "list": list(agents)}


TRIAGE = {"name": "triage", "model": "rules", "rules": [{"reply": "hi"}]}


def error_text(raw: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        AgentsConfig.model_validate(raw)
    return str(caught.value)


def test_config_defaults_without_agents_stay_valid() -> None:
    parsed = AgentsConfig.model_validate({"max_turns": 5})
    assert parsed.agents == ()
    assert (parsed.max_steps, parsed.max_handoffs, parsed.turn_timeout) == (8, 3, 120.0)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (config(TRIAGE, TRIAGE), "agent 'triage': declared more than once"),
        (
            config({**TRIAGE, "handoffs": ["billing"]}),
            "agent 'triage': handoff target 'billing' is not declared",
        ),
        (
            config({**TRIAGE, "name": "other"}),
            "agent 'triage': named by starting_agent but not declared",
        ),
        (
            config({"name": "triage", "model": "gpt"}),
            "agent 'triage': model 'gpt' is not declared",
        ),
        (
            config({**TRIAGE, "model": "gpt"}, models={"gpt": {"model": "m"}}),
            "agent 'triage': rules need model = 'rules' (it has model = 'gpt')",
        ),
        (
            config({**TRIAGE, "model": "fakee"}, models={"fake": {"model": "m"}}),
            "agent 'triage': model 'fakee' is not declared",
        ),
        (config({"name": "triage"}), "agent 'triage': needs a model"),
        (config({**TRIAGE, "kind": "human"}), "agent 'triage': a human agent has no model"),
        (config({**TRIAGE, "model": None}), "agent 'triage': needs a model"),
        (
            config({**TRIAGE, "rules": [{"handoff": "x"}]}),
            "agent 'triage': rule hands off to 'x', which is not in its handoffs",
        ),
        (config({**TRIAGE, "handoffs": ["triage"]}), "agent 'triage': cannot hand off to itself"),
        (
            config({**TRIAGE, "handoffs": ["triage"]}, module="x"),
            "agent 'triage': cannot hand off to itself",
        ),
        (
            # a copy not renamed hands off to the name it kept: the name is the mistake
            config({**TRIAGE, "handoffs": ["billing"]}, {**TRIAGE, "handoffs": ["triage"]}),
            "agent 'triage': declared more than once",
        ),
        (
            config({**TRIAGE, "rules": [{"match": "(", "reply": "x"}]}),
            "agent 'triage': rules[0]: bad pattern '('",
        ),
        (
            config({**TRIAGE, "rules": [{"match": "x"}]}),
            "agent 'triage': rules[0]: a rule needs a reply, a tool or a handoff",
        ),
        (config({**TRIAGE, "name": "no spaces"}), "String should match pattern"),
        (config(TRIAGE, models={"rules": {"model": "x"}}), "built-in rules backend"),
    ],
)
def test_config_rejects_with_the_agent_named(raw: dict[str, Any], message: str) -> None:
    assert message in error_text(raw)


def vision_config(value: object) -> dict[str, Any]:
    return config(TRIAGE, models={"gpt": {"model": "m", "vision": value}})


@pytest.mark.parametrize("value", ["yes", "on", "1", "t", "no", "off", "flase", "", 1, 0, 1.0])
def test_config_boolean_refuses_anything_but_true_or_false(value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        AgentsConfig.model_validate(vision_config(value))
    error = caught.value.errors()[0]
    assert error["loc"] == ("models", "gpt", "vision")
    assert error["msg"] == "Value error, must be true or false"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), ("true", True), ("FALSE", False), (" True\n", True)],
)
def test_config_boolean_takes_booleans_and_their_names(value: object, expected: bool) -> None:
    """Names because ``${VAR}`` substitution gives strings."""
    assert AgentsConfig.model_validate(vision_config(value)).models["gpt"].vision is expected


def test_config_module_defers_name_checks_to_the_registry() -> None:
    parsed = AgentsConfig.model_validate(
        config({"name": "helper", "model": "rules", "handoffs": ["coder"]}, module="x")
    )
    assert parsed.module == "x"


def test_registry_from_config_imports_tools() -> None:
    parsed = AgentsConfig.model_validate(
        config(
            {**TRIAGE, "handoffs": ["billing"]},
            {
                "name": "billing",
                "model": "rules",
                "tools": ["webhook_bot_gateway.agents.demo.lookup_invoice"],
                "rules": [
                    {
                        "match": "(?P<n>INV-1)",
                        "tool": "lookup_invoice",
                        "arguments": {"number": "{n}"},
                    }
                ],
            },
        )
    )
    registry = build_registry(parsed)
    billing = registry.get("billing")
    assert billing is not None
    assert isinstance(billing.model, RulesModel)
    assert [t.name for t in billing.tools] == ["lookup_invoice"]
    assert [s.name for s in registry.tool_specs(billing)] == ["lookup_invoice"]
    assert registry.get("gone") is None


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        (
            "webhook_bot_gateway.agents.demo.no_such_tool",
            "webhook_bot_gateway.agents.demo has no callable 'no_such_tool'",
        ),
        ("no_such_module_xyz.tool", "No module named 'no_such_module_xyz'"),
        ("lonely", "expected a dotted path such as package.module.function"),
    ],
)
def test_registry_tool_import_failure_names_agent(path: str, reason: str) -> None:
    parsed = AgentsConfig.model_validate(config({**TRIAGE, "tools": [path]}))
    with pytest.raises(AgentConfigError) as caught:
        build_registry(parsed)
    assert caught.value.agent == "triage"
    assert str(caught.value) == f"agent 'triage': tool {path!r} cannot be imported: {reason}"


@pytest.mark.parametrize("old", ["agents.demo.lookup_invoice", "agents.demo.no_such_tool"])
def test_a_tool_under_the_old_top_level_name_is_refused_with_its_new_path(old: str) -> None:
    parsed = AgentsConfig.model_validate(config({**TRIAGE, "tools": [old]}))
    with pytest.raises(AgentConfigError) as caught:
        build_registry(parsed)
    assert str(caught.value) == (
        f"agent 'triage': tool {old!r} is now 'webhook_bot_gateway.{old}': "
        "the gateway's packages are installed under webhook_bot_gateway"
    )


def test_an_agents_module_under_the_old_top_level_name_is_refused_with_its_new_path() -> None:
    parsed = AgentsConfig.model_validate(config(TRIAGE, module="agents.demo"))
    with pytest.raises(AgentConfigError, match="is now 'webhook_bot_gateway.agents.demo'"):
        build_registry(parsed)


def test_a_users_own_agents_package_is_not_taken_for_the_old_path() -> None:
    """Only paths that exist under the import package are old ones: a user's (or the OpenAI
    Agents SDK's) ``agents.something`` gets the ordinary import error."""
    parsed = AgentsConfig.model_validate(config({**TRIAGE, "tools": ["agents.sdk_only.x"]}))
    with pytest.raises(AgentConfigError, match="cannot be imported"):
        build_registry(parsed)


def test_registry_rule_calling_missing_tool_names_agent() -> None:
    parsed = AgentsConfig.model_validate(config({**TRIAGE, "rules": [{"tool": "lookup"}]}))
    with pytest.raises(AgentConfigError, match="agent 'triage': a rule's tool 'lookup'") as err:
        build_registry(parsed)
    assert err.value.key == "agents.list[0].rules[0].tool"


DEMO_TOOL = "webhook_bot_gateway.agents.demo.lookup_invoice"


@pytest.mark.parametrize(
    ("arguments", "key", "problem"),
    [
        (
            {"wrong": "{n}"},
            "agents.list[0].rules[1].arguments.wrong",
            "agent 'triage': argument 'wrong' is not a parameter of tool 'lookup_invoice'"
            " (its parameters: 'number')",
        ),
        (
            {},
            "agents.list[0].rules[1].arguments",
            "agent 'triage': tool 'lookup_invoice' needs the argument(s) 'number', which the"
            " rule does not give",
        ),
    ],
)
def test_registry_rule_arguments_that_do_not_fit_the_tool_are_refused_at_load(
    arguments: dict[str, str], key: str, problem: str
) -> None:
    rules = [{"reply": "hi", "match": "hi"}, {"match": r"(?P<n>\d+)", "tool": "lookup_invoice"}]
    rules[1]["arguments"] = arguments  # type: ignore[assignment]
    parsed = AgentsConfig.model_validate(config({**TRIAGE, "tools": [DEMO_TOOL], "rules": rules}))
    with pytest.raises(AgentConfigError) as caught:
        build_registry(parsed)
    assert (caught.value.key, caught.value.problem) == (key, problem)
    assert str(caught.value).startswith("agent 'triage': rules[1]: ")


def test_registry_python_rules_agent_with_arguments_the_tool_does_not_take_is_refused() -> None:
    rules = RulesModel([Rule(match="x", tool="lookup_invoice", arguments={"wrong": "1"})])
    agent = Agent("triage", tools=[import_tool("triage", DEMO_TOOL)], model=rules)
    with pytest.raises(AgentConfigError, match="rules\\[0\\]: argument 'wrong' is not a param"):
        Registry([agent], "triage")


def test_registry_from_module_agents_and_list_together() -> None:
    parsed = AgentsConfig.model_validate(
        config({**TRIAGE, "handoffs": ["coder"]}, module="tests.agents.sample_module")
    )
    registry = build_registry(parsed)
    assert registry.names == ["triage", "coder"]
    coder = registry.get("coder")
    assert coder is not None
    assert isinstance(coder.tools[0], Tool)


def test_registry_module_unknown_handoff_names_agent() -> None:
    parsed = AgentsConfig.model_validate(
        config({**TRIAGE, "handoffs": ["coder", "nobody"]}, module="tests.agents.sample_module")
    )
    with pytest.raises(AgentConfigError, match="agent 'triage': handoff target 'nobody'") as err:
        build_registry(parsed)
    # As the list alone names it: the key at fault, and what is declared.
    assert (err.value.key, err.value.problem) == (
        "agents.list[0].handoffs[1]",
        "handoff target 'nobody' is not declared (declared: coder, triage)",
    )


def test_a_module_that_is_not_on_the_path_is_named_with_the_fix() -> None:
    parsed = AgentsConfig.model_validate(config(TRIAGE, module="my_agents_xyz"))
    with pytest.raises(AgentConfigError) as err:
        build_registry(parsed)
    assert err.value.key == "agents.module"
    assert err.value.problem == (
        "cannot import 'my_agents_xyz': No module named 'my_agents_xyz': put the folder that"
        " holds it on PYTHONPATH (the working directory is not searched: PYTHONPATH=. gateway"
        " ...)"
    )


@pytest.mark.parametrize(
    ("module", "message"),
    [
        ("no_such_module_xyz", "agents.module 'no_such_module_xyz' cannot be imported"),
        (
            "webhook_bot_gateway.agents.demo",
            "agents.module 'webhook_bot_gateway.agents.demo' must define AGENTS",
        ),
    ],
)
def test_registry_bad_module(module: str, message: str) -> None:
    parsed = AgentsConfig.model_validate(config(TRIAGE, module=module))
    with pytest.raises(AgentConfigError, match=message):
        build_registry(parsed)


def test_registry_missing_api_key_variable_names_it() -> None:
    parsed = AgentsConfig.model_validate(
        config(
            {"name": "triage", "model": "gpt"},
            models={"gpt": {"model": "gpt-4o-mini", "api_key_env": "OPENAI_API_KEY"}},
        )
    )
    with pytest.raises(AgentConfigError, match="OPENAI_API_KEY") as caught:
        build_registry(parsed, environ={})
    assert "agents.models.gpt" in str(caught.value)


@pytest.mark.parametrize(
    ("agents", "starting", "message"),
    [
        ([Agent("a", model=ScriptedModel())], "b", "agent 'b': named by starting_agent"),
        ([Agent("a", model=ScriptedModel())] * 2, "a", "agent 'a': declared more than once"),
        ([Agent("a", handoffs=["a"], model=ScriptedModel())], "a", "agent 'a': cannot hand off"),
        (
            [Agent("a", model=ScriptedModel()), Agent("a", handoffs=["a"], model=ScriptedModel())],
            "a",
            "agent 'a': declared more than once",
        ),
        ([Agent("a", handoffs=["z"], model=ScriptedModel())], "a", "agent 'a': handoff target"),
        ([Agent("a")], "a", "agent 'a': needs a model"),
        ([Agent("a", model="gpt")], "a", "agent 'a': model 'gpt' is not declared"),
        ([Agent("h", kind="human", model=ScriptedModel())], "h", "agent 'h': a human agent"),
        ([Agent("a b", model=ScriptedModel())], "a b", "agent 'a b': name: String should match"),
        (
            [Agent("a", kind="robot", model=ScriptedModel())],  # type: ignore[arg-type]
            "a",
            "agent 'a': kind: Input should be 'bot' or 'human'",
        ),
        (
            [Agent("a", model=ScriptedModel(), handoff_history="summery")],  # type: ignore[arg-type]
            "a",
            "agent 'a': handoff_history: Input should be 'full', 'messages' or 'summary'",
        ),
        (
            [Agent("a", tools=["pkg.mod.fn"], model=ScriptedModel())],  # type: ignore[list-item]
            "a",
            "agent 'a': tools\\[0\\] is a str, not a function decorated with @tool",
        ),
        (
            [Agent("a", tools=[print], model=ScriptedModel())],  # type: ignore[list-item]
            "a",
            "agent 'a': tools\\[0\\] is a builtin_function_or_method, not a function decorated",
        ),
    ],
)
def test_registry_rejects_python_agents(agents: list[Agent], starting: str, message: str) -> None:
    with pytest.raises(AgentConfigError, match=message):
        Registry(agents, starting)


async def test_registry_aclose_closes_each_backend_once() -> None:
    shared = ScriptedModel()
    registry = Registry(
        [Agent("a", handoffs=["b"], model=shared), Agent("b", model="named")],
        "a",
        models={"named": shared},
    )
    assert registry.model_for(registry.starting_agent) is shared
    await registry.aclose()
    assert shared.closed
