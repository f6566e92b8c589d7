"""The model backend interface and the messages that cross it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

ModelRole = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A model's request to run a tool; ``arguments`` is the JSON text as the model sent it."""

    id: str
    name: str
    arguments: str = "{}"


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a model is told about a tool: its name, purpose and JSON schema."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image the user sent with this turn's message, for a model that can see."""

    content_type: str  # image/jpeg, image/png, ...
    data: bytes

    def __repr__(self) -> str:  # never the bytes, in a log or a traceback
        return f"ImagePart({self.content_type!r}, {len(self.data)} bytes)"


@dataclass(frozen=True, slots=True)
class ModelMessage:
    """One message of the context a model receives."""

    role: ModelRole
    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None  # the tool's name, on tool results
    images: tuple[ImagePart, ...] = ()  # the current user message's, never the history's


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """A model's answer: text for the user, tool calls, or both; or the model's refusal."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    buttons: tuple[str, ...] = field(default=())
    refusal: str | None = None  # OpenAI's ``refusal``, sent with ``content: null``


class ModelBackend(Protocol):
    """One small interface for every model: offline rules, OpenAI-compatible servers, doubles."""

    async def complete(
        self, messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        """Answer the context ``messages``, optionally asking for calls of ``tools``."""

    async def aclose(self) -> None:
        """Release what the backend holds (HTTP sessions); idempotent."""
