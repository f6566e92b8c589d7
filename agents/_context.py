"""What a model sees: the agent's instructions, then the history pruned to whole turns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from ._agent import Agent
from ._model import ImagePart, ModelMessage, ModelResponse, ModelRole, ToolCall
from ._pruning import prune_to_turns
from ._tools import ToolResult


class StoredMessage(Protocol):
    """The part of a store ``Message`` or ``NewMessage`` a context needs."""

    @property
    def role(self) -> ModelRole: ...

    @property
    def text(self) -> str | None: ...

    @property
    def data(self) -> Mapping[str, Any]: ...


def build_context(
    agent: Agent, history: Sequence[StoredMessage], max_turns: int
) -> list[ModelMessage]:
    """Instructions as the first system message, then the last ``max_turns`` whole turns."""
    head = [ModelMessage("system", agent.instructions)] if agent.instructions else []
    return head + [to_model_message(m) for m in prune_to_turns(history, max_turns)]


def with_images(context: list[ModelMessage], images: tuple[ImagePart, ...]) -> list[ModelMessage]:
    """The context with ``images`` on its last user message (this turn's)."""
    if not images:
        return context
    for index in range(len(context) - 1, -1, -1):
        if context[index].role == "user":
            context[index] = replace(context[index], images=images)
            break
    return context


def to_model_message(message: StoredMessage) -> ModelMessage:
    """A stored message as a model message (tool calls and results from ``data``)."""
    data = message.data
    calls = tuple(
        ToolCall(str(c["id"]), str(c["name"]), str(c.get("arguments", "{}")))
        for c in data.get("tool_calls") or ()
    )
    call_id = data.get("tool_call_id")
    return ModelMessage(
        role=message.role,
        text=message.text,
        tool_calls=calls,
        tool_call_id=str(call_id) if call_id is not None else None,
        name=data.get("name"),
    )


def assistant_data(response: ModelResponse) -> dict[str, Any]:
    """``data`` of the assistant message recording ``response``."""
    data: dict[str, Any] = {}
    if response.tool_calls:
        data["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.tool_calls
        ]
    if response.buttons:
        data["buttons"] = list(response.buttons)
    return data


def tool_data(call: ToolCall, result: ToolResult) -> dict[str, Any]:
    """``data`` of the tool message answering ``call``."""
    data: dict[str, Any] = {"tool_call_id": call.id, "name": call.name}
    if result.is_error:
        data["is_error"] = True
    return data
