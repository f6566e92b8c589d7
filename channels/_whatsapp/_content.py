"""The type-specific part of an inbound message: ``message[message["type"]]`` to model fields."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._json import load_json
from .._model import (
    Contact,
    FlowReply,
    InteractiveReply,
    Location,
    Media,
    MessageKind,
    Order,
    OrderItem,
    Reaction,
    SystemNotice,
)
from ._wire import (
    WireButton,
    WireContactCard,
    WireFlowReply,
    WireInteractive,
    WireLocation,
    WireMedia,
    WireOrder,
    WireReaction,
    WireSystem,
    WireText,
    WireUnsupported,
)


@dataclass(frozen=True, slots=True)
class Content:
    kind: MessageKind
    platform_type: str
    text: str | None = None
    media: Media | None = None
    location: Location | None = None
    contacts: tuple[Contact, ...] = ()
    interactive: InteractiveReply | None = None
    flow: FlowReply | None = None
    reaction: Reaction | None = None
    order: Order | None = None
    system: SystemNotice | None = None


def content(type_: str, raw: object) -> Content:
    """Convert the type's own object; a known type whose object is missing is ``unsupported``."""
    convert = _CONVERTERS.get(type_)
    if type_ == "unsupported" or convert is None or raw is None:
        return _unsupported(type_, raw)
    return convert(type_, raw)


def _unsupported(type_: str, raw: object) -> Content:
    inner = WireUnsupported.model_validate(raw).type if isinstance(raw, dict) else None
    return Content(kind="unsupported", platform_type=inner or type_)


def _text(type_: str, raw: object) -> Content:
    return Content(kind="text", platform_type=type_, text=WireText.model_validate(raw).body)


def _media(type_: str, raw: object) -> Content:
    wire = WireMedia.model_validate(raw)
    media = Media(
        id=wire.id,
        mime_type=wire.mime_type,
        caption=wire.caption,
        file_name=wire.filename,
        url=wire.url,
    )
    kind: MessageKind = "voice" if type_ == "audio" and wire.voice else _MEDIA_KINDS[type_]
    return Content(kind=kind, platform_type=type_, text=wire.caption, media=media)


_MEDIA_KINDS: dict[str, MessageKind] = {
    "image": "image",
    "audio": "audio",
    "video": "video",
    "document": "document",
    "sticker": "sticker",
}


def _location(type_: str, raw: object) -> Content:
    wire = WireLocation.model_validate(raw)
    location = Location(**wire.model_dump())
    return Content(kind="location", platform_type=type_, location=location)


def _contacts(type_: str, raw: object) -> Content:
    if not isinstance(raw, list):
        raise ValueError("contacts is not a list")
    cards = [WireContactCard.model_validate(item) for item in raw]
    return Content(kind="contacts", platform_type=type_, contacts=tuple(map(_contact, cards)))


def _contact(card: WireContactCard) -> Contact:
    name = card.name
    parts = [name.first_name, name.last_name] if name else []
    full = (name.formatted_name if name else None) or " ".join(filter(None, parts))
    phones = tuple(p.phone for p in card.phones if p.phone)
    user_id = next((p.wa_id for p in card.phones if p.wa_id), None)
    return Contact(name=full or None, phones=phones, user_id=user_id)


def _interactive(type_: str, raw: object) -> Content:
    wire = WireInteractive.model_validate(raw)
    if wire.type == "nfm_reply" and wire.nfm_reply is not None:
        return _flow(type_, wire.nfm_reply)
    reply = {"button_reply": wire.button_reply, "list_reply": wire.list_reply}.get(wire.type)
    if reply is None:
        return Content(kind="unsupported", platform_type=f"{type_}.{wire.type}")
    choice = InteractiveReply(id=reply.id, title=reply.title, description=reply.description)
    return Content(kind="interactive", platform_type=type_, text=reply.title, interactive=choice)


def _flow(type_: str, wire: WireFlowReply) -> Content:
    """A Flow's answers: ``response_json`` is a JSON object in a string; not one, it fails."""
    try:
        response = load_json(wire.response_json)
    except (ValueError, RecursionError):
        raise ValueError("nfm_reply.response_json is not JSON") from None
    if not isinstance(response, dict):
        raise ValueError("nfm_reply.response_json is not a JSON object")
    token = response.get("flow_token")
    flow = FlowReply(
        name=wire.name,
        body=wire.body,
        flow_token=token if isinstance(token, str) else None,
        response=response,
    )
    return Content(kind="flow", platform_type=f"{type_}.nfm_reply", text=None, flow=flow)


def _button(type_: str, raw: object) -> Content:
    wire = WireButton.model_validate(raw)
    payload = wire.payload or wire.text
    if payload is None:
        return Content(kind="unsupported", platform_type=type_)
    choice = InteractiveReply(id=payload, title=wire.text)
    return Content(kind="interactive", platform_type=type_, text=wire.text, interactive=choice)


def _reaction(type_: str, raw: object) -> Content:
    wire = WireReaction.model_validate(raw)
    reaction = Reaction(message_id=wire.message_id, emoji=wire.emoji or None)
    return Content(kind="reaction", platform_type=type_, reaction=reaction)


def _order(type_: str, raw: object) -> Content:
    wire = WireOrder.model_validate(raw)
    items = tuple(
        OrderItem(
            product_id=item.product_retailer_id,
            quantity=item.quantity,
            item_price=item.item_price,
            currency=item.currency,
        )
        for item in wire.product_items
    )
    order = Order(catalog_id=wire.catalog_id, items=items)
    return Content(kind="order", platform_type=type_, text=wire.text or None, order=order)


def _system(type_: str, raw: object) -> Content:
    wire = WireSystem.model_validate(raw)
    notice = SystemNotice(type=wire.type, body=wire.body, new_user_id=wire.wa_id or wire.user_id)
    return Content(kind="system", platform_type=type_, text=wire.body, system=notice)


_CONVERTERS: dict[str, Callable[[str, Any], Content]] = {
    "text": _text,
    "image": _media,
    "audio": _media,
    "video": _media,
    "document": _media,
    "sticker": _media,
    "location": _location,
    "contacts": _contacts,
    "interactive": _interactive,
    "button": _button,
    "reaction": _reaction,
    "order": _order,
    "system": _system,
}

# Types whose own object the parser validates (``_keys`` checks its container cheaply).
CONVERTED_TYPES: frozenset[str] = frozenset(_CONVERTERS)
