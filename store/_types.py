"""Rows the store hands out: frozen, so no second copy of persistent state can drift."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

SessionStatus = Literal["idle", "running", "interrupted"]
SESSION_STATUSES: tuple[SessionStatus, ...] = ("idle", "running", "interrupted")
Role = Literal["system", "user", "assistant", "tool", "operator"]  # operator: a person's reply
ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool", "operator")
# A user message whose data has this key set to true (one written while a person, not a model,
# answered the session) does not start a turn: the turns kept in a model's context, and the
# store's ``recent_turns`` window, count it with the turn before it.
OUTSIDE_TURNS = "outside_turns"


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
class Waiting:
    """A session held by one of the agents asked about (``Store.waiting_sessions``)."""

    session: Session
    since: datetime  # when it was last handed to its active agent; its creation if never
    # Its head is a user message written while a person held it (OUTSIDE_TURNS): the user
    # wrote since the last answer, and waits for one.
    unanswered: bool


@dataclass(frozen=True, slots=True)
class AgentCount:
    """How many sessions one agent holds, and how many of them are ``Waiting.unanswered``."""

    agent: str
    sessions: int
    unanswered: int


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
    """One entry of a session's event log: ``seq`` is 1, 2, 3, ... per session.

    Kinds: ``message`` (in or out), ``agent_changed``, ``turn_started``, ``turn_finished``,
    ``turn_cancelled``, ``status`` (a delivery status), and notices such as ``send_failed``.
    """

    id: int
    session_id: str
    kind: str
    detail: dict[str, Any]
    created_at: datetime
    seq: int = 0


ATTACHMENT_STATES = ("ready", "pending", "failed")
ATTACHMENT_SOURCES = ("upload", "whatsapp", "telegram")


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file of one session; its bytes live at ``<media root>/<session_id>/<id>``."""

    id: str  # 32 hex digits, made by the gateway; never the client's file name
    session_id: str
    name: str  # the cleaned original file name, metadata only
    content_type: str
    size: int  # bytes stored (0 while pending or after a failure)
    state: str  # ready / pending (a platform download under way) / failed
    source: str  # upload / whatsapp / telegram
    message_key: str | None  # dedup key of the inbound message it came with
    error: str | None
    created_at: datetime
    media_ref: dict[str, Any] = field(default_factory=dict)  # where a platform file comes from
