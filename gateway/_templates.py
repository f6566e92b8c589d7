"""WhatsApp message templates: a send checked against ``[[whatsapp.templates]]``, then built.

Operators (``POST /api/sessions/{id}/template``) and agents (the ``whatsapp_template`` tool)
go through the same check, so a template that Meta would refuse for a wrong name, language or
parameter count (errors 132000-132001) is refused here, before anything is queued.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from webhook_bot_gateway.channels import OutboundMessage, OutboundTemplate, WhatsAppConfig
from webhook_bot_gateway.store import OutboxIn, Session

from ._convert import payload, reply_target


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
    return OutboxIn(session.session_id, session.channel, session.account, chat, payload(message))
