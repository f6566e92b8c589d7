"""Argument checks shared by the store's methods: each raises ValueError naming the field."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from ._ids import make_session_id, validate_session_id
from ._pipeline_types import PARKED_AT, PARKED_ERROR, OutboxIn
from ._rows import dump_json

MAX_LIST_LIMIT = 1000  # rows per page of a listing


SECRET_BYTES = 32
SECRET_NAME = re.compile(r"[a-z_]{1,64}")


def check_secret_name(name: object) -> str:
    """A secret's name: lowercase letters and ``_``, 1..64."""
    if not isinstance(name, str) or not SECRET_NAME.fullmatch(name):
        raise ValueError(f"name must be 1 to 64 lowercase letters or '_', got {name!r}")
    return name


MAX_STORED_INT = 2**63 - 1  # SQLite's INTEGER and PostgreSQL's BIGINT hold no more


def check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    """An int in ``low..high`` (bool refused), at most ``MAX_STORED_INT`` whatever ``high``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    if value > MAX_STORED_INT:
        raise ValueError(f"{name} must be at most {MAX_STORED_INT} (64 bits), got {value}")
    return value


def check_agent(name: object) -> str:
    """A non-empty agent name."""
    if not isinstance(name, str) or not name:
        raise ValueError("agent name must be a non-empty string")
    return name


def check_text(name: str, value: object) -> str:
    """A non-empty string with no NUL character (PostgreSQL's text holds none)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return check_no_nul(name, value)


def check_no_nul(name: str, value: str) -> str:
    """``value``, unless it holds a NUL character (U+0000), which PostgreSQL's text cannot."""
    if "\x00" in value:
        raise ValueError(f"{name} must not contain a NUL character (U+0000)")
    return value


def check_time(name: str, value: object) -> float:
    """A finite number of unix seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    return float(value)


def check_seconds(name: str, value: object) -> float:
    """A finite, positive number of seconds (a lease's or a claim's length)."""
    seconds = check_time(name, value)
    if not seconds > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return seconds


def check_ids(name: str, ids: Iterable[int]) -> tuple[int, ...]:
    """Distinct positive row ids in the given order; at least one."""
    if isinstance(ids, str | bytes):
        raise ValueError(f"{name} must be a sequence of row ids, not a string")
    distinct = tuple(dict.fromkeys(ids))
    if not distinct:
        raise ValueError(f"{name} must not be empty")
    for value in distinct:
        check_int(name, value, 1)
    return distinct


def json_object(name: str, value: dict[str, Any]) -> str:
    """``value`` as stored JSON text; ValueError naming the field if JSON cannot hold it."""
    try:
        return dump_json(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a JSON object: {exc}") from None


def session_values(
    channel: str,
    account: str,
    chat_id: str,
    active_agent: str,
    metadata: dict[str, Any] | None,
) -> dict[str, Any]:
    """The row of a new session, ready for ``_sql_sessions.insert_session``."""
    for name, part in (("channel", channel), ("account", account), ("chat_id", chat_id)):
        if not isinstance(part, str):
            raise ValueError(f"{name} must be a string, got {type(part).__name__}")
        check_no_nul(name, part)
    return {
        "session_id": make_session_id(channel, account, chat_id),
        "channel": channel,
        "account": account,
        "chat_id": chat_id,
        "active_agent": check_agent(active_agent),
        "metadata": dump_json(metadata or {}),
    }


def outbox_values(item: OutboxIn) -> dict[str, Any]:
    """The row of an outbox item, ready for ``_sql_outbox.insert``."""
    if not isinstance(item, OutboxIn):
        raise ValueError(f"expected an OutboxIn, got {type(item).__name__}")
    validate_session_id(item.session_id)
    return {
        "session_id": item.session_id,
        "channel": check_text("OutboxIn.channel", item.channel),
        "account": check_text("OutboxIn.account", item.account),
        "chat_id": check_text("OutboxIn.chat_id", item.chat_id),
        "payload": json_object("OutboxIn.payload", item.payload),
        "due": PARKED_AT if item.parked is True else None,  # None: now
        "error": PARKED_ERROR if item.parked is True else None,
    }
