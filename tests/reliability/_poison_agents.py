"""Agents for test_poison.py, loaded by the real gateway process through ``agents.module``.

The test copies this file into the gateway's working directory as ``poison_agents.py`` (that
directory is on the path of ``python -m webhook_bot_gateway``). ``echo`` answers ``echo <tag>``
to a message tagged ``c<chat>-m<n>``; a message whose text contains ``poison`` makes its model
raise, every time. Every model call appends one line to ``model-calls.log`` in the working
directory:
``<outcome> <time.monotonic()> <tag>[,<tag>...]`` (several tags when messages were merged), so
the test can count the tries of each message. ``human`` is the queue a dead-lettered session
is handed to.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path

from webhook_bot_gateway.agents import (
    Agent,
    ModelBackendError,
    ModelMessage,
    ModelResponse,
    ToolSpec,
)

CALLS_LOG = "model-calls.log"
POISON = "poison"
TAG = re.compile(r"c[0-9]+-m[0-9]+")


class PoisonError(ModelBackendError):
    """What the model raises on a poison message: a ``ModelBackendError``, so that the dead
    letter keeps its message (of any other exception the dispatcher keeps the type only)."""


class PoisonModel:
    """Echoes the tags of the user's message; raises on a poison message."""

    def __init__(self, log: Path) -> None:
        self._log = log

    async def complete(
        self, messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        text = next((m.text or "" for m in reversed(messages) if m.role == "user"), "")
        tags = TAG.findall(text)
        poisoned = POISON in text
        self._record("raise" if poisoned else "reply", tags)
        if poisoned:
            raise PoisonError("poison", f"poison message {','.join(tags)}")
        return ModelResponse(text=" ".join(f"echo {tag}" for tag in tags))

    async def aclose(self) -> None:
        return None

    def _record(self, outcome: str, tags: list[str]) -> None:
        with self._log.open("a", encoding="utf-8") as log:
            log.write(f"{outcome} {time.monotonic():.6f} {','.join(tags)}\n")


AGENTS = [
    Agent("echo", "Repeats the tags of the user's message.", model=PoisonModel(Path(CALLS_LOG))),
    Agent("human", kind="human", description="The queue dead-lettered sessions go to."),
]
