"""Channel events -> the runner's UserInput; the agents' replies -> outbound message payloads."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from webhook_bot_gateway.agents import Reply, UserInput
from webhook_bot_gateway.channels import (
    Button,
    Contact,
    InboundMessage,
    Location,
    Order,
    OutboundMessage,
    Reaction,
    Referral,
    ReferredProduct,
)
from webhook_bot_gateway.store import Attachment, InboxItem, OutboxIn, Session, storable_text

# Session metadata: where replies go instead of the session's chat (a Telegram group that became
# a supergroup; a WhatsApp user who changed their number).
MIGRATED_CHAT = "migrated_to_chat_id"
NUMBER_CHANGED = "user_changed_number"  # WhatsApp's system notice: the user has a new number
GROUP_MIGRATED = "migrate_to_chat_id"  # Telegram's, in a group upgraded to a supergroup
MOVES_THE_CHAT = frozenset({NUMBER_CHANGED, GROUP_MIGRATED})  # notices naming the new chat
ASKS_NOTHING = frozenset({"reaction", "system"})  # kinds recorded without running an agent
START_PAYLOAD = "start_payload"  # session metadata: the payload of the last /start deep link
# What a t.me/<bot>?start=<payload> link can carry (Telegram: up to 64 of A-Z a-z 0-9 _ -).
DEEP_LINK_PAYLOAD = re.compile(r"[A-Za-z0-9_-]{1,64}")
TELEGRAM_CALLBACK_BYTES = 64  # a button's callback_data
WHATSAPP_ROW_ID = 200  # a list row's id (a reply button's may be 256)
AD_BODY_CHARS = 200  # of an ad's primary text in the agent's line (the data keeps it whole)


def message_text(event: InboundMessage) -> str:
    """What the agent reads for one inbound message; never empty. The ad the user came from
    and the product they ask about come first, so that "is this in stock?" names its subject."""
    where = [_referral(event.referral)] if event.referral is not None else []
    if event.referred_product is not None:
        where.append(_referred_product(event.referred_product))
    return " ".join([*where, _own_text(event)])


def _own_text(event: InboundMessage) -> str:
    if event.kind == "command" and event.command is not None:
        return f"/{event.command.name} {event.command.args}".rstrip()
    text = _describe(event) if event.kind == "order" or not event.text else event.text
    return f"[edited] {text}" if event.kind == "edited" else text


def start_payload(event: InboundMessage) -> str | None:
    """The payload of a ``/start <payload>`` deep link (Telegram), else None."""
    command = event.command
    if event.kind != "command" or command is None or command.name != "start":
        return None
    return command.args if DEEP_LINK_PAYLOAD.fullmatch(command.args) else None


def last_start_payload(events: Sequence[Mapping[str, Any]]) -> str | None:
    """The payload of the last deep link among a turn's stored events."""
    payloads = [start_payload(InboundMessage.model_validate(event)) for event in events]
    return next((p for p in reversed(payloads) if p is not None), None)


def _describe(event: InboundMessage) -> str:
    if event.interactive is not None:
        return event.interactive.title or event.interactive.id
    if event.media is not None:
        return event.media.caption or f"[{event.kind}]"
    if event.location is not None:
        return _location(event.location)
    if event.contacts:
        return "[contacts: " + "; ".join(_contact(c) for c in event.contacts) + "]"
    if event.reaction is not None:
        return _reaction(event.reaction)
    if event.order is not None:
        return _order(event.order, event.text)
    if event.flow is not None:
        answers = json.dumps(event.flow.response, ensure_ascii=False, separators=(",", ":"))
        return f"[form {event.flow.name or 'flow'} submitted: {answers}]"
    if event.system is not None:
        return f"[notice: {event.system.body or event.system.type or 'system'}]"
    if event.kind == "unsupported":
        return _unsupported(event)
    return f"[{event.platform_type or event.kind}]"


def _unsupported(event: InboundMessage) -> str:
    """A message the platform did not give us the content of (WhatsApp ``unsupported``, or a
    known type that came without its object, with ``errors``): said so, with the platform's
    reason, so that the agent does not take ``[interactive]`` for a button the user pressed."""
    what = event.platform_type or "unknown"
    first = event.errors[0] if event.errors else None
    reason = " ".join(str(p) for p in (first.code, first.title) if p is not None) if first else ""
    return f"[unsupported message: {what}{f' ({reason})' if reason else ''}]"


def _location(where: Location) -> str:
    place = ", ".join(filter(None, [where.name, where.address]))
    return f"[location {where.latitude},{where.longitude}{' ' + place if place else ''}]"


def _contact(contact: Contact) -> str:
    phones = ", ".join(contact.phones)
    name = contact.name or "?"
    return f"{name} ({phones})" if phones else name


def _reaction(reaction: Reaction) -> str:
    if reaction.emoji is None:
        return f"[reaction removed from message {reaction.message_id}]"
    return f"[reaction {reaction.emoji} to message {reaction.message_id}]"


def _order(order: Order, text: str | None) -> str:
    items = "; ".join(
        f"{i.product_id} x{i.quantity or 1}"
        + (f" at {i.item_price:g} {i.currency or ''}".rstrip() if i.item_price is not None else "")
        for i in order.items
    )
    note = f" with note: {text}" if text else ""
    return f"[order of {len(order.items)} item(s): {items}{note}]"


def _referral(referral: Referral) -> str:
    """``[from ad: <headline> | <primary text> | <url>]``: what the ad showed the user, on one
    line (an ad's text may have several), its text cut to ``AD_BODY_CHARS``."""
    body = " ".join((referral.body or "").split())
    if len(body) > AD_BODY_CHARS:
        body = body[: AD_BODY_CHARS - 1] + "…"
    parts = [" ".join((referral.headline or "").split()), body, referral.source_url or ""]
    shown = " | ".join(filter(None, parts)) or referral.source_id
    source = referral.source_type or "ad"
    return f"[from {source}: {shown}]" if shown else f"[from {source}]"


def _referred_product(product: ReferredProduct) -> str:
    catalog = f" in catalog {product.catalog_id}" if product.catalog_id else ""
    return f"[about product {product.product_id}{catalog}]"


# The structured part of a message the agent gets beside its text (UserInput.data).
STRUCTURED = (
    "location",
    "contacts",
    "interactive",
    "flow",
    "reaction",
    "order",
    "system",
    "referral",
    "referred_product",
)


def user_input(events: Sequence[Mapping[str, Any]], files: Sequence[Attachment] = ()) -> UserInput:
    """One turn's input from one or more stored events (several when merged), in order, with
    a line for each attachment that came with them (a model cannot open a file by itself)."""
    messages = [InboundMessage.model_validate(event) for event in events]
    lines: list[str] = []
    payload: str | None = None
    for message in messages:
        lines.append(message_text(message))
        own = start_payload(message)
        if own is not None:
            payload = own
            lines.append(f"[the user came through a link with start payload: {own}]")
        lines += [describe_file(f) for f in files if f.message_key == message.dedup_key]
    data: dict[str, Any] = {"messages": [_reference(message) for message in messages]}
    if payload is not None:
        data[START_PAYLOAD] = payload
    if files:
        data["attachments"] = [f.id for f in files]
    return UserInput(storable_text("\n".join(lines)), data)  # NUL: see storable_text


def has_files(event: Mapping[str, Any]) -> bool:
    """Whether a stored inbound event came with a platform file or web uploads."""
    return bool(event.get("media") or event.get("attachments"))


def describe_file(file: Attachment) -> str:
    """What a text model reads of an attachment."""
    kind = file.content_type.split("/", 1)[0]
    if file.state == "ready":
        return f"[attached {kind}: {file.name} ({file.content_type}, {_size(file.size)})]"
    if file.state == "pending":
        return f"[attached {kind}: {file.name}, still downloading]"
    return f"[attached {kind}: {file.name}, could not be downloaded]"


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.0f} KB"
    return f"{size / 1024 / 1024:.1f} MB"


def _reference(message: InboundMessage) -> dict[str, Any]:
    """What the stored user message keeps of each event: enough to find it again, and the
    structured part of a location, contacts, choice, form, reaction or order, and the ad and
    product a message refers to."""
    reference = {
        "message_id": message.message_id,
        "dedup_key": message.dedup_key,
        "kind": message.kind,
        "timestamp": message.timestamp.isoformat(),
    }
    dumped = message.model_dump(mode="json", include=set(STRUCTURED))
    return reference | {key: value for key, value in dumped.items() if value not in (None, [])}


def asks_nothing(events: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a turn's messages are all reactions or platform notices (a WhatsApp user changed
    their number): recorded, not answered (the agent sees them in the history with the user's
    next message)."""
    return bool(events) and all(event.get("kind") in ASKS_NOTHING for event in events)


def moved_chat(events: Sequence[Mapping[str, Any]]) -> str | None:
    """The new id a WhatsApp ``user_changed_number`` notice, or a Telegram group's
    ``migrate_to_chat_id`` one, among a turn's events gives (the last one), else None: the
    old number, or the old group, no longer reaches anyone."""
    moved = None
    for event in events:
        notice = event.get("system")
        if event.get("kind") != "system" or not isinstance(notice, Mapping):
            continue
        new_id = notice.get("new_user_id")
        if notice.get("type") in MOVES_THE_CHAT and isinstance(new_id, str) and new_id:
            moved = new_id
    return moved


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
    buttons = tuple(
        Button(id=button_id(channel, title), title=title) for title in reply.buttons if title
    )
    return OutboundMessage(
        channel=channel,
        account=account,
        chat_id=chat_id,
        text=reply.text,
        buttons=buttons,
        thread_id=thread_id,
    )


def button_id(channel: str, title: str) -> str:
    """The id a button's press comes back with: its title, cut to what the platform carries
    (Telegram's callback_data holds 64 bytes of UTF-8, a WhatsApp list row id 200 characters).
    The user's press is read by the title it shows, so a cut id loses nothing; an id too long
    would make the platform refuse the whole reply."""
    if channel == "telegram":
        return title.encode()[:TELEGRAM_CALLBACK_BYTES].decode(errors="ignore")
    return title[:WHATSAPP_ROW_ID]


def text_message(channel: str, account: str, chat_id: str, text: str) -> OutboundMessage:
    """A plain text message (apologies, operator replies)."""
    return OutboundMessage(channel=channel, account=account, chat_id=chat_id, text=text)


def payload(message: OutboundMessage) -> dict[str, Any]:
    """The JSON an outbox row keeps."""
    return message.model_dump(mode="json", exclude_defaults=True)


def outbox_row(session: Session, message: OutboundMessage, *, parked: bool) -> OutboxIn:
    """The outbox row that sends ``message`` to the session's chat (``parked``: kept, not
    sent, while the user has blocked the bot or cannot be reached)."""
    return OutboxIn(
        session.session_id,
        session.channel,
        session.account,
        message.chat_id,
        payload(message),
        parked,
    )
