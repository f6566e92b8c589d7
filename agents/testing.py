"""Test doubles for agents: ``ScriptedModel`` replays given steps and records every call.

It is the default model double in this project's tests (agents/ and gateway/)::

    model = ScriptedModel(call("lookup_invoice", {"number": "INV-1"}), reply("It is paid."))
    ...  # run turns
    model.assert_done()   # fails if a scripted step was never used
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from ._agent import handoff_tool_name
from ._model import ModelMessage, ModelResponse, ToolCall, ToolSpec

StepFunction: TypeAlias = Callable[
    [Sequence[ModelMessage], Sequence[ToolSpec]], ModelResponse | Awaitable[ModelResponse]
]
Step: TypeAlias = ModelResponse | BaseException | StepFunction

_ids = itertools.count(1)


class UnexpectedModelCall(AssertionError):
    """The model was called after its script ran out."""


@dataclass(frozen=True, slots=True)
class ModelCall:
    """What the model received in one call."""

    messages: tuple[ModelMessage, ...]
    tools: tuple[ToolSpec, ...]

    @property
    def tool_names(self) -> list[str]:
        return [spec.name for spec in self.tools]


class ScriptedModel:
    """A ``ModelBackend`` that answers with the given steps, in order.

    A step is a ``ModelResponse``, an exception to raise, or a function of
    ``(messages, tools)`` returning a response (or an awaitable of one).
    """

    def __init__(self, *steps: Step) -> None:
        self._steps: deque[Step] = deque(steps)
        self.calls: list[ModelCall] = []
        self.closed = False

    def add(self, *steps: Step) -> None:
        """Append more steps to the script."""
        self._steps.extend(steps)

    @property
    def remaining(self) -> int:
        return len(self._steps)

    async def complete(
        self, messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        """Record the call and play the next step."""
        self.calls.append(ModelCall(tuple(messages), tuple(tools)))
        if not self._steps:
            raise UnexpectedModelCall(f"unexpected model call #{len(self.calls)}")
        step = self._steps.popleft()
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, ModelResponse):
            return step
        result = step(messages, tools)
        return await result if inspect.isawaitable(result) else result

    def assert_done(self) -> None:
        """Fail when scripted steps were never used."""
        if self._steps:
            raise AssertionError(f"{len(self._steps)} scripted step(s) were never used")

    async def aclose(self) -> None:
        self.closed = True


class Hang:
    """A step that never answers until released: for timeouts and cancellations."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(
        self, messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        self.started.set()
        await self.release.wait()
        return ModelResponse()


def reply(text: str, *buttons: str) -> ModelResponse:
    """A step answering ``text`` to the user."""
    return ModelResponse(text=text, buttons=buttons)


def tool_call(name: str, arguments: Mapping[str, Any] | str = "{}", *, id: str = "") -> ToolCall:
    """A ``ToolCall`` with a fresh id unless given; a mapping is sent as JSON."""
    text = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
    return ToolCall(id or f"call_{next(_ids)}", name, text)


def call(name: str, arguments: Mapping[str, Any] | str = "{}", *, id: str = "") -> ModelResponse:
    """A step calling one tool."""
    return ModelResponse(tool_calls=(tool_call(name, arguments, id=id),))


def transfer(agent: str) -> ModelResponse:
    """A step handing the conversation to ``agent``."""
    return call(handoff_tool_name(agent))
