"""WhatsApp message templates: a send checked against ``[[whatsapp.templates]]``, then built.

Operators (``POST /api/sessions/{id}/template``) and agents (the ``whatsapp_template`` tool)
go through the same check, so a template that Meta would refuse for a wrong name, language or
parameter count (errors 132000-132001) is refused here, before anything is queued.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from webhook_bot_gateway.agents import Tool, ToolContext, tool
from webhook_bot_gateway.channels import OutboundMessage, OutboundTemplate, WhatsAppConfig
from webhook_bot_gateway.store import OutboxIn, Session, Turn

from ._convert import outbox_row, reply_target
from ._reachability import is_blocked


class TemplateRefused(ValueError):
    """A template send that does not match the declared templates."""

    def __init__(self, status: int, code: str, message: str, field: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field


def checked(
    config: WhatsAppConfig, name: str, language: str, parameters: Sequence[str]
) -> OutboundTemplate:
    """The template to send; TemplateRefused when it is not declared or the count is wrong."""
    declared = config.template(name, language)
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

    def whatsapp_template(
        name: str, language: str, context: ToolContext, parameters: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        if not context.session_id.startswith(WHATSAPP_SESSION):
            raise ValueError("templates are WhatsApp's; this session is on another channel")
        try:
            template = checked(config, name, language, parameters)
        except TemplateRefused as exc:
            raise ValueError(exc.message) from None
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
