"""What a model sees: the agent's instructions, then the history pruned to whole turns."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from webhook_bot_gateway.store import Role

from ._agent import Agent
from ._handoff_history import view
from ._model import ImagePart, ModelMessage, ModelResponse, ModelRole, ToolCall
from ._normalize import CheckedCall, replayable_arguments
from ._pruning import leading_messages, prune_to_turns
from ._tools import ToolResult


class StoredMessage(Protocol):
    """The part of a store ``Message`` or ``NewMessage`` a context needs."""

    @property
    def role(self) -> Role: ...

    @property
    def text(self) -> str | None: ...

    @property
    def data(self) -> Mapping[str, Any]: ...

    @property
    def agent(self) -> str | None: ...


LEADING_NOTE = "Before the user's first message, the user was sent:"
OPERATOR = "operator"  # data key of the name of the person who wrote an operator message
DEAD_LETTER = "dead_letter"  # data key of a dead-lettered message and of its apology
OPERATOR_MARK = "[{who}, a person and not you, wrote this to the user:] "
APOLOGY_MARK = (
    "[The user's message above was not answered: the turn failed, and the user was sent "
    "this apology:] "
)
HANDED_MARK = " [The session was then handed to {agent}.]"


def build_context(
    agent: Agent,
    history: Sequence[StoredMessage],
    max_turns: int,
    offered: Collection[str] = (),
) -> list[ModelMessage]:
    """Instructions as the first system message, then the last ``max_turns`` whole turns,
    as the agent's ``handoff_history`` shows them (``offered``: the names of its tools).

    What was sent before the user's first message (an operator who wrote first, a greeting)
    is kept while that start is within the last turns, but not as assistant messages: the
    conversation after the system messages starts with a user message, as providers want.
    Its text goes in one system note after the other system messages (see ``leading_note``).
    """
    head = [ModelMessage("system", agent.instructions)] if agent.instructions else []
    pruned = [(to_model_message(m), m.agent) for m in prune_to_turns(history, max_turns)]
    kept = view(pruned, agent.name, offered, agent.handoff_history)
    note = leading_note(leading_messages(history, max_turns))
    if note is None:
        return head + kept
    system = [m for m in kept if m.role == "system"]  # prune_to_turns puts them first
    return head + system + [note] + kept[len(system) :]


def leading_note(messages: Sequence[StoredMessage]) -> ModelMessage | None:
    """The texts of the assistant messages among ``messages``, each with its sender (the
    agent's name, ``operator`` for an operator), as one system message; None without text.

    Their tool calls and results are left out: a result's call must come before it.
    """
    lines = [f"[{_sender(m)}] {m.text}" for m in messages if _said(m) and m.text]
    return ModelMessage("system", "\n".join([LEADING_NOTE, *lines])) if lines else None


def _said(message: StoredMessage) -> bool:
    """Whether the user was sent ``message`` (an agent's or an operator's)."""
    return message.role in ("assistant", "operator")


def _model_role(role: Role) -> ModelRole:
    """An operator's reply reaches a model as an assistant message (see ``shown_text``)."""
    return "assistant" if role == "operator" else role


def _sender(message: StoredMessage) -> str:
    return message.agent or "assistant"


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
        ToolCall(str(c["id"]), str(c["name"]), replayable_arguments(str(c.get("arguments", ""))))
        for c in data.get("tool_calls") or ()
    )
    call_id = data.get("tool_call_id")
    return ModelMessage(
        role=_model_role(message.role),
        text=shown_text(message),
        tool_calls=calls,
        tool_call_id=str(call_id) if call_id is not None else None,
        name=data.get("name"),
    )


def shown_text(message: StoredMessage) -> str | None:
    """The text a model reads: an operator's words and a dead letter's apology say what they
    are, so the model neither takes them for its own nor misses why the history has a gap."""
    text = message.text
    if not _said(message) or not text:
        return text
    if message.role == "operator":
        name = message.data.get(OPERATOR)
        who = f"Operator {name}" if isinstance(name, str) and name else "An operator"
        return OPERATOR_MARK.format(who=who) + text
    mark = message.data.get(DEAD_LETTER)
    if isinstance(mark, Mapping):
        handed = HANDED_MARK.format(agent=mark["handoff"]) if mark.get("handoff") else ""
        return APOLOGY_MARK + text + handed
    return text


def assistant_data(
    response: ModelResponse, calls: Sequence[CheckedCall] | None = None
) -> dict[str, Any]:
    """``data`` of the assistant message recording ``response``, with its ``calls`` as
    checked (see ``check_calls``; without them, the response's own)."""
    data: dict[str, Any] = {}
    if calls is None:
        calls = [CheckedCall(c, c) for c in response.tool_calls]
    if calls:
        data["tool_calls"] = [c.data() for c in calls]
    if response.refusal and not response.text and not calls:
        data["refusal"] = response.refusal
    if response.buttons:
        data["buttons"] = list(response.buttons)
    return data


def tool_data(call: ToolCall, result: ToolResult) -> dict[str, Any]:
    """``data`` of the tool message answering ``call``."""
    data: dict[str, Any] = {"tool_call_id": call.id, "name": call.name}
    if result.is_error:
        data["is_error"] = True
    return data
