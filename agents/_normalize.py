"""A model's tool calls made safe to store and to send back in later requests.

Servers answer with calls that OpenAI, vLLM and others refuse once they are replayed in the
history: repeated or empty ids (``call_0`` twice), names that break ``^[a-zA-Z0-9_-]{1,64}$``
(``functions.lookup_invoice``), arguments that are not a JSON object (``{"number": "INV-1``).
Each call is stored in a form every server accepts, and a call that cannot run carries the
problem that its tool result (an error) explains to the model. The server's own id, name and
arguments are kept beside it (``model_call``), for the record only.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ._model import ToolCall

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
NO_NAME = "unnamed_tool"
EMPTY_ARGUMENTS = "{}"


@dataclass(frozen=True, slots=True)
class CheckedCall:
    """A call as stored and replayed, the server's original, and why it cannot run (if so)."""

    call: ToolCall
    original: ToolCall
    problem: str | None = None

    def data(self) -> dict[str, Any]:
        """The stored form: ``model_call`` only when the server's call differs from it."""
        stored: dict[str, Any] = {
            "id": self.call.id,
            "name": self.call.name,
            "arguments": self.call.arguments,
        }
        if self.original != self.call:
            stored["model_call"] = {
                "id": self.original.id,
                "name": self.original.name,
                "arguments": self.original.arguments,
            }
        if self.problem is not None:
            stored["problem"] = self.problem
        return stored


def check_calls(
    calls: Sequence[ToolCall], offered: Collection[str], taken_ids: Iterable[str]
) -> list[CheckedCall]:
    """``calls`` with ids unique among themselves and ``taken_ids`` (the history's), names
    that are valid, and arguments that are a JSON object; unknown tools and broken arguments
    carry their problem."""
    taken = set(taken_ids)
    checked = []
    for original in calls:
        call_id = original.id if original.id and original.id not in taken else _new_id(taken)
        taken.add(call_id)
        name, name_problem = _checked_name(original.name, offered)
        arguments, arguments_problem = _checked_arguments(original.arguments)
        call = ToolCall(call_id, name, arguments)
        checked.append(CheckedCall(call, original, name_problem or arguments_problem))
    return checked


def replayable_arguments(arguments: str) -> str:
    """``arguments`` when they are a JSON object, else ``{}`` (for histories stored before
    calls were checked)."""
    return _checked_arguments(arguments)[0]


def _new_id(taken: set[str]) -> str:
    while (call_id := f"call_{secrets.token_hex(12)}") in taken:
        pass
    return call_id


def _checked_name(name: str, offered: Collection[str]) -> tuple[str, str | None]:
    if name in offered and NAME.fullmatch(name):
        return name, None
    safe = _UNSAFE.sub("_", name)[:64] or NO_NAME
    known = ", ".join(sorted(offered)) or "none"
    return safe, f"unknown tool {name[:80]!r}; the tools offered are: {known}"


def _checked_arguments(arguments: str) -> tuple[str, str | None]:
    if not arguments.strip():
        return EMPTY_ARGUMENTS, None
    try:
        value = json.loads(arguments)
    except ValueError as exc:
        return EMPTY_ARGUMENTS, f"the arguments are not valid JSON ({exc}); the call was not run"
    if not isinstance(value, dict):
        kind = type(value).__name__
        return EMPTY_ARGUMENTS, f"the arguments must be a JSON object, not {kind}; not run"
    return arguments, None
