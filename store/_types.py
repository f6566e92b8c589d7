"""Rows the store hands out: frozen, so no second copy of persistent state can drift."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

SessionStatus = Literal["idle", "running", "interrupted"]
SESSION_STATUSES: tuple[SessionStatus, ...] = ("idle", "running", "interrupted")
Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")


@dataclass(frozen=True, slots=True)
class Session:
    session_id: str
    channel: str
    account: str
    chat_id: str
    active_agent: str
    status: SessionStatus
    head_id: int | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Message:
    """One node of a session's history DAG; ``parent_id`` is None only for a root."""

    id: int
    session_id: str
    parent_id: int | None
    role: Role
    text: str | None
    agent: str | None
    data: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message a turn will append when it commits. ``data`` carries tool calls and the like."""

    role: Role
    text: str | None
    agent: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SessionEvent:
    """Something that happened to a session that is not a message (e.g. an agent fallback)."""

    id: int
    session_id: str
    kind: str
    detail: dict[str, Any]
    created_at: datetime
