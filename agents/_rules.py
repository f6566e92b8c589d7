"""The ``rules`` backend: deterministic, offline answers from patterns on the user's message."""

from __future__ import annotations

import json
import logging
import re
import secrets
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ._agent import handoff_tool_name
from ._model import ModelMessage, ModelResponse, ToolCall, ToolSpec
from ._tools import Tool

logger = logging.getLogger("agents.rules")


@dataclass(frozen=True)
class Rule:
    """If ``match`` (a regex, searched case-insensitively; None matches anything) fits the
    user's last message: call ``tool`` with ``arguments``, or hand off to ``handoff``, or
    reply. Templates may use the pattern's named groups; a tool rule's ``reply`` may use
    ``{result}``, the tool's answer (the default reply).
    """

    match: str | None = None
    reply: str | None = None
    tool: str | None = None
    arguments: Mapping[str, str] = field(default_factory=dict)
    handoff: str | None = None
    buttons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.tool and self.handoff:
            raise ValueError("a rule calls a tool or hands off, not both")
        if not (self.tool or self.handoff or self.reply):
            raise ValueError("a rule needs a reply, a tool or a handoff")
        try:
            pattern = self.pattern
        except re.error as exc:
            raise ValueError(f"bad pattern {self.match!r}: {exc}") from exc
        groups = set(pattern.groupindex) if pattern else set()
        allowed = groups | {"result"} if self.tool else groups
        for template in (self.reply or "", *self.arguments.values()):
            unknown = _fields(template) - allowed
            if unknown:
                raise ValueError(f"unknown template field(s) {sorted(unknown)} in {template!r}")

    @property
    def pattern(self) -> re.Pattern[str] | None:
        return re.compile(self.match, re.IGNORECASE) if self.match is not None else None

    @property
    def action(self) -> str | None:
        """The tool this rule calls (a handoff is a ``transfer_to_<name>`` tool)."""
        if self.handoff:
            return handoff_tool_name(self.handoff)
        return self.tool


class RulesModel:
    """A ``ModelBackend`` that applies the first matching rule; no match gives no answer."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        self._patterns = [rule.pattern for rule in self.rules]

    async def complete(
        self, messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        """Answer the last user message by the first rule that matches it, passing over a
        handoff rule whose handoff this turn has made or had refused already: the message came
        back to this agent (billing's "menu" after triage's "bill"), which answers it with its
        next rule instead of handing it on again, or saying nothing."""
        text, tail = _last_user_text(messages)
        for index, (rule, pattern) in enumerate(zip(self.rules, self._patterns, strict=True)):
            found = pattern.search(text) if pattern else re.match("", text)
            if found and not _handed_off(rule, tail):
                return _without_blank_reply(index, _apply(rule, _groups(found), tail))
        return ModelResponse()

    async def aclose(self) -> None:
        """Nothing to release."""


def _without_blank_reply(index: int, response: ModelResponse) -> ModelResponse:
    """A reply that renders to nothing but white space is no answer (as no match is), logged:
    sent, it would fail at the platform; kept, the next model would think it had answered."""
    if response.text is None or response.text.strip():
        return response
    logger.warning("rules[%d]: the reply renders to blank text: no answer", index)
    return ModelResponse(tool_calls=response.tool_calls)


def _apply(rule: Rule, groups: dict[str, str], tail: Sequence[ModelMessage]) -> ModelResponse:
    done = _result_of(rule.tool, tail) if rule.tool else None
    if done is not None:
        # the call was made in this turn already: answer with its result, never loop
        text = (rule.reply or "{result}").format_map({**groups, "result": done})
        return ModelResponse(text=text, buttons=rule.buttons)
    reply = rule.reply.format_map(groups) if rule.reply and not rule.tool else None
    if rule.action is None:
        return ModelResponse(text=reply, buttons=rule.buttons)
    arguments = {key: value.format_map(groups) for key, value in rule.arguments.items()}
    call = ToolCall(f"call_{secrets.token_hex(8)}", rule.action, json.dumps(arguments))
    return ModelResponse(text=reply, tool_calls=(call,))


def argument_problem(arguments: Mapping[str, str], tool: Tool) -> tuple[str | None, str] | None:
    """What is wrong with a rule's ``arguments`` for ``tool``, known before any call: the
    first argument the tool does not take, or the parameters it needs that are not given.
    (argument, problem), the argument None for missing ones; None when nothing is wrong."""
    fields = tool.arguments_model.model_fields
    for name in arguments:
        if name not in fields:
            taken = ", ".join(map(repr, fields)) or "none"
            return name, (
                f"argument {name!r} is not a parameter of tool {tool.name!r}"
                f" (its parameters: {taken})"
            )
    missing = [name for name, info in fields.items() if info.is_required()]
    names = ", ".join(repr(name) for name in missing if name not in arguments)
    if names:
        return (
            None,
            f"tool {tool.name!r} needs the argument(s) {names}, which the rule does not give",
        )
    return None


def _last_user_text(messages: Sequence[ModelMessage]) -> tuple[str, Sequence[ModelMessage]]:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return messages[index].text or "", messages[index + 1 :]
    return "", messages


def _handed_off(rule: Rule, tail: Sequence[ModelMessage]) -> bool:
    """Whether ``rule`` hands off and its handoff was answered (made or refused) in ``tail``."""
    if not rule.handoff:
        return False
    return _result_of(handoff_tool_name(rule.handoff), tail) is not None


def _result_of(action: str, tail: Sequence[ModelMessage]) -> str | None:
    for message in reversed(tail):
        if message.role == "tool" and message.name == action:
            return message.text or ""
    return None


def _groups(found: re.Match[str]) -> dict[str, str]:
    return {key: value or "" for key, value in found.groupdict().items()}


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
