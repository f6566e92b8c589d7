"""Channel events -> the runner's UserInput; the agents' replies -> outbound message payloads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agents import Reply, UserInput
from channels import Button, InboundMessage, OutboundMessage
from store import InboxItem

MIGRATED_CHAT = "migrated_to_chat_id"  # session metadata: where a Telegram group moved to


def message_text(event: InboundMessage) -> str:
    """What the agent reads for one inbound message; never empty."""
    if event.kind == "command" and event.command is not None:
        return f"/{event.command.name} {event.command.args}".rstrip()
    text = event.text or _describe(event)
    return f"[edited] {text}" if event.kind == "edited" else text


def _describe(event: InboundMessage) -> str:
    if event.interactive is not None:
        return event.interactive.title or event.interactive.id
    if event.media is not None:
        return event.media.caption or f"[{event.kind}]"
    if event.location is not None:
        where = event.location
        place = ", ".join(filter(None, [where.name, where.address]))
        return f"[location {where.latitude},{where.longitude}{' ' + place if place else ''}]"
    if event.contacts:
        names = ", ".join(c.name or (c.phones[0] if c.phones else "?") for c in event.contacts)
        return f"[contacts: {names}]"
    if event.reaction is not None:
        return f"[reaction {event.reaction.emoji or 'removed'}]"
    if event.order is not None:
        return f"[order of {len(event.order.items)} item(s)]"
    if event.system is not None:
        return f"[notice: {event.system.body or event.system.type or 'system'}]"
    return f"[{event.platform_type or event.kind}]"


def user_input(events: Sequence[Mapping[str, Any]]) -> UserInput:
    """One turn's input from one or more stored events (several when merged), in order."""
    messages = [InboundMessage.model_validate(event) for event in events]
    text = "\n".join(message_text(message) for message in messages)
    data = {"messages": [_reference(message) for message in messages]}
    return UserInput(text, data)


def _reference(message: InboundMessage) -> dict[str, Any]:
    """What the stored user message keeps of each event: enough to find it again."""
    return {
        "message_id": message.message_id,
        "dedup_key": message.dedup_key,
        "kind": message.kind,
        "timestamp": message.timestamp.isoformat(),
    }


def reply_target(chat_id: str, metadata: Mapping[str, Any]) -> str:
    """The chat replies go to: the session's, unless the group has migrated."""
    moved = metadata.get(MIGRATED_CHAT)
    return moved if isinstance(moved, str) and moved else chat_id


def thread_of(rows: Sequence[InboxItem]) -> str | None:
    """The forum topic of the turn's last message: where its replies go."""
    thread = rows[-1].event.get("thread_id") if rows else None
    return thread if isinstance(thread, str) else None


def outbound(
    channel: str, account: str, chat_id: str, reply: Reply, thread_id: str | None = None
) -> OutboundMessage:
    """The message that carries one agent reply (into the user's forum topic, if any)."""
    buttons = tuple(Button(id=title[:256], title=title) for title in reply.buttons if title)
    return OutboundMessage(
        channel=channel,
        account=account,
        chat_id=chat_id,
        text=reply.text,
        buttons=buttons,
        thread_id=thread_id,
    )


def text_message(channel: str, account: str, chat_id: str, text: str) -> OutboundMessage:
    """A plain text message (apologies, operator replies)."""
    return OutboundMessage(channel=channel, account=account, chat_id=chat_id, text=text)


def payload(message: OutboundMessage) -> dict[str, Any]:
    """The JSON an outbox row keeps."""
    return message.model_dump(mode="json", exclude_defaults=True)
