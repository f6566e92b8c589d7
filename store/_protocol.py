"""The ``Store`` protocol: what agents/ and gateway/ may rely on, whatever the backend."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from ._pipeline_types import (
    Delivery,
    DeliveryIn,
    InboxItem,
    IngestResult,
    OutboxIn,
    OutboxItem,
    ParsedDelivery,
    PipelineCounts,
    QuarantineIn,
    QuarantineItem,
    SessionInbox,
)
from ._retention import HistoryPurged
from ._types import (
    AgentCount,
    Attachment,
    Message,
    NewMessage,
    Role,
    Session,
    SessionEvent,
    SessionStatus,
    Waiting,
)


class Turn(Protocol):
    """The writes of one turn, buffered in memory and committed together at the end.

    Nothing is written before the ``async with`` block exits cleanly; an exception inside it
    leaves the session exactly as before (its status included).
    """

    @property
    def session(self) -> Session:
        """The session as it was when the turn began (status already ``running``)."""

    @property
    def history(self) -> Sequence[Message]:
        """The current branch, oldest first, as it was when the turn began."""

    @property
    def pending(self) -> Sequence[NewMessage]:
        """Messages appended in this turn so far, in order."""

    @property
    def active_agent(self) -> str:
        """The active agent as this turn will commit it."""

    def append(self, message: NewMessage) -> None:
        """Append a message after the head (and after earlier appends of this turn)."""

    def set_active_agent(self, name: str) -> None:
        """Change the active agent when the turn commits."""

    def update_metadata(self, values: dict[str, Any]) -> None:
        """Merge ``values`` into the session's metadata when the turn commits."""

    def record_event(self, kind: str, detail: dict[str, Any]) -> None:
        """Record a session event when the turn commits."""

    def discard(self) -> None:
        """Drop every write buffered so far; the turn then commits as cancelled.

        Writes buffered afterwards (the user's message, finished inbox rows) still commit,
        with a ``turn_cancelled`` event in place of ``turn_finished``.
        """

    def complete_inbox(self, ids: Sequence[int]) -> None:
        """Mark these pending inbox rows of the session done when the turn commits.

        A row that is then not pending (done, dead, gone) makes the commit raise
        InboxNotPending or InboxNotFound, and the turn writes nothing.
        """

    def add_outbox(self, item: OutboxIn) -> None:
        """Insert an outbox row (a reply to send) when the turn commits."""

    @property
    def committed(self) -> Sequence[Message]:
        """After commit: the appended messages with their ids."""

    @property
    def committed_outbox(self) -> Sequence[OutboxItem]:
        """After commit: the outbox rows inserted, in the order they were added."""


class Store(Protocol):
    """Sessions, their history DAG and the dedup guard, behind one interface per backend."""

    async def aclose(self) -> None: ...

    async def ping(self) -> None:
        """Raise if the store does not answer (used by /readyz)."""

    # sessions
    async def create_session(
        self,
        channel: str,
        account: str,
        chat_id: str,
        active_agent: str,
        metadata: dict[str, Any] | None = None,
    ) -> Session: ...

    async def get_or_create_session(
        self, channel: str, account: str, chat_id: str, active_agent: str
    ) -> Session: ...

    async def get_session(self, session_id: str) -> Session | None: ...

    async def update_session(
        self,
        session_id: str,
        *,
        active_agent: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Session: ...

    async def delete_session(self, session_id: str) -> bool: ...

    async def list_sessions(
        self,
        limit: int = 50,
        offset: int = 0,
        *,
        channel: str | None = None,
        status: SessionStatus | None = None,
        agent: str | None = None,
        search: str | None = None,
    ) -> list[Session]: ...

    async def count_sessions(
        self,
        *,
        channel: str | None = None,
        status: SessionStatus | None = None,
        agent: str | None = None,
        search: str | None = None,
    ) -> int: ...

    async def waiting_sessions(
        self, agents: Iterable[str], limit: int = 50, offset: int = 0
    ) -> list[Waiting]:
        """A page of the sessions whose active agent is one of ``agents``, the one waiting
        longest first, then by id: each waits since its last ``agent_changed`` event to that
        agent, or since its creation without one. ``limit`` 1..1000, ``offset`` >= 0."""

    async def agent_counts(self, excluding: Iterable[str] = ()) -> list[AgentCount]:
        """Every active agent of the sessions but those ``excluding`` names, by name, with
        how many sessions it holds and how many of them are ``Waiting.unanswered``."""

    # ownership across processes (docs/deployment.md)
    @property
    def owner(self) -> str:
        """This store's identity, made at open: the turns it runs and the outbox rows it claims
        carry it, and its lease says it is alive."""

    async def renew_lease(self, seconds: float) -> None:
        """Hold this store's lease until ``seconds`` from now (the gateway renews it often)."""

    async def secret(self, name: str) -> bytes:
        """The database's random 32-byte secret called ``name`` (lowercase letters and ``_``),
        made at its first use and the same from then on for every store on the database (each
        process of a deployment). Kept in the ``secrets`` table, which migrate-store does not
        copy: a new database makes its own. ValueError for a bad name."""

    async def release_lease(self) -> None:
        """Drop this store's lease (a clean stop): what it held may be taken over at once."""

    async def interrupt_running(self, running_here: Collection[str] | None = None) -> list[str]:
        """Turn ``running`` sessions whose owner holds no live lease into ``interrupted``; return
        their ids. Sessions a live process is running a turn of are left alone.

        ``running_here``: the sessions this store's process has a turn of under way, read when
        the transaction runs (pass a live view: a turn registers before its begin); given, this
        store's own ``running`` sessions outside it are taken too (a turn whose commit and
        rollback both failed, e.g. the database locked past the busy timeout, left it so)."""

    def watch_work(
        self,
        on_inbox: Callable[[frozenset[str]], None],
        on_outbox: Callable[[], None],
        on_cancel: Callable[[str], Awaitable[bool]] | None = None,
    ) -> AbstractAsyncContextManager[None]:
        """While entered, hear of inbox rows (their sessions) and outbox rows that OTHER
        processes committed, without waiting for a poll, and answer their ``relay_cancel``
        with ``on_cancel(session_id)`` (whether the cancel took; without one it does not). A
        backend without notifications (SQLite) hears nothing: the pipeline's polls find that
        work."""

    async def relay_cancel(self, session_id: str, *, wait_seconds: float) -> bool | None:
        """Ask the OTHER process whose live lease holds the session's running turn to cancel
        it, and return its answer (its ``on_cancel``); False when no other live process runs
        a turn of the session, or the backend has no channel between processes (SQLite);
        None when the answer did not come within ``wait_seconds`` seconds. Needs ``watch_work``
        entered, where the answer is heard (False otherwise)."""

    # history
    async def get_branch(self, session_id: str, head_id: int | None = None) -> list[Message]: ...

    async def append_message(
        self,
        session_id: str,
        role: Role,
        text: str | None,
        *,
        agent: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> Message: ...

    async def set_active_head(self, session_id: str, message_id: int) -> Session: ...

    async def all_messages(self, session_id: str) -> list[Message]:
        """Every message of the session, of every branch, in id order; SessionNotFound."""

    async def latest_user_text(self, session_id: str) -> str | None: ...

    async def record_event(
        self, session_id: str, kind: str, detail: dict[str, Any] | None = None
    ) -> SessionEvent:
        """Record a session event outside a turn (e.g. an operator's handoff)."""

    async def list_events(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[SessionEvent]:
        """The session's event log after ``seq`` ``after``, in order; SessionNotFound."""

    def watch_events(self, listener: Callable[[frozenset[str]], None]) -> Callable[[], None]:
        """Hear, after each commit of this process, which sessions got events; returns the
        function that stops it. Other processes' commits are not heard: poll for those."""

    async def set_agent(self, session_id: str, agent: str, *, reason: str) -> Session:
        """Hand the session to ``agent`` with an ``agent_changed`` event, in one transaction.

        RunActive while a turn runs (the turn would commit its own agent over this one).
        """

    # attachments (the rows; the gateway keeps the files)
    async def create_attachment(
        self,
        session_id: str,
        *,
        name: str,
        content_type: str,
        source: str,
        size: int = 0,
        state: str = "ready",
        message_key: str | None = None,
        media_ref: dict[str, Any] | None = None,
        attachment_id: str | None = None,
    ) -> Attachment: ...

    async def get_attachment(self, session_id: str, attachment_id: str) -> Attachment | None: ...

    async def list_attachments(self, session_id: str) -> list[Attachment]: ...

    async def message_attachments(self, message_keys: Sequence[str]) -> list[Attachment]: ...

    async def pending_attachments(self, limit: int = 100) -> list[Attachment]: ...

    async def finish_attachment(
        self,
        attachment_id: str,
        *,
        state: str,
        size: int = 0,
        content_type: str | None = None,
        error: str | None = None,
    ) -> Attachment: ...

    # turns
    def turn(
        self,
        session_id: str,
        *,
        recent_turns: int | None = None,
        inbox_ids: Sequence[int] = (),
    ) -> AbstractAsyncContextManager[Turn]:
        """Open a turn; with ``recent_turns``, its history is only what pruning to that many
        whole turns keeps: the last ``recent_turns`` turns and every system message.

        The turn owns the session (``owner``) until it ends; if another process took the session
        over meanwhile (this one's lease expired), the commit raises TurnActive and writes
        nothing. ``inbox_ids``: the rows the turn answers; entering raises InboxNotPending (or
        InboxNotFound) if any is no longer pending, before any work is done on a stale batch.
        """

    # dedup guard
    async def claim(self, keys: Iterable[str]) -> set[str]:
        """Return the keys seen for the first time (or whose earlier claim expired)."""

    async def purge(self, chunk_size: int = 1000) -> int:
        """Delete expired dedup rows in chunks; return how many went."""

    # pipeline: ingest and intake
    async def ingest(self, items: Sequence[DeliveryIn | QuarantineIn]) -> list[IngestResult]:
        """Claim keys, store new deliveries and quarantine rows in ONE transaction, in order."""

    async def unparsed_deliveries(self, limit: int = 100) -> list[Delivery]:
        """Stored deliveries awaiting parse, oldest first."""

    async def record_parsed(
        self, delivery_id: int | None, parsed: ParsedDelivery, *, starting_agent: str
    ) -> list[str]:
        """Apply a parsed delivery and delete it in one transaction; sessions with new inbox rows.

        ``delivery_id=None`` (a quarantine replay) applies ``parsed`` and deletes nothing.
        """

    # inbox
    async def record_parsed_many(
        self,
        items: Sequence[tuple[int, ParsedDelivery]],
        *,
        starting_agent: str,
        oldest_first: bool = False,
    ) -> list[SessionInbox]:
        """``record_parsed`` for several deliveries in one transaction; a missing one is skipped.

        Returns each session given new inbox rows, in the order of their first new row, with
        its pending rows of the recorded keys and whether they were all its pending rows when
        the transaction ended: the dispatcher starts from them instead of reading them back.
        ``oldest_first``: if a stored delivery older than the newest given is not among them,
        write nothing and raise OlderDeliveries (the intake, given deliveries in memory, then
        reads the store so that they are recorded in order).
        """

    async def pending_sessions(self) -> list[str]:
        """Sessions with pending inbox rows, by their oldest pending row."""

    async def pending_inbox(self, session_id: str, limit: int = 100) -> list[InboxItem]:
        """A session's pending inbox rows, oldest first ([] for an unknown session)."""

    async def cancel_inbox(self, ids: Sequence[int]) -> None:
        """Keep a cancel accepted for these rows' turn with the rows that are still pending, so
        that it outlives the process: their next turn, here or after a crash in whichever
        process takes the session over, ends cancelled (``cancelled_inbox``)."""

    async def cancelled_inbox(
        self, session_ids: Collection[str] | None = None
    ) -> dict[str, frozenset[int]]:
        """Pending rows marked by ``cancel_inbox``, by session: of every session, or of those
        given (unknown ones have none)."""

    async def backlog_count(self) -> int:
        """Messages acknowledged and not yet answered: stored deliveries plus pending inbox rows.

        One cheap read (an index range for the inbox); the gateway polls it about once a second.
        """

    async def pipeline_counts(self) -> PipelineCounts:
        """Pending and dead inbox rows, pending and dead outbox rows by channel, running and
        interrupted sessions: one statement, index ranges only (the /metrics gauges)."""

    async def fail_inbox(
        self, ids: Sequence[int], error: str, *, next_attempt_at: float, dead: bool
    ) -> None:
        """Record a failed try of pending rows: attempts + 1, error, retry time or dead."""

    async def list_dead_inbox(self, limit: int = 50, offset: int = 0) -> list[InboxItem]:
        """Dead inbox rows, newest first."""

    # outbox
    async def enqueue_outbox(self, item: OutboxIn) -> OutboxItem:
        """Insert an outbox row outside a turn (operator replies, apologies)."""

    async def due_outbox(self, now: float, limit: int = 100) -> list[OutboxItem]:
        """Pending rows with ``next_attempt_at <= now``, in id order."""

    async def next_outbox_due(self) -> float | None:
        """The earliest ``next_attempt_at`` of pending rows, or None."""

    async def outbox_schedule(
        self, now: float, limit: int = 100, skip_channels: Collection[str] = ()
    ) -> tuple[list[OutboxItem], float | None]:
        """``due_outbox``, and the earliest ``next_attempt_at`` after ``now`` of the rows it
        could return later (None if none), in one read: the sender's every pass. Rows due now
        that the sender does not start (one in flight here, say) do not hide a later one.
        Rows of ``skip_channels`` are left out of both (channels whose sends are all taken)."""

    async def claim_outbox(self, outbox_id: int, seconds: float) -> bool:
        """Claim a pending row for sending for ``seconds``: False if it is not pending or another
        store's claim on it is still running. Claimed rows of others are not due (and neither is
        the rest of their chat) until the claim ends; sent/retry/failed marks end it."""

    async def claim_outbox_many(self, outbox_ids: Sequence[int], seconds: float) -> list[int]:
        """``claim_outbox`` of each row in one write: the ids claimed, in the order given."""

    async def outbox_sent(self, outbox_id: int, platform_ids: Sequence[str]) -> None:
        """Mark a pending row sent with the platform's ids (one UPDATE)."""

    async def outbox_retry(self, outbox_id: int, *, next_attempt_at: float, error: str) -> None:
        """Record a retryable failure: attempts + 1, stays pending until ``next_attempt_at``."""

    async def outbox_progress(
        self, outbox_id: int, *, skip_parts: int, platform_ids: Sequence[str]
    ) -> None:
        """A split reply delivered its first ``skip_parts`` parts (``platform_ids``, all so far)."""

    async def outbox_redirect(self, outbox_id: int, *, chat_id: str, error: str) -> None:
        """Send a pending row to ``chat_id`` instead (a migrated chat); attempts + 1."""

    async def outbox_failed(self, outbox_id: int, *, error: str, state: str) -> None:
        """End a pending row as ``failed``, ``dead`` or ``uncertain``; attempts + 1."""

    async def list_outbox(self, session_id: str) -> list[OutboxItem]:
        """A session's outbox rows in id order."""

    async def park_outbox(self, session_id: str) -> int:
        """Park the session's pending rows: kept pending with ``PARKED_ERROR``, never due,
        until ``unpark_outbox``; how many were parked. Their claims end (the sender parks
        after the platform refused the attempt: its outcome is known)."""

    async def unpark_outbox(self, session_id: str) -> int:
        """Make the session's parked rows due now (sent in id order); how many."""

    async def list_dead_outbox(self, limit: int = 50, offset: int = 0) -> list[OutboxItem]:
        """Outbox rows that could not be sent, ``failed`` (the platform refused them for good)
        or ``dead`` (out of attempts), newest first."""

    # quarantine
    async def list_quarantine(
        self, limit: int = 50, offset: int = 0, *, pending_only: bool = False
    ) -> list[QuarantineItem]:
        """Quarantined deliveries, newest first; ``pending_only``: those not replayed yet."""

    async def get_quarantine(self, quarantine_id: int) -> QuarantineItem | None:
        """One quarantined delivery, or None."""

    async def mark_replayed(self, quarantine_id: int) -> None:
        """Record that a quarantined delivery was replayed (sets ``replayed_at``)."""

    async def delete_quarantine(self, quarantine_id: int) -> bool:
        """Erase one quarantined delivery; False if there was none."""

    async def delete_chat_quarantine(self, channel: str, chat_id: str) -> int:
        """Erase the quarantined deliveries of ``channel`` whose body names ``chat_id`` as a
        whole token (as ``delete_session`` does for its chat), of any account; how many."""

    async def purge_finished(self, older_than_seconds: float, chunk_size: int = 1000) -> int:
        """Delete done inbox rows and sent outbox rows older than the cutoff, in chunks."""

    async def purge_history(
        self, older_than_seconds: float, chunk_size: int = 1000
    ) -> HistoryPurged:
        """Retention: delete messages, events, attachment rows, finished inbox and outbox rows
        and quarantine rows older than the cutoff, then sessions left empty, in chunks; never
        a running session's rows nor a pending row (store/_retention.py has the rule)."""
