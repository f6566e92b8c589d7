"""WhatsApp message templates: a send checked against ``[[whatsapp.templates]]``, then built.

Operators (``POST /api/sessions/{id}/template``) and agents (the ``whatsapp_template`` tool)
go through the same check, so a template that Meta would refuse for a wrong name, language or
parameter count (errors 132000-132001), or for a parameter's text (132018), is refused here,
before anything is stored or queued.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from webhook_bot_gateway.agents import Tool, ToolContext, ToolError, tool
from webhook_bot_gateway.channels import OutboundMessage, OutboundTemplate, WhatsAppConfig
from webhook_bot_gateway.store import OutboxIn, Session, Turn

from ._convert import outbox_row, reply_target
from ._reachability import is_blocked


class TemplateRefused(ValueError):
    """A template send that does not match the declared templates, or that WhatsApp would
    refuse for a parameter's text."""

    def __init__(self, status: int, code: str, message: str, field: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field


# What Meta refuses in a body parameter's text, error 132018: "Param text cannot have
# new-line/tab characters or more than 4 consecutive spaces". A line break is any that
# str.splitlines() breaks at (\r and U+2028 too).
LINE_BREAK_OR_TAB = re.compile(r"[\t\n\v\f\r\x1c-\x1e\x85\u2028\u2029]")
MAX_SPACES = 4
TOO_MANY_SPACES = re.compile(f" {{{MAX_SPACES + 1},}}")
WHY = "WhatsApp refuses it: error 132018"


def parameter_problem(text: str) -> str | None:
    """Why WhatsApp would not take ``text`` as a body parameter, or None when it would."""
    if not text.strip():  # the channels strip what they send: nothing would be left
        return "must not be empty or only whitespace"
    if LINE_BREAK_OR_TAB.search(text):
        return f"must not hold a line break or a tab ({WHY})"
    if TOO_MANY_SPACES.search(text):
        return f"must not hold more than {MAX_SPACES} spaces in a row ({WHY})"
    return None


def checked(
    config: WhatsAppConfig, name: str, language: str, parameters: Sequence[str]
) -> OutboundTemplate:
    """The template to send; TemplateRefused when a parameter is one WhatsApp refuses (400,
    ``parameters.N``), the template is not declared (404) or the count is wrong (422)."""
    declared = config.template(name, language)
    _check_parameters(parameters, declared.parameters if declared is not None else ())
    if declared is None:
        languages = sorted(t.language for t in config.templates if t.name == name)
        known = f" (declared in: {', '.join(languages)})" if languages else ""
        message = f"no template {name!r} in language {language!r} is declared{known}"
        raise TemplateRefused(404, "unknown_template", message, "name")
    if len(parameters) != len(declared.parameters):
        wanted = ", ".join(declared.parameters) or "none"
        message = (
            f"template {name!r} takes {len(declared.parameters)} parameter(s) ({wanted}),"
            f" got {len(parameters)}"
        )
        raise TemplateRefused(422, "template_parameters", message, "parameters")
    return OutboundTemplate(name=name, language=language, parameters=tuple(parameters))


def _check_parameters(parameters: Sequence[str], names: Sequence[str]) -> None:
    """TemplateRefused naming the first parameter WhatsApp would refuse (and its declared name)."""
    for index, text in enumerate(parameters):
        problem = parameter_problem(text)
        if problem is not None:
            field = f"parameters.{index}"
            named = f" ({names[index]})" if index < len(names) else ""
            raise TemplateRefused(400, "invalid_field", f"{field}{named}: {problem}", field)


def summary(template: OutboundTemplate) -> str:
    """The history's text of a sent template (what the agent and the console read)."""
    values = ", ".join(template.parameters)
    return f"[template {template.name} ({template.language}){': ' + values if values else ''}]"


def template_data(template: OutboundTemplate) -> dict[str, Any]:
    """What the stored message keeps of the template."""
    return {"template": template.model_dump(mode="json")}


def template_outbox(session: Session, template: OutboundTemplate) -> OutboxIn:
    """The outbox row that sends ``template`` to the session's user."""
    chat = reply_target(session.chat_id, session.metadata)
    message = OutboundMessage(
        channel=session.channel, account=session.account, chat_id=chat, template=template
    )
    # An unreachable user gets it once they write again.
    return outbox_row(session, message, parked=is_blocked(session.metadata))


TEMPLATE_TOOL = "whatsapp_template"  # the name agents list in ``tools`` to get it
QUEUED = "queued_template"  # the tool result's key: the dispatcher queues what it holds
WHATSAPP_SESSION = "whatsapp-"


def template_tool(config: WhatsAppConfig) -> Tool:
    """The agents' tool: a declared template checked now, queued when the turn commits."""

    # async, though it awaits nothing: it runs on the loop at once, where a sync tool would
    # wait for one of the threads the sync tools share, all taken by hung ones perhaps
    # (agents/_tool_threads.py).
    async def whatsapp_template(
        name: str, language: str, context: ToolContext, parameters: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        if not context.session_id.startswith(WHATSAPP_SESSION):
            raise ToolError("templates are WhatsApp's; this session is on another channel")
        try:
            template = checked(config, name, language, parameters)
        except TemplateRefused as exc:
            raise ToolError(exc.message) from None
        return {QUEUED: template.model_dump(mode="json"), "sent": "when this answer ends"}

    return tool(name=TEMPLATE_TOOL, description=_description(config))(whatsapp_template)


def _description(config: WhatsAppConfig) -> str:
    lines = [
        "Send an approved WhatsApp template: the only message WhatsApp delivers more than 24"
        " hours after the user's last message. Give every parameter, in order. Declared:"
    ]
    for t in config.templates:
        about = f": {t.description}" if t.description else ""
        lines.append(f"- {t.name} ({t.language}), parameters [{', '.join(t.parameters)}]{about}")
    if not config.templates:
        lines.append("- none")
    return "\n".join(lines)


def queued_templates(turn: Turn) -> list[OutboundTemplate]:
    """The templates the turn's agents queued with the tool (its results that are not errors)."""
    found = []
    for message in turn.pending:
        data = message.data
        if message.role != "tool" or data.get("name") != TEMPLATE_TOOL or data.get("is_error"):
            continue
        result = json.loads(message.text or "{}")
        found.append(OutboundTemplate.model_validate(result[QUEUED]))
    return found


def builtin_tools(config: WhatsAppConfig) -> dict[str, Tool]:
    """The tools agents may name without a dotted path (``build_registry(builtin_tools=)``)."""
    return {TEMPLATE_TOOL: template_tool(config)}
