"""Turn one webhook POST body into events: every entry, change, message and status.

A body that is not the platform's envelope raises ``ChannelError``; a part that fails among good
ones becomes a reason in ``ParseResult.failures`` and the good parts are kept.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from pydantic import ValidationError

from .._errors import ChannelError
from .._json import load_json
from .._model import (
    DeliveryState,
    DeliveryStatus,
    InboundEvent,
    InboundMessage,
    ParseResult,
    PlatformError,
    Referral,
    ReferredProduct,
    TemplateUpdate,
)
from ._content import content
from ._wire import (
    WireContact,
    WireContext,
    WireError,
    WireMessage,
    WireReferral,
    WireStatus,
    WireTemplateUpdate,
)

CHANNEL = "whatsapp"
ENVELOPE_OBJECT = "whatsapp_business_account"
_STATES: dict[str, DeliveryState] = {
    "sent": "sent",
    "delivered": "delivered",
    "read": "read",
    "failed": "failed",
}
TEMPLATE_FIELDS = frozenset({"message_template_status_update", "message_template_quality_update"})
_MAX_TIMESTAMP = 253_402_300_799  # 9999-12-31T23:59:59Z
_MAX_REASON = 300


class _Bad(ValueError):
    """A part of the delivery that cannot become an event."""


@dataclass(slots=True)
class _Result:
    events: list[InboundEvent] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


def parse_delivery(body: bytes) -> ParseResult:
    """Parse a webhook body; raise ChannelError only when the body as a whole is unusable."""
    entries = _entries(_load(body))
    result = _Result()
    for i, entry in enumerate(entries):
        _entry(entry, f"entry[{i}]", result)
    return ParseResult(
        events=tuple(result.events),
        failures=tuple(result.failures),
        ignored=tuple(result.ignored),
    )


def _load(body: bytes) -> object:
    try:
        return load_json(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ChannelError(CHANNEL, "body is not JSON") from exc


def _entries(root: object) -> list[Any]:
    if not isinstance(root, dict):
        raise ChannelError(CHANNEL, "body is not a JSON object")
    if root.get("object") != ENVELOPE_OBJECT:
        raise ChannelError(CHANNEL, f'"object" is not "{ENVELOPE_OBJECT}"')
    entries = root.get("entry")
    if not isinstance(entries, list):
        raise ChannelError(CHANNEL, '"entry" is not a list')
    return entries


def _entry(entry: object, where: str, result: _Result) -> None:
    changes = entry.get("changes") if isinstance(entry, dict) else None
    if not isinstance(changes, list):
        result.failures.append(f"{where}: not an object with a changes list")
        return
    waba = entry.get("id") if isinstance(entry, dict) else None
    for j, change in enumerate(changes):
        _change(change, f"{where}.changes[{j}]", result, waba if isinstance(waba, str) else "")


def _change(change: object, where: str, result: _Result, waba: str) -> None:
    if not isinstance(change, dict):
        result.failures.append(f"{where}: not an object")
        return
    name = change.get("field")
    if isinstance(name, str) and name in TEMPLATE_FIELDS:
        _guard(where, change.get("value"), result, partial(_template, field=name, waba=waba))
        return
    if name != "messages":
        result.failures.append(unhandled_field(where, name))
        return
    value = change.get("value")
    metadata = value.get("metadata") if isinstance(value, dict) else None
    account = metadata.get("phone_number_id") if isinstance(metadata, dict) else None
    if not isinstance(value, dict) or not isinstance(account, str) or not account:
        result.failures.append(f"{where}: no value.metadata.phone_number_id")
        return
    _value(value, account, f"{where}.value", result)


def _value(value: dict[str, Any], account: str, where: str, result: _Result) -> None:
    errors = _platform_errors(value.get("errors"))
    contacts = _contacts(value.get("contacts"))
    before = len(result.events)
    message = partial(_message, account=account, contacts=contacts, value_errors=errors)
    status = partial(_status, account=account, value_errors=errors, result=result)
    for j, raw in _items(value, "messages", where, result):
        _guard(f"{where}.messages[{j}]", raw, result, message)
    for j, raw in _items(value, "statuses", where, result):
        _guard(f"{where}.statuses[{j}]", raw, result, status)
    if errors and len(result.events) == before:
        summary = "; ".join(_describe(error) for error in errors)
        result.failures.append(_short_reason(f"{where}: platform errors for {account}: {summary}"))


def _items(
    value: dict[str, Any], key: str, where: str, result: _Result
) -> Sequence[tuple[int, object]]:
    items = value.get(key)
    if items is None:
        return ()
    if not isinstance(items, list):
        result.failures.append(f"{where}.{key}: not a list")
        return ()
    return list(enumerate(items))


def _guard(
    where: str, raw: object, result: _Result, build: Callable[[object], InboundEvent | None]
) -> None:
    try:
        event = build(raw)
    except ValidationError as exc:
        result.failures.append(_short_reason(f"{where}{_wamid(raw)}: {_validation_reason(exc)}"))
    except (ValueError, TypeError, OverflowError) as exc:
        result.failures.append(_short_reason(f"{where}{_wamid(raw)}: {exc}"))
    else:
        if event is not None:
            result.events.append(event)


def _message(
    raw: object,
    account: str,
    contacts: _Contacts,
    value_errors: tuple[PlatformError, ...],
) -> InboundMessage:
    if not isinstance(raw, dict):
        raise _Bad("not an object")
    wire = WireMessage.model_validate(raw)
    contact = _contact_for(contacts, wire.from_, wire.from_user_id)
    sender = _sender(wire, contact)
    user_id = wire.from_user_id or (contact.user_id if contact else None)
    try:
        body = content(wire.type, raw.get(wire.type))
    except ValidationError as exc:
        raise _Bad(f"{_short(wire.type)}: {_validation_reason(exc)}") from exc
    return InboundMessage(
        channel=CHANNEL,
        account=account,
        chat_id=sender,
        sender_id=sender,
        sender_name=contact.profile.name if contact and contact.profile else None,
        sender_user_id=user_id if user_id != sender else None,
        message_id=wire.id,
        dedup_key=f"{CHANNEL}:{wire.id}",
        timestamp=_timestamp(wire.timestamp),
        kind=body.kind,
        text=body.text,
        media=body.media,
        location=body.location,
        contacts=body.contacts,
        interactive=body.interactive,
        flow=body.flow,
        reaction=body.reaction,
        order=body.order,
        system=body.system,
        referral=_referral(wire.referral),
        referred_product=_referred_product(wire.context),
        reply_to=wire.context.id if wire.context else None,
        platform_type=body.platform_type,
        errors=value_errors + _platform_errors(raw.get("errors")),
    )


def _referral(wire: WireReferral | None) -> Referral | None:
    if wire is None:
        return None
    fields = wire.model_dump(exclude={"welcome_message"})
    welcome = wire.welcome_message.text if wire.welcome_message else None
    return Referral(**fields, welcome_message=welcome)


def _referred_product(context: WireContext | None) -> ReferredProduct | None:
    product = context.referred_product if context else None
    if product is None:
        return None
    return ReferredProduct(product_id=product.product_retailer_id, catalog_id=product.catalog_id)


def _sender(wire: WireMessage, contact: WireContact | None) -> str:
    candidates = [wire.from_, wire.from_user_id]
    if contact is not None:
        candidates += [contact.wa_id, contact.user_id]
    sender = next((c for c in candidates if c), None)
    if sender is None:
        raise _Bad("no sender: from, from_user_id and contacts are all missing")
    return sender


def _status(
    raw: object,
    account: str,
    value_errors: tuple[PlatformError, ...],
    result: _Result,
) -> DeliveryStatus | None:
    if not isinstance(raw, dict):
        raise _Bad("not an object")
    wire = WireStatus.model_validate(raw)
    state = _STATES.get(wire.status)
    if state is None:
        result.ignored.append(f"status:{_short(wire.status)}")
        return None
    recipient = wire.recipient_id or wire.recipient_user_id
    if not recipient:
        raise _Bad("no recipient_id or recipient_user_id")
    return DeliveryStatus(
        channel=CHANNEL,
        account=account,
        chat_id=recipient,
        message_id=wire.id,
        dedup_key=f"{CHANNEL}:{wire.id}:{wire.status}",
        timestamp=_timestamp(wire.timestamp),
        state=state,
        errors=value_errors + _platform_errors(raw.get("errors")),
    )


def template_key(field: str, value: dict[str, Any]) -> str:
    """A template update's dedup key: Meta gives it no id, so its content names it."""
    digest = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:32]
    return f"{CHANNEL}:{field}:{digest}"


def _template(raw: object, field: str, waba: str) -> TemplateUpdate:
    if not isinstance(raw, dict):
        raise _Bad("value is not an object")
    wire = WireTemplateUpdate.model_validate(raw)
    template_id = wire.message_template_id
    return TemplateUpdate(
        channel=CHANNEL,
        account=waba,
        dedup_key=template_key(field, raw),
        field=field,
        template_id=str(template_id) if template_id is not None else None,
        name=wire.message_template_name,
        language=wire.message_template_language,
        event=wire.event,
        reason=wire.reason,
        previous_quality=wire.previous_quality_score,
        new_quality=wire.new_quality_score,
    )


@dataclass(frozen=True, slots=True)
class _Contacts:
    """``value.contacts``, indexed: a batch of 1,000 messages must not scan 1,000 contacts each."""

    items: tuple[WireContact, ...] = ()
    by_wa_id: dict[str, WireContact] = field(default_factory=dict)
    by_user_id: dict[str, WireContact] = field(default_factory=dict)


def _contacts(raw: object) -> _Contacts:
    if not isinstance(raw, list):
        return _Contacts()
    items = []
    for item in raw:
        try:
            items.append(WireContact.model_validate(item))
        except ValidationError:
            continue  # a contact only adds a name; the message still has its own sender ids
    by_wa_id = {c.wa_id: c for c in reversed(items) if c.wa_id}
    by_user_id = {c.user_id: c for c in reversed(items) if c.user_id}
    return _Contacts(tuple(items), by_wa_id, by_user_id)


def _contact_for(contacts: _Contacts, from_: str | None, user_id: str | None) -> WireContact | None:
    """The contact that names this message's sender; the only one, if it does not contradict."""
    candidates = [
        contacts.by_wa_id.get(from_) if from_ else None,
        contacts.by_user_id.get(user_id) if user_id else None,
        contacts.items[0] if len(contacts.items) == 1 else None,
    ]
    return next((c for c in candidates if c and _agrees(c, from_, user_id)), None)


def _agrees(contact: WireContact, from_: str | None, user_id: str | None) -> bool:
    wa_differs = bool(contact.wa_id and from_ and contact.wa_id != from_)
    user_differs = bool(contact.user_id and user_id and contact.user_id != user_id)
    return not (wa_differs or user_differs)


def _platform_errors(raw: object) -> tuple[PlatformError, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(_platform_error(item) for item in raw)


def _platform_error(raw: object) -> PlatformError:
    try:
        wire = WireError.model_validate(raw)
    except ValidationError:
        return PlatformError(title="unreadable error entry")
    details = wire.error_data.details if wire.error_data else None
    return PlatformError(code=wire.code, title=wire.title, message=wire.message, details=details)


def _timestamp(raw: str | int) -> datetime:
    try:
        seconds = int(raw)
    except ValueError:
        raise _Bad("timestamp is not a number of seconds") from None
    if not 0 <= seconds <= _MAX_TIMESTAMP:
        raise _Bad("timestamp out of range")
    return datetime.fromtimestamp(seconds, tz=UTC)


def _describe(error: PlatformError) -> str:
    text = " ".join(str(part) for part in (error.code, error.title) if part is not None)
    return f"{text} ({error.details})" if error.details else text


def _validation_reason(exc: ValidationError) -> str:
    """Field paths and messages only: the input values may be user content."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        location = ".".join(str(part) for part in error["loc"]) or "object"
        parts.append(f"{location}: {error['msg']}")
    return "; ".join(parts)


def _wamid(raw: object) -> str:
    wamid = raw.get("id") if isinstance(raw, dict) else None
    return f" ({_short(wamid)})" if isinstance(wamid, str) and wamid else ""


def unhandled_field(where: str, name: object) -> str:
    """The reason a change of a webhook field the gateway does not handle is quarantined (a
    field subscribed in the app's dashboard beside ``messages``): kept whole, replayable once a
    release handles it, never dropped unseen."""
    return f"{where}: field {_short(name)} is not handled"


def _short(value: object, limit: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short_reason(reason: str) -> str:
    return _short(reason, _MAX_REASON)
