"""Complete-turn pruning: the part of a history a model gets to see."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from webhook_bot_gateway.store import OUTSIDE_TURNS


class ChatMessage(Protocol):
    """Anything with a role and a data mapping (store ``Message`` and ``NewMessage`` fit)."""

    @property
    def role(self) -> str: ...

    @property
    def data(self) -> Mapping[str, Any]: ...


M = TypeVar("M", bound=ChatMessage)


def prune_to_turns(messages: Sequence[M], max_turns: int) -> list[M]:
    """Return the system messages, then the last ``max_turns`` whole turns.

    A turn starts at a user message, except one written while a person answered the session
    (``OUTSIDE_TURNS``: it belongs to the turn that handed the session over, so a long human
    phase never pushes the reason for the handoff out), and the branch's first user message
    always starts one. Messages before the first kept user message are
    dropped, so the result never starts with an assistant or tool message, and a tool
    result whose call was not kept before it is dropped as well.
    """
    if max_turns <= 0:
        raise ValueError(f"max_turns must be > 0, got {max_turns}")
    system = [m for m in messages if m.role == "system"]
    rest = [m for m in messages if m.role != "system"]
    starts = turn_starts(rest)
    kept = rest[starts[-max_turns] :] if len(starts) >= max_turns else _from_first(rest, starts)
    return system + _without_orphans(kept)


def leading_messages(messages: Sequence[M], max_turns: int) -> list[M]:
    """The messages other than system ones before the first user message, when the last
    ``max_turns`` turns reach back to it (fewer than ``max_turns`` user messages); else [].

    ``prune_to_turns`` drops them (a context must not start with an assistant or a tool
    message), but they may be what an operator or an agent said first: ``build_context``
    passes their text on in a system note. They count as a turn of their own, so they are
    inside every window that holds the whole branch, such as ``recent_turns`` loads.
    """
    if max_turns <= 0:
        raise ValueError(f"max_turns must be > 0, got {max_turns}")
    rest = [m for m in messages if m.role != "system"]
    starts = turn_starts(rest)
    if len(starts) >= max_turns:
        return []
    return rest[: starts[0]] if starts else rest


def turn_starts(messages: Sequence[ChatMessage]) -> list[int]:
    """The indexes of the messages that start a turn (see ``prune_to_turns``)."""
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    return [i for i in users if i == users[0] or _starts_turn(messages[i])]


def _starts_turn(message: ChatMessage) -> bool:
    return message.data.get(OUTSIDE_TURNS) is not True


def _from_first(rest: list[M], starts: list[int]) -> list[M]:
    return rest[starts[0] :] if starts else []


def _without_orphans(messages: list[M]) -> list[M]:
    called: set[str] = set()
    out: list[M] = []
    for message in messages:
        if message.role == "assistant":
            called.update(_call_ids(message))
        elif message.role == "tool" and message.data.get("tool_call_id") not in called:
            continue
        out.append(message)
    return out


def _call_ids(message: ChatMessage) -> list[str]:
    calls = message.data.get("tool_calls") or []
    return [str(call["id"]) for call in calls if isinstance(call, Mapping) and "id" in call]
