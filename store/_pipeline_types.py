"""Rows of the gateway pipeline: deliveries, quarantine, inbox and outbox (see docs/store.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

INBOX_STATES = ("pending", "done", "dead")
OUTBOX_STATES = ("pending", "sent", "failed", "dead", "uncertain")
OUTBOX_FAILED_STATES = ("failed", "dead", "uncertain")  # the states outbox_failed() may set
DELIVERY_STATES = ("sent", "delivered", "read", "failed")  # what a platform status reports


@dataclass(frozen=True, slots=True)
class DeliveryIn:
    """A verified delivery, before parsing."""

    channel: str
    account: str | None  # Telegram bot name; None for WhatsApp (accounts are in the body)
    body: bytes
    keys: tuple[str, ...]  # its dedup keys


@dataclass(frozen=True, slots=True)
class QuarantineIn:
    """An authenticated delivery that could not be read at all."""

    channel: str
    account: str | None
    body: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What ``ingest`` made of one item, in input order."""

    delivery_id: int | None  # None: nothing new (all keys seen) or a quarantine item
    new_keys: frozenset[str]
    quarantine_id: int | None = None


@dataclass(frozen=True, slots=True)
class Delivery:
    """A stored delivery awaiting parse; ``keys`` are the keys it claimed."""

    id: int
    channel: str
    account: str | None
    body: bytes
    keys: frozenset[str]
    received_at: datetime


@dataclass(frozen=True, slots=True)
class AttachmentIn:
    """A platform file that came with an inbound message, recorded ``pending`` until fetched."""

    id: str  # 32 hex digits, made by the caller
    name: str
    content_type: str
    source: str  # whatsapp / telegram
    media_ref: dict[str, Any]  # what the downloader needs: account, media id


@dataclass(frozen=True, slots=True)
class InboxIn:
    """One inbound message; its session is ``make_session_id(channel, account, chat_id)``."""

    channel: str
    account: str
    chat_id: str
    dedup_key: str
    event: dict[str, Any]  # InboundMessage.model_dump(mode="json")
    attachments: tuple[AttachmentIn, ...] = ()  # platform files to fetch
    links: tuple[str, ...] = ()  # ids of uploaded attachments this message references
    starting_agent: str | None = None  # a new session's agent; None: record_parsed's


@dataclass(frozen=True, slots=True)
class StatusIn:
    """A platform's delivery status of one of our messages."""

    channel: str
    account: str
    platform_message_id: str
    state: str  # sent / delivered / read / failed
    error: str | None
    # A failed status whose error is transient (the platform asks to send again): when to send
    # the reply again from the failed part, by the tries it made: ``resend_at[n - 1]`` for n
    # tries (the failed one included); none past the end (out of tries). Empty: not sent again.
    resend_at: tuple[float, ...] = ()
    # A failed status saying the user cannot be reached (WhatsApp 131026): the session of the
    # reply it reports on is marked as if the user had blocked the bot. A status of a message
    # no outbox row sent (another app's, a deleted session's) marks no session.
    unreachable: bool = False


@dataclass(frozen=True, slots=True)
class MembershipIn:
    """The user blocked or unblocked the bot."""

    channel: str
    account: str
    chat_id: str
    blocked: bool
    starting_agent: str | None = None  # a new session's agent; None: record_parsed's


@dataclass(frozen=True, slots=True)
class ParsedDelivery:
    """What the intake made of one delivery."""

    inbox: tuple[InboxIn, ...] = ()
    statuses: tuple[StatusIn, ...] = ()
    memberships: tuple[MembershipIn, ...] = ()
    failure: str | None = None  # reasons of the parts that failed (quarantined whole)


@dataclass(frozen=True, slots=True)
class InboxItem:
    """A stored inbound message of a session."""

    id: int
    session_id: str
    dedup_key: str
    event: dict[str, Any]
    state: str  # pending / done / dead
    attempts: int
    error: str | None
    next_attempt_at: float
    created_at: datetime


@dataclass(frozen=True, slots=True)
class SessionInbox:
    """A session that ``record_parsed_many`` gave inbox rows: its pending rows with the keys
    recorded, oldest first, and whether they were every pending row of the session when the
    transaction ended (if not, older ones wait too)."""

    session_id: str
    new: tuple[InboxItem, ...]
    complete: bool


# A parked row is pending with this next_attempt_at (far beyond any clock: never due) and
# PARKED_ERROR, until unpark_outbox makes it due again.
PARKED_AT = 1e15
PARKED_ERROR = "parked: the user blocked the bot or cannot be reached"


@dataclass(frozen=True, slots=True)
class OutboxIn:
    """A reply to send."""

    session_id: str
    channel: str
    account: str
    chat_id: str
    payload: dict[str, Any]  # OutboundMessage.model_dump(mode="json")
    parked: bool = False  # the user blocked the bot or is unreachable: kept, not sent yet


@dataclass(frozen=True, slots=True)
class OutboxItem:
    """A stored reply and what became of it."""

    id: int
    session_id: str | None
    channel: str
    account: str
    chat_id: str
    payload: dict[str, Any]
    state: str  # pending / sent / failed / dead / uncertain
    attempts: int
    next_attempt_at: float
    error: str | None
    platform_ids: tuple[str, ...]
    delivery_state: str | None
    created_at: datetime
    sent_at: datetime | None
    # The sender holding the row for a send attempt; on a row offered for sending, a claim
    # whose attempt never recorded its outcome (the crash window).
    claimed_by: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class QuarantineItem:
    """A stored delivery that could not be parsed, kept whole for a later replay."""

    id: int
    channel: str
    account: str | None
    body: bytes
    reason: str
    received_at: datetime
    replayed_at: datetime | None


@dataclass(frozen=True, slots=True)
class PipelineCounts:
    """Rows that make the gateway's gauges: what waits, what is stuck, what runs.

    ``inbox`` by state (pending, dead), ``outbox`` by (channel, state) (pending, dead),
    ``sessions`` by status (running, interrupted; idle is left out: counting it reads every
    session). A key with no row is absent.
    """

    inbox: Mapping[str, int] = field(default_factory=dict)
    outbox: Mapping[tuple[str, str], int] = field(default_factory=dict)
    sessions: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, str, str, int]]) -> PipelineCounts:
        """From ``(table, channel, state, count)`` rows, as the backends' one query gives them."""
        inbox: dict[str, int] = {}
        outbox: dict[tuple[str, str], int] = {}
        sessions: dict[str, int] = {}
        for table, channel, state, count in rows:
            if table == "inbox":
                inbox[state] = int(count)
            elif table == "outbox":
                outbox[(channel, state)] = int(count)
            else:
                sessions[state] = int(count)
        return cls(inbox, outbox, sessions)
