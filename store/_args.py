"""The argument checks and row shaping of the store's public methods, for both backends.

Each function takes a method's arguments, raises ValueError naming the field at fault (before
any I/O), and returns what the backend's transaction needs. A backend's method is then "check
the arguments here, run the transaction there".
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from ._checks import (
    MAX_LIST_LIMIT,
    check_agent,
    check_ids,
    check_int,
    check_no_nul,
    check_text,
    check_time,
)
from ._ids import validate_session_id
from ._pipeline_types import OUTBOX_FAILED_STATES, DeliveryIn, QuarantineIn
from ._rows import dump_json
from ._types import ATTACHMENT_SOURCES, ATTACHMENT_STATES, ROLES, SESSION_STATUSES

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

DEFAULT_DEDUP_TTL_HOURS = 192.0
MAX_NAME = 255  # characters of an attachment's name

Filters = dict[str, str]  # column -> required value


def check_ttl(hours: float) -> float:
    """``dedup_ttl_hours`` in seconds."""
    if isinstance(hours, bool) or not isinstance(hours, int | float) or not hours > 0:
        raise ValueError(f"dedup_ttl_hours must be a positive number, got {hours!r}")
    return float(hours) * 3600.0


def check_page(limit: int, offset: int) -> None:
    check_int("limit", limit, 1, MAX_LIST_LIMIT)
    check_int("offset", offset, 0)


async def in_chunks(delete_chunk: Callable[[], Awaitable[int]], chunk_size: int) -> int:
    """Run ``delete_chunk`` (one transaction each) until it deletes fewer than ``chunk_size``
    rows; the total deleted."""
    total = 0
    while True:
        deleted = await delete_chunk()
        total += deleted
        if deleted < chunk_size:
            return total


# sessions and history


def session_filters(
    channel: str | None, status: str | None, agent: str | None, search: str | None
) -> Filters:
    """The column filters of ``list_sessions`` and ``count_sessions`` (``search`` is checked
    only: a NUL character, which PostgreSQL's text cannot hold, is refused on both backends)."""
    if status is not None and status not in SESSION_STATUSES:
        raise ValueError(f"status must be one of {SESSION_STATUSES}, got {status!r}")
    for name, value in (("channel", channel), ("agent", agent), ("search", search)):
        if isinstance(value, str) and "\x00" in value:
            raise ValueError(f"{name} must not contain a NUL character")
    pairs = {"channel": channel, "status": status, "active_agent": agent}
    return {column: value for column, value in pairs.items() if value is not None}


def check_agent_names(name: str, agents: Iterable[str]) -> tuple[str, ...]:
    """Agent names given as a filter (``waiting_sessions``, ``agent_counts``): strings with no
    NUL character, each once, in the order given."""
    return _names(name, agents, "agent")


def channel_names(name: str, channels: Iterable[str]) -> tuple[str, ...]:
    """Channel names given as a filter (``outbox_schedule``): likewise."""
    return _names(name, channels, "channel")


def _names(name: str, values: Iterable[str], what: str) -> tuple[str, ...]:
    if isinstance(values, str):
        raise ValueError(f"{name} must be a collection of {what} names, not a string")
    names = tuple(dict.fromkeys(values))
    for value in names:
        if not isinstance(value, str):
            raise ValueError(f"{name} must hold {what} names (strings), got {value!r}")
        check_no_nul(name, value)
    return names


def check_session_update(
    session_id: str, active_agent: str | None, metadata: dict[str, Any] | None
) -> None:
    validate_session_id(session_id)
    if active_agent is not None:
        check_agent(active_agent)
    if metadata is not None:
        dump_json(metadata)


def check_branch(session_id: str, head_id: int | None) -> None:
    validate_session_id(session_id)
    if head_id is not None:
        check_int("head_id", head_id, 1)


def storable_text(text: str) -> str:
    """``text`` with each NUL character (U+0000), which ``message_text`` refuses, and each lone
    surrogate (a JSON escape such as ``\\ud800``), which no UTF-8 text holds, as U+FFFD: for
    text from outside (a user, a model, a tool, a platform's id) that must not fail its turn,
    or its delivery's commit, on one."""
    return _UNSTORABLE.sub("\ufffd", text)


def outside_text(name: str, value: object) -> str:
    """Text a platform or a model gave (an error, a reason, a platform's id), as stored: a
    non-empty string, each NUL character as U+FFFD. PostgreSQL's text holds no NUL, and a
    refusal would leave a failure unrecorded, a reply pending to be sent again, or a delivery
    unacknowledged."""
    return check_text(name, storable_text(value) if isinstance(value, str) else value)


def message_text(text: str | None) -> str | None:
    """A message's text as both backends can store it: ValueError for a NUL character, which
    PostgreSQL's text cannot hold (SQLite could, and the two must not differ)."""
    if text is not None:
        check_no_nul("text", text)
    return text


def message_row(
    session_id: str,
    role: str,
    text: str | None,
    agent: str | None,
    data: dict[str, Any] | None,
    now: float,
) -> dict[str, Any]:
    """The row of ``append_message``."""
    validate_session_id(session_id)
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    return {
        "role": role,
        "text": message_text(text),
        "agent": agent,
        "data": dump_json(data or {}),
        "created_at": now,
    }


def event_detail(session_id: str, kind: str, detail: dict[str, Any] | None) -> str:
    """The detail of ``record_event``, as stored JSON text."""
    validate_session_id(session_id)
    if not isinstance(kind, str) or not kind:
        raise ValueError("event kind must be a non-empty string")
    return dump_json(detail or {})


def events_limit(session_id: str, after: int, limit: int | None) -> int:
    """The checked page of ``list_events``: its limit as the SQL takes it (-1: all)."""
    validate_session_id(session_id)
    check_int("after", after, 0)
    if limit is not None:
        check_int("limit", limit, 1, MAX_LIST_LIMIT)
    return limit or -1


def check_handoff(session_id: str, agent: str, reason: str) -> str:
    """The arguments of ``set_agent``: the reason as stored (a model may have written it)."""
    validate_session_id(session_id)
    check_agent(agent)
    return outside_text("reason", reason)


def turn_batch(
    session_id: str, recent_turns: int | None, inbox_ids: Sequence[int]
) -> tuple[int, ...]:
    """The checked arguments of ``turn``: the inbox rows it answers, none or distinct ids."""
    validate_session_id(session_id)
    if recent_turns is not None:
        check_int("recent_turns", recent_turns, 1)
    if isinstance(inbox_ids, str | bytes) or len(inbox_ids):
        return check_ids("inbox_ids", inbox_ids)
    return ()


def dedup_keys(keys: Iterable[str]) -> list[str]:
    """The distinct keys of ``claim``, in order."""
    if isinstance(keys, str | bytes):
        raise ValueError("claim() takes an iterable of keys, not one string")
    for key in keys:
        if not isinstance(key, str) or not key:
            raise ValueError(f"dedup keys must be non-empty strings, got {key!r}")
    return list(dict.fromkeys(outside_text("dedup keys", key) for key in keys))


# pipeline


def ingest_item(item: object) -> DeliveryIn | QuarantineIn:
    """An item of ``ingest`` checked, as stored: a quarantine's reason (which may quote the
    body) and a delivery's keys (the platform's message ids) as ``outside_text`` makes them.
    A refusal here would fail every delivery of the group commit with a 503."""
    if isinstance(item, QuarantineIn):
        reason = outside_text("QuarantineIn.reason", item.reason)
        if reason != item.reason:
            item = replace(item, reason=reason)
    elif isinstance(item, DeliveryIn):
        if not isinstance(item.keys, tuple) or not item.keys:
            raise ValueError("DeliveryIn.keys must be a non-empty tuple of dedup keys")
        keys = tuple(outside_text("DeliveryIn.keys", key) for key in item.keys)
        if keys != item.keys:
            item = replace(item, keys=keys)
    else:
        raise ValueError(f"ingest takes DeliveryIn and QuarantineIn, got {type(item).__name__}")
    check_text(f"{type(item).__name__}.channel", item.channel)
    if item.account is not None:
        check_text(f"{type(item).__name__}.account", item.account)
    if not isinstance(item.body, bytes):
        raise ValueError(f"{type(item).__name__}.body must be bytes")
    return item


def check_inbox_failure(
    ids: Sequence[int], error: str, next_attempt_at: float, dead: bool
) -> tuple[tuple[int, ...], str, float]:
    """The arguments of ``fail_inbox``: the ids, the error as stored and the retry time."""
    checked = check_ids("ids", ids)
    stored = outside_text("error", error)
    retry_at = check_time("next_attempt_at", next_attempt_at)
    if not isinstance(dead, bool):
        raise ValueError(f"dead must be a bool, got {type(dead).__name__}")
    return checked, stored, retry_at


def platform_ids(values: Sequence[str]) -> list[str]:
    """The platform's ids of what was sent of an outbox row."""
    if isinstance(values, str | bytes):
        raise ValueError("platform_ids must be a sequence of ids, not one string")
    # From the platform's answer to a send already made: stored as error texts are (a refusal
    # would leave the row pending, to be sent again).
    return [outside_text("platform_ids", value) for value in values]


def check_outbox_failed(outbox_id: int, error: str, state: str) -> str:
    """The arguments of ``outbox_failed``: the error as stored."""
    check_int("outbox_id", outbox_id, 1)
    stored = outside_text("error", error)
    if state not in OUTBOX_FAILED_STATES:
        raise ValueError(f"state must be one of {OUTBOX_FAILED_STATES}, got {state!r}")
    return stored


def finished_cutoff(older_than_seconds: float, chunk_size: int, now: float) -> float:
    """The arguments of ``purge_finished``: rows older than the cutoff returned go."""
    age = check_time("older_than_seconds", older_than_seconds)
    if age < 0:
        raise ValueError(f"older_than_seconds must not be negative, got {age}")
    check_int("chunk_size", chunk_size, 1)
    return now - age


# attachments


def attachment_id(value: object) -> str:
    if not isinstance(value, str) or len(value) != 32:
        raise ValueError("attachment id must be 32 hex digits")
    try:
        int(value, 16)
    except ValueError:
        raise ValueError("attachment id must be 32 hex digits") from None
    return value


def choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return str(value)


def attachment_row(
    session_id: str,
    *,
    name: str,
    content_type: str,
    source: str,
    size: int,
    state: str,
    message_key: str | None,
    media_ref: dict[str, Any] | None,
    attachment_id_: str | None,
) -> dict[str, Any]:
    """The row of ``create_attachment`` (a new id unless the caller made one)."""
    validate_session_id(session_id)
    if not isinstance(name, str) or len(name) > MAX_NAME:
        raise ValueError(f"name must be a string of at most {MAX_NAME} characters")
    return {
        "id": uuid.uuid4().hex if attachment_id_ is None else attachment_id(attachment_id_),
        "session_id": session_id,
        "name": name,
        "content_type": check_text("content_type", content_type),
        "size": check_int("size", size, 0),
        "state": choice("state", state, ATTACHMENT_STATES),
        "source": choice("source", source, ATTACHMENT_SOURCES),
        "message_key": message_key,
        "media_ref": dump_json(media_ref or {}),
    }


def check_download_end(attachment_id_: str, state: str, size: int, error: str | None) -> str | None:
    """The arguments of ``finish_attachment``: the error as stored."""
    attachment_id(attachment_id_)
    choice("state", state, ("ready", "failed"))
    check_int("size", size, 0)
    return None if error is None else outside_text("error", error)
