"""The bodies of /api/* and /web/* as pydantic models.

Handlers validate their input and serialize every answer through these models, and
/api/openapi.json is generated from the same models, so the document and the answers cannot
drift. Inputs are strict (unknown fields refused; a JSON body's values must have their JSON
type: ``_admin.json_body``); outputs are open: the surface may grow.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import PydanticCustomError

from webhook_bot_gateway.store import (
    PARKED_ERROR,
    Message,
    OutboxItem,
    QuarantineItem,
    Session,
)

OPERATOR = "operator"  # the agent name of an operator's messages
MAX_ROW_ID = 2**63 - 1  # the largest id (and offset) SQLite and PostgreSQL can hold
MAX_JSON_DEPTH = 32  # arrays and objects within each other in a body; none needs half of it
SESSION_ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"  # store.validate_session_id
NUL = "\x00"  # no input string may hold it (_Input)
# A page of every listing, here and in the CLI's `sessions list` and `quarantine list`, which
# read the store directly (its own bound, store.MAX_LIST_LIMIT, is wider): one range for both.
DEFAULT_PAGE = 50
MAX_PAGE = 500
MAX_SEARCH = 128  # characters of `q` (GET /api/sessions) and of `sessions list --search`

Status = Literal["idle", "running", "interrupted"]  # store.SESSION_STATUSES
Channel = Literal["telegram", "whatsapp", "web"]  # channels.ADAPTERS
ShownRole = Literal["system", "user", "assistant", "operator", "tool"]
Timestamp = Annotated[  # ISO 8601 with its offset, as datetime.isoformat() writes it
    datetime,
    PlainSerializer(lambda value: value.isoformat(), return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}, mode="serialization"),
]
RowId = Annotated[int, Field(ge=1, le=MAX_ROW_ID)]


class _Input(BaseModel):
    """A query or a JSON body: unknown fields refused, and no NUL character in any string."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_nul(cls, value: object) -> object:
        """PostgreSQL's text cannot hold a NUL (U+0000) and SQLite's LIKE ends its pattern at
        one (``q=%00`` matched every session): refused here, before any store query."""
        if isinstance(value, str) and NUL in value:
            raise PydanticCustomError("nul_character", "must not hold a NUL character")
        for index, item in enumerate(value if isinstance(value, list) else ()):
            if isinstance(item, str) and NUL in item:
                message = "must not hold a NUL character"
                raise PydanticCustomError("nul_character", message, {"index": index})
        return value


class _Output(BaseModel):
    model_config = ConfigDict(frozen=True, from_attributes=True)


# errors


class ErrorDetail(_Output):
    code: str = Field(description="snake_case reason, stable across versions")
    message: str
    field: str | None = Field(default=None, description="the request field at fault, if any")


class ErrorBody(_Output):
    """Every refusal: ``{"error": {"code", "message", "field"?}}``."""

    error: ErrorDetail

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


# queries and request bodies


def _digits(value: object) -> object:
    """A query's number is written in digits: Python's int() would also read "1_0", "+5" and
    " 5 ", which no client means and a typo may produce."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise PydanticCustomError("int_digits", "must be a whole number written in digits")
    return value


QueryInt = Annotated[int, BeforeValidator(_digits)]


def _true_or_false(value: object) -> object:
    """A query's flag is ``true`` or ``false``: pydantic would also read "1", "on", "yes"."""
    if isinstance(value, str) and value not in ("true", "false"):
        raise PydanticCustomError("bool_word", "must be true or false")
    return value


QueryBool = Annotated[bool, BeforeValidator(_true_or_false)]


class PageQuery(_Input):
    limit: QueryInt = Field(default=DEFAULT_PAGE, ge=1, le=MAX_PAGE)
    offset: QueryInt = Field(default=0, ge=0, le=MAX_ROW_ID)


class QuarantineQuery(PageQuery):
    pending: QueryBool = Field(default=False, description="true: only rows not replayed yet")


class SessionsQuery(PageQuery):
    channel: Channel | None = None
    status: Status | None = None
    agent: str | None = None
    q: str | None = Field(
        default=None,
        max_length=MAX_SEARCH,
        description="a substring of the chat id or the session id, case-insensitive"
        " (on SQLite for ASCII letters only)",
    )


class EventsQuery(_Input):
    after: QueryInt = Field(default=0, ge=0, le=MAX_ROW_ID, description="events with a larger seq")
    limit: QueryInt = Field(default=100, ge=1, le=MAX_PAGE)


def not_blank(text: str) -> str:
    """Refuse a text that is only whitespace: the channels strip what they send, so it would be
    stored and queued, then fail at the platform with nothing to send."""
    if not text.strip():
        raise PydanticCustomError("blank", "must not be empty or only whitespace")
    return text


NotBlank = AfterValidator(not_blank)
# No NUL character (U+0000): _Input refuses one in every string; the pattern tells the schema.
MessageText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=32_768,
        pattern=r"^[^\x00]*$",
        description="what the user reads; not only whitespace",
    ),
    NotBlank,
]
Name = Annotated[str, Field(min_length=1, max_length=64), NotBlank]


class ReplyBody(_Input):
    text: MessageText
    operator: Name | None = Field(default=None, description="the replying person's name")


class TemplateBody(_Input):
    name: str = Field(min_length=1, max_length=512, description="a [[whatsapp.templates]] name")
    language: str = Field(min_length=1, max_length=32, description="its language code, e.g. en_US")
    parameters: list[Annotated[str, Field(min_length=1, max_length=1024)]] = Field(
        default_factory=list,
        max_length=100,
        description="the body's parameters in order, as many as the template declares; none"
        " only whitespace, none with a line break, a tab or more than 4 spaces in a row"
        " (WhatsApp refuses them: error 132018)",
    )
    operator: Name | None = Field(default=None, description="the sending person's name")


class HandoffBody(_Input):
    agent: str = Field(min_length=1, max_length=64)


class RewindBody(_Input):
    message_id: RowId = Field(description="a message of the current branch; it becomes HEAD")


# answers


class SessionOut(_Output):
    """A session."""

    session_id: str
    channel: str
    account: str
    chat_id: str
    active_agent: str
    status: Status
    head_id: int | None
    metadata: dict[str, Any]
    created_at: Timestamp
    updated_at: Timestamp


class SessionDetail(SessionOut):
    """A session, with what only its own page shows."""

    parked_replies: int = Field(
        description="replies kept unsent while the user has blocked the bot or cannot be"
        " reached (metadata.blocked); sent once the user is back",
    )

    @classmethod
    def of(cls, session: Session, outbox: Sequence[OutboxItem]) -> SessionDetail:
        """The session with the count of its parked rows among ``outbox`` (its rows)."""
        parked = sum(1 for row in outbox if row.state == "pending" and row.error == PARKED_ERROR)
        shown = SessionOut.model_validate(session, from_attributes=True)
        return cls(**shown.model_dump(), parked_replies=parked)


class SessionsPage(_Output):
    """A page of sessions and the number of every match."""

    sessions: list[SessionOut]
    total: int = Field(description="every match, not only this page")


class MessageOut(_Output):
    """One message of the history."""

    id: int
    parent_id: int | None
    role: ShownRole = Field(description="operator: a person's reply (admin API, console)")
    text: str | None
    agent: str | None
    data: dict[str, Any] = Field(description="tool calls, references of the inbound messages")
    created_at: Timestamp
    attachments: list[str] = Field(description="ids of the message's attachments")

    @classmethod
    def of(cls, message: Message) -> MessageOut:
        """The API's view of a stored message."""
        fields = {name: getattr(message, name) for name in _MESSAGE_FIELDS}
        return cls.model_validate(
            {**fields, "role": message.role, "attachments": attachment_ids(message.data)}
        )


_MESSAGE_FIELDS = ("id", "parent_id", "text", "agent", "data", "created_at")


def attachment_ids(data: dict[str, Any]) -> list[str]:
    """The ids under ``data["attachments"]``: plain ids, or objects with an ``id``."""
    found = data.get("attachments")
    items: Sequence[object] = found if isinstance(found, list) else []
    ids = [item.get("id") if isinstance(item, dict) else item for item in items]
    return [i for i in ids if isinstance(i, str)]


class MessagesPage(_Output):
    """The current branch of the history."""

    messages: list[MessageOut] = Field(description="the current branch, oldest first")


class ReplyAnswer(_Output):
    """The operator's message as stored, and its queued send."""

    message: MessageOut
    outbox_id: int | None = Field(description="the queued send; null for a web session")
    parked: bool = Field(
        default=False,
        description="true: the user has blocked the bot or cannot be reached; the reply is kept"
        " and sent once the user is back",
    )


class QueuedSession(SessionOut):
    """A session waiting for a person: its active agent is a human agent."""

    waiting_since: Timestamp = Field(
        description="when it was last handed to that agent (its creation if it started there)"
    )
    waiting_seconds: float
    unanswered: bool = Field(
        description="the user wrote since the last answer (an operator's reply or the handoff's)"
    )


class QueuePage(_Output):
    """The human-support queue, oldest waiting first, a page of it."""

    queue: list[QueuedSession] = Field(description="this page, the one waiting longest first")
    total: int = Field(description="sessions in the whole queue")


class AgentOut(_Output):
    """A declared agent."""

    name: str
    kind: Literal["bot", "human"]
    description: str


class AgentsPage(_Output):
    agents: list[AgentOut]


class CancelAnswer(_Output):
    """The running turn was told to stop; its end shows as a turn_cancelled event."""

    cancelled: bool


class TicketAnswer(_Output):
    """A one-time ticket that authenticates the console's live feed (/console/live)."""

    ticket: str
    expires_in: float = Field(description="seconds it stays valid; it works once")


class SandboxInfo(_Output):
    enabled: bool
    telegram: list[str] = Field(description="bot names")
    whatsapp: list[str] = Field(description="phone_number_ids")


class ConsoleConfig(_Output):
    """What the console needs to know of this gateway."""

    sandbox: SandboxInfo


class EventOut(_Output):
    """One entry of a session's event log."""

    seq: int = Field(description="1, 2, 3, ... per session")
    kind: str
    detail: dict[str, Any]
    created_at: Timestamp


class EventsPage(_Output):
    """Events after the given sequence number."""

    events: list[EventOut] = Field(description="oldest first")


class InboxOut(_Output):
    """A stored inbound message."""

    id: int
    session_id: str
    dedup_key: str
    event: dict[str, Any]
    state: str
    attempts: int
    error: str | None
    next_attempt_at: float
    created_at: Timestamp


class OutboxOut(_Output):
    """A stored reply and what became of it."""

    id: int
    session_id: str | None
    channel: str
    account: str
    chat_id: str
    payload: dict[str, Any]
    state: str
    attempts: int
    next_attempt_at: float
    error: str | None
    platform_ids: list[str]
    delivery_state: str | None
    created_at: Timestamp
    sent_at: Timestamp | None


class DeadLetters(_Output):
    """Dead inbox and outbox rows, newest first."""

    inbox: list[InboxOut] = Field(description="inbound messages whose turn kept failing")
    outbox: list[OutboxOut] = Field(description="replies that could not be sent")


class QuarantineOut(_Output):
    """A quarantined delivery, without its body."""

    id: int
    channel: str
    account: str | None
    reason: str
    received_at: Timestamp
    replayed_at: Timestamp | None
    size: int = Field(description="bytes of the body")

    @classmethod
    def of(cls, item: QuarantineItem) -> QuarantineOut:
        return cls.model_validate({**_quarantine_fields(item), "size": len(item.body)})


def _quarantine_fields(item: QuarantineItem) -> dict[str, Any]:
    names = ("id", "channel", "account", "reason", "received_at", "replayed_at")
    return {name: getattr(item, name) for name in names}


class QuarantineList(_Output):
    """Quarantined deliveries."""

    quarantine: list[QuarantineOut] = Field(description="newest first, without bodies")


class QuarantineDetail(QuarantineOut):
    """A quarantined delivery with its body."""

    body: str = Field(description="the delivery as received, decoded as UTF-8")

    @classmethod
    def of(cls, item: QuarantineItem) -> QuarantineDetail:
        body = item.body.decode("utf-8", "replace")
        return cls.model_validate(
            {**_quarantine_fields(item), "size": len(item.body), "body": body}
        )


class AttachmentOut(_Output):
    """A stored file of a session."""

    id: str
    name: str
    content_type: str
    size: int


class AttachmentAnswer(_Output):
    """The stored upload."""

    attachment: AttachmentOut
