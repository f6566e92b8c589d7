"""``@tool``: JSON schema from the signature, validated arguments, errors back to the model."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import BaseModel

from webhook_bot_gateway.agents import Tool, ToolError, ToolResult, tool


@tool
def add(a: int, b: int = 2) -> int:
    """Add two numbers.

    The second defaults to 2.
    """
    return a + b


class Address(BaseModel):
    city: str
    zip: str


@tool(name="ship", description="Ship a parcel.")
async def ship_parcel(to: Address, speed: Literal["slow", "fast"] = "slow") -> dict[str, str]:
    return {"city": to.city, "speed": speed}


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


def test_tool_schema_from_signature() -> None:
    assert isinstance(add, Tool)
    assert add.name == "add"
    assert add.description == "Add two numbers."
    assert add.parameters == {
        "type": "object",
        "properties": {
            "a": {"title": "A", "type": "integer"},
            "b": {"title": "B", "type": "integer", "default": 2},
        },
        "required": ["a"],
        "additionalProperties": False,
    }


def test_tool_schema_of_nested_model_and_literal() -> None:
    schema = ship_parcel.parameters
    assert ship_parcel.name == "ship"
    assert ship_parcel.description == "Ship a parcel."
    assert schema["required"] == ["to"]
    assert schema["properties"]["to"] == {"$ref": "#/$defs/Address"}
    assert schema["$defs"]["Address"]["required"] == ["city", "zip"]
    assert schema["properties"]["speed"]["enum"] == ["slow", "fast"]


async def test_tool_invoke_sync_validates_and_coerces() -> None:
    assert await add.invoke('{"a": 1}') == ToolResult("3")
    assert await add.invoke('{"a": "5", "b": 5}') == ToolResult("10")


async def test_tool_invoke_async_with_nested_model() -> None:
    result = await ship_parcel.invoke(json.dumps({"to": {"city": "Oslo", "zip": "0150"}}))
    assert result == ToolResult('{"city":"Oslo","speed":"slow"}')


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"b": 1}', "error: invalid arguments for add: a: Field required"),
        ('{"a": "x"}', "error: invalid arguments for add: a: Input should be a valid integer"),
        ('{"a": 1, "c": 3}', "error: invalid arguments for add: c: Extra inputs are not permitted"),
        ("[1, 2]", "error: invalid arguments for add: arguments must be a JSON object"),
    ],
)
async def test_tool_invoke_rejects_bad_arguments_before_the_call(
    arguments: str, expected: str
) -> None:
    result = await add.invoke(arguments)
    assert result.is_error
    assert result.text.startswith(expected)


async def test_tool_invoke_bad_json_is_an_error_result() -> None:
    result = await add.invoke('{"a": ')
    assert result.is_error
    assert result.text.startswith("error: invalid arguments for add: Expecting value")


async def test_tool_invoke_empty_arguments_mean_no_arguments() -> None:
    result = await add.invoke("")
    assert result.is_error
    assert "a: Field required" in result.text


async def test_tool_that_raises_returns_an_error_result(caplog: pytest.LogCaptureFixture) -> None:
    result = await explode.invoke('{"reason": "boom"}')
    assert result == ToolResult("error: explode failed: raised RuntimeError", is_error=True)
    assert "tool explode raised" in caplog.text
    assert "boom" not in caplog.text  # the message is the DEBUG traceback's only


async def test_a_tools_exception_message_never_reaches_the_model() -> None:
    """The model's provider receives, and the history keeps, every tool result."""

    @tool
    def crm_lookup(customer: str) -> str:
        """Looks a customer up."""
        raise ConnectionError("could not connect to postgres://crm:hunter2@10.0.0.5/crm")

    result = await crm_lookup.invoke('{"customer": "ann"}')
    assert result == ToolResult("error: crm_lookup failed: raised ConnectionError", is_error=True)
    assert "hunter2" not in result.text + result.failure


async def test_a_tool_error_gives_the_model_the_tools_own_words(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @tool
    def lookup(number: str) -> str:
        """Looks an invoice up."""
        raise ToolError(f"no invoice {number}; invoice numbers look like INV-1001")

    with caplog.at_level("INFO", logger="agents.tools"):
        result = await lookup.invoke('{"number": "42"}')
    assert result.text == "error: lookup failed: no invoice 42; invoice numbers look like INV-1001"
    assert result.is_error
    assert "no invoice 42" not in caplog.text  # the words are the model's, not the log's


def test_tool_rejects_untyped_parameters() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(ValueError, match="'x' needs a type annotation"):
        tool(untyped)


def test_tool_rejects_var_keyword() -> None:
    def loose(**kwargs: int) -> int:
        return 0

    with pytest.raises(ValueError, match="'kwargs' must be passable by name"):
        tool(loose)


@pytest.mark.parametrize("name", ["transfer_to_x", "has space", "x" * 65])
def test_tool_rejects_reserved_or_invalid_names(name: str) -> None:
    def fn() -> str:
        return ""

    with pytest.raises(ValueError, match="tool name"):
        tool(name=name)(fn)
