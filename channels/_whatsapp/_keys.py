"""The dedup keys of one delivery, cheaply: ``json.loads`` and a walk, no pydantic.

This runs before the 200, so it must stay lean. It mirrors the checks of ``_parse`` that decide
whether a part becomes an event (ids, timestamps, senders, known states), so a part the parser
would drop claims no key and can still be recorded when its delivery is replayed. A part that
passes here but fails the parser's deeper validation still claims its key; the intake then
quarantines the delivery with the reason.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from .._errors import ChannelError
from ._content import CONVERTED_TYPES
from ._parse import (
    _MAX_TIMESTAMP,
    _STATES,
    CHANNEL,
    ENVELOPE_OBJECT,
    TEMPLATE_FIELDS,
    _load,
    template_key,
    unhandled_field,
)


def delivery_keys(body: bytes, accounts: Collection[str]) -> list[str]:
    """The keys of the parts ``parse_delivery`` would turn into events, for ``accounts`` only.

    Raises ChannelError when the body is not the envelope, or when nothing in it is usable but
    some part is broken (so that the delivery is quarantined rather than dropped).
    """
    root = _load(body)
    if not isinstance(root, dict) or root.get("object") != ENVELOPE_OBJECT:
        raise ChannelError(CHANNEL, f'not a JSON object with "object": "{ENVELOPE_OBJECT}"')
    entries = root.get("entry")
    if not isinstance(entries, list):
        raise ChannelError(CHANNEL, '"entry" is not a list')
    walk = _Walk(accounts)
    for entry in entries:
        walk.entry(entry)
    if not walk.keys and walk.broken:
        raise ChannelError(CHANNEL, f"no usable part: {walk.broken[0]}")
    return list(dict.fromkeys(walk.keys))


class _Walk:
    __slots__ = ("accounts", "broken", "keys")

    def __init__(self, accounts: Collection[str]) -> None:
        self.accounts = accounts
        self.keys: list[str] = []
        self.broken: list[str] = []

    def entry(self, entry: object) -> None:
        changes = entry.get("changes") if isinstance(entry, dict) else None
        if not isinstance(changes, list):
            self.broken.append("an entry without a changes list")
            return
        for change in changes:
            self.change(change)

    def change(self, change: object) -> None:
        if not isinstance(change, dict):
            self.broken.append("a change that is not an object")
            return
        field, value = change.get("field"), change.get("value")
        if isinstance(field, str) and field in TEMPLATE_FIELDS:  # the account's, not a number's
            self.add(template_key(field, value) if isinstance(value, dict) else None, field)
            return
        if field != "messages":
            self.broken.append(unhandled_field("a change", field))
            return
        metadata = value.get("metadata") if isinstance(value, dict) else None
        account = metadata.get("phone_number_id") if isinstance(metadata, dict) else None
        if not isinstance(value, dict) or not isinstance(account, str) or not account:
            self.broken.append("a value without metadata.phone_number_id")
            return
        if account in self.accounts:
            self.value(value)

    def value(self, value: dict[str, Any]) -> None:
        before = len(self.keys)
        contacts = value.get("contacts")
        has_contact = isinstance(contacts, list) and bool(contacts)
        for raw in _items(value, "messages", self.broken):
            self.add(_message_key(raw, has_contact), "message")
        for raw in _items(value, "statuses", self.broken):
            self.add(_status_key(raw), "status")
        errors = value.get("errors")
        if isinstance(errors, list) and errors and len(self.keys) == before:
            self.broken.append("platform errors and no event")

    def add(self, key: str | None, what: str) -> None:
        if key is None:
            self.broken.append(f"a broken {what}")
        elif key:
            self.keys.append(key)


def _items(value: dict[str, Any], name: str, broken: list[str]) -> list[Any]:
    items = value.get(name)
    if items is None:
        return []
    if not isinstance(items, list):
        broken.append(f"{name} is not a list")
        return []
    return items


def _message_key(raw: object, has_contact: bool) -> str | None:
    """The message's key, or None where the parser would report it as a failure."""
    if not isinstance(raw, dict):
        return None
    wamid, kind = raw.get("id"), raw.get("type")
    if not _nonempty(wamid) or not _nonempty(kind) or not _timestamp_ok(raw.get("timestamp")):
        return None
    sender = _nonempty(raw.get("from")) or _nonempty(raw.get("from_user_id")) or has_contact
    if not sender or not _content_shape_ok(kind, raw.get(kind)):
        return None
    return f"{CHANNEL}:{wamid}"


def _status_key(raw: object) -> str | None:
    """The status's key, "" for a state the parser ignores, None where it would fail."""
    if not isinstance(raw, dict):
        return None
    wamid, state = raw.get("id"), raw.get("status")
    if (
        not _nonempty(wamid)
        or not isinstance(state, str)
        or not _timestamp_ok(raw.get("timestamp"))
    ):
        return None
    if state not in _STATES:
        return ""
    recipient = _nonempty(raw.get("recipient_id")) or _nonempty(raw.get("recipient_user_id"))
    return f"{CHANNEL}:{wamid}:{state}" if recipient else None


def _nonempty(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _timestamp_ok(raw: object) -> bool:
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        return False
    try:
        seconds = int(raw)
    except ValueError:
        return False
    return 0 <= seconds <= _MAX_TIMESTAMP


def _content_shape_ok(kind: object, raw: object) -> bool:
    # The parser validates the type's own object; a wrong container type is the cheap part of that.
    if kind not in CONVERTED_TYPES or raw is None:
        return True
    return isinstance(raw, list) if kind == "contacts" else isinstance(raw, dict)
