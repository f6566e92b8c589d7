"""``Agent``: a name, instructions, tools, handoff targets and a model (or a human queue)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ._handoff_history import HandoffHistory
from ._model import ModelBackend, ToolSpec
from ._tools import HANDOFF_PREFIX, Tool

AgentKind = Literal["bot", "human"]
DEFAULT_HUMAN_REPLY = "Thank you. A person will answer you here shortly."
_NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(frozen=True, eq=False)
class Agent:
    """An agent. ``model`` is a backend, or the name of one configured in ``[agents.models]``.

    A ``human`` agent has no model: the runner records the user's messages and leaves the
    answers to operators; ``handoff_reply`` is what the user is told once, on handoff.
    """

    name: str
    instructions: str = ""
    tools: Sequence[Tool] = ()
    handoffs: Sequence[str] = ()
    model: ModelBackend | str | None = None
    kind: AgentKind = "bot"
    description: str = ""
    handoff_reply: str = field(default=DEFAULT_HUMAN_REPLY)
    handoff_history: HandoffHistory = "full"  # see _handoff_history

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "handoffs", tuple(self.handoffs))

    def tool_named(self, name: str) -> Tool | None:
        """The agent's own tool called ``name``, if any."""
        return next((t for t in self.tools if t.name == name), None)


def handoff_tool_name(target: str) -> str:
    """The tool a model calls to hand the conversation to ``target``."""
    return f"{HANDOFF_PREFIX}{target}"


def handoff_target(tool_name: str) -> str | None:
    """The agent a ``transfer_to_<name>`` tool name points at, else None."""
    return tool_name.removeprefix(HANDOFF_PREFIX) if tool_name.startswith(HANDOFF_PREFIX) else None


def handoff_spec(target: Agent) -> ToolSpec:
    """The ``transfer_to_<name>`` tool offered to a model for one handoff target."""
    about = f" {target.description}" if target.description else ""
    return ToolSpec(
        handoff_tool_name(target.name),
        f"Hand the conversation to the {target.name} agent.{about}",
        _NO_PARAMETERS,
    )
