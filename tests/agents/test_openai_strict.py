"""The strict fake's rules: each one refuses the request that breaks it (tests/openai_strict.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.openai_strict import Rules, call, check_request

LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup_invoice",
        "description": "Look up an invoice.",
        "parameters": {"type": "object", "properties": {"number": {"type": "string"}}},
    },
}


def body(*messages: dict[str, Any], tools: list[Any] | None = None) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), "tools": tools or [LOOKUP]}


def calls(*tool_calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(tool_calls)}


def result(call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


USER = {"role": "user", "content": "hi"}


def test_strict_fake_accepts_a_valid_exchange() -> None:
    valid = body(
        {"role": "system", "content": "You help."},
        USER,
        calls(call("a", "lookup_invoice", '{"number": "1"}'), call("b", "lookup_invoice")),
        result("a"),
        result("b"),
        {"role": "assistant", "content": "done"},
    )
    assert check_request(valid, Rules(vllm=True, offered_only=True)) == []


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        ((USER, calls(call("a", "x"), call("a", "x")), result("a")), "Duplicate value"),
        ((USER, calls(call("", "x")), result("")), "id: must be a non-empty string"),
        ((USER, calls(call("a", "functions.lookup")), result("a")), "does not match"),
        ((USER, calls(call("a", "f" * 65)), result("a")), "does not match"),
        ((USER, calls(call("a", "x")), USER), "must be followed by tool messages"),
        ((USER, result("a")), "must be a response to a preceding"),
        ((USER, calls(call("a", "x")), result("a", "")), "non-empty string"),
        (({"role": "operator", "content": "hi"},), "role must be one of"),
        (({"role": "user", "content": None},), "must be a string"),
        (({"role": "assistant", "content": None},), "needs 'content' or 'tool_calls'"),
        ((USER, {"role": "tool", "content": "x", "tool_call_id": "a", "name": "x"}), "field"),
    ],
)
def test_strict_fake_refuses_what_openai_refuses(
    messages: tuple[dict[str, Any], ...], fragment: str
) -> None:
    problems = check_request(body(*messages))
    assert any(fragment in problem for problem in problems), problems


def test_strict_fake_refuses_arguments_that_are_not_strings() -> None:
    as_object = {"id": "a", "type": "function", "function": {"name": "x", "arguments": {}}}
    assert check_request(body(USER, calls(as_object), result("a")))


def test_vllm_mode_refuses_arguments_that_do_not_parse_as_an_object() -> None:
    for broken in ('{"number": "INV-1004', "[1, 2]", ""):
        exchange = body(USER, calls(call("a", "lookup_invoice", broken)), result("a"))
        assert check_request(exchange) == []
        assert check_request(exchange, Rules(vllm=True)), broken


def test_offered_only_mode_refuses_calls_to_tools_not_offered() -> None:
    exchange = body(USER, calls(call("a", "transfer_to_billing")), result("a"))
    assert check_request(exchange) == []
    assert check_request(exchange, Rules(offered_only=True))


def test_strict_fake_checks_the_tools_json_schemas() -> None:
    bad_schema = {"type": "function", "function": {"name": "x", "parameters": {"type": 3}}}
    not_object = {"type": "function", "function": {"name": "y", "parameters": {"type": "array"}}}
    bad_name = {"type": "function", "function": {"name": "a.b", "parameters": {"type": "object"}}}
    for tool in (bad_schema, not_object, bad_name):
        assert check_request(body(USER, tools=[tool])), tool
    assert check_request(body(USER, tools=[LOOKUP, LOOKUP]))
