"""What an agent sees of the agents before it (its ``handoff_history``), when the context is
built; the stored history is never rewritten.

* ``full``: everything, as stored.
* ``messages``: the conversation's text only. Tool calls of other agents, and calls to tools
  this agent is not offered, are left out with their results (servers in front of Anthropic
  or Bedrock models refuse a call to a tool the request does not offer); their text stays.
* ``summary``: as ``messages``, and each left-out exchange becomes one assistant line that
  says which tools the earlier agent called and what they answered (written by the gateway,
  not by a model), so that facts found with tools survive the handoff.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from ._model import ModelMessage

HandoffHistory = Literal["full", "messages", "summary"]
HANDOFF_HISTORIES: tuple[HandoffHistory, ...] = ("full", "messages", "summary")
SUMMARY_HEAD = "[Earlier, {agent} used tools:"
SUMMARY_CHARS = 300  # of each call's arguments and result: a line, not a copy


@dataclass
class _Digest:
    """The left-out exchange being read: its calls by id, and the lines for ``summary``."""

    agent: str = ""
    calls: dict[str, str] = field(default_factory=dict)  # id -> "name(arguments)"
    lines: list[str] = field(default_factory=list)

    def message(self) -> ModelMessage | None:
        if not self.lines:
            return None
        head = SUMMARY_HEAD.format(agent=self.agent)
        return ModelMessage("assistant", " ".join([head, "; ".join(self.lines)]) + "]")


def view(
    messages: Sequence[tuple[ModelMessage, str | None]],
    agent: str,
    offered: Collection[str],
    mode: HandoffHistory,
) -> list[ModelMessage]:
    """``messages`` (each with the agent that wrote it) as ``agent`` sees them in ``mode``."""
    if mode == "full":
        return [message for message, _ in messages]
    out: list[ModelMessage] = []
    left_out: set[str] = set()
    digest = _Digest()
    for message, author in messages:
        if message.role == "tool" and message.tool_call_id in left_out:
            call = digest.calls.get(message.tool_call_id or "", "a tool")
            answer = (message.text or "")[:SUMMARY_CHARS]
            digest.lines.append(f"{call} answered {answer!r}")
            continue
        if message.role != "tool":
            _flush(out, digest, mode)
            digest = _Digest()
        if (
            message.role == "assistant"
            and message.tool_calls
            and not _own(message, author, agent, offered)
        ):
            left_out.update(call.id for call in message.tool_calls)
            digest = _Digest(author or "another agent")
            digest.calls = {
                c.id: f"{c.name}({c.arguments[:SUMMARY_CHARS]})" for c in message.tool_calls
            }
            if message.text:
                out.append(replace(message, tool_calls=()))
            continue
        out.append(message)
    _flush(out, digest, mode)
    return out


def _own(message: ModelMessage, author: str | None, agent: str, offered: Collection[str]) -> bool:
    return author == agent and all(call.name in offered for call in message.tool_calls)


def _flush(out: list[ModelMessage], digest: _Digest, mode: HandoffHistory) -> None:
    summary = digest.message() if mode == "summary" else None
    if summary is not None:
        out.append(summary)
