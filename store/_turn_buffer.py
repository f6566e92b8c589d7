"""What a turn is, whatever the backend: its writes buffered in memory, and the scope around it.

``TurnBuffer`` holds the writes of the turn's body (appends, the agent, metadata, events, inbox
rows done, outbox rows) and checks each as it is made, so that a bad one fails in the body, not
at commit. ``TurnScope`` is ``async with store.turn(session_id)``: it enters with the
backend's begin transaction, commits the buffer with its commit transaction on a clean exit
and runs its undo transaction on any exception. Each backend's ``_turn`` adds only those three
transactions (``SQLiteTurn``, ``PostgresTurn`` and their ``TurnScope``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Generic, TypeVar

from ._args import message_text
from ._checks import check_ids, outbox_values
from ._errors import StoreError, TurnActive
from ._pipeline_types import OutboxIn, OutboxItem
from ._rows import dump_json
from ._types import ROLES, Message, NewMessage, Session

Clock = Callable[[], float]
Written = tuple[list[Message], list[OutboxItem]]  # what a commit wrote: messages, outbox rows
Event = tuple[str, str, float]  # kind, detail as JSON text, created_at

Hook = TypeVar("Hook")
Db = TypeVar("Db")
TurnT = TypeVar("TurnT", bound="TurnBuffer[Any]")
SnapshotT = TypeVar("SnapshotT")


def message_event(message: Message) -> dict[str, Any]:
    """The ``message`` event of an answer: what /ws shows the user and the console."""
    operator = message.role == "operator"
    detail: dict[str, Any] = {
        "message_id": message.id,
        "role": message.role,
        "text": message.text,
        "agent": message.agent,
        "attachments": [],
    }
    buttons = message.data.get("buttons")
    if buttons:
        detail["buttons"] = buttons
    if operator and message.data.get("operator"):
        detail["operator"] = message.data["operator"]  # the person's name
    return detail


def end_reason(exc: BaseException | None) -> str:
    """Why a turn ended without its commit, as its ``turn_cancelled`` event says."""
    if isinstance(exc, asyncio.CancelledError):
        return "interrupted"  # shutdown: the turn runs again at the next start
    if isinstance(exc, TimeoutError):  # agents' TurnTimeout is one
        return "timeout"
    return "failed"


class TurnBuffer(Generic[Hook]):
    """The buffered writes of one turn (implements ``store.Turn``); ``Hook``: the backend's
    commit hook."""

    def __init__(self, session: Session, history: list[Message], clock: Clock) -> None:
        self._session = session
        self._history = tuple(history)
        self._clock = clock
        self._pending: list[NewMessage] = []
        self._rows: list[dict[str, Any]] = []
        self._agent: str | None = None
        self._metadata: dict[str, Any] = {}
        self._events: list[Event] = []
        self._hooks: list[Hook] = []
        self._inbox_done: dict[int, None] = {}  # an ordered set
        self._outbox: list[dict[str, Any]] = []
        self._committed: tuple[Message, ...] = ()
        self._committed_outbox: tuple[OutboxItem, ...] = ()
        self._cancelled = False
        self._open = True

    @property
    def session(self) -> Session:
        return self._session

    @property
    def history(self) -> Sequence[Message]:
        return self._history

    @property
    def pending(self) -> Sequence[NewMessage]:
        return tuple(self._pending)

    @property
    def active_agent(self) -> str:
        return self._session.active_agent if self._agent is None else self._agent

    @property
    def committed(self) -> Sequence[Message]:
        return self._committed

    @property
    def committed_outbox(self) -> Sequence[OutboxItem]:
        return self._committed_outbox

    def append(self, message: NewMessage) -> None:
        """Buffer a message after the head and the earlier appends of this turn."""
        self._check_open()
        if message.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {message.role!r}")
        row = {
            "role": message.role,
            "text": message_text(message.text),  # fails here, in the body, not at commit
            "agent": message.agent,
            "data": dump_json(message.data),  # fails here, in the body, not at commit
            "created_at": self._clock(),
        }
        self._pending.append(message)
        self._rows.append(row)

    def set_active_agent(self, name: str) -> None:
        """Make ``name`` the active agent when the turn commits."""
        self._check_open()
        if not isinstance(name, str) or not name:
            raise ValueError("agent name must be a non-empty string")
        self._agent = name

    def update_metadata(self, values: dict[str, Any]) -> None:
        """Merge ``values`` into the session's metadata (shallow) when the turn commits."""
        self._check_open()
        dump_json(values)
        self._metadata.update(values)

    def record_event(self, kind: str, detail: dict[str, Any]) -> None:
        """Record a session event when the turn commits."""
        self._check_open()
        if not isinstance(kind, str) or not kind:
            raise ValueError("event kind must be a non-empty string")
        self._events.append((kind, dump_json(detail), self._clock()))

    def complete_inbox(self, ids: Sequence[int]) -> None:
        """Mark these pending inbox rows of the session done when the turn commits."""
        self._check_open()
        self._inbox_done.update(dict.fromkeys(check_ids("ids", ids)))

    def add_outbox(self, item: OutboxIn) -> None:
        """Insert an outbox row of this session when the turn commits."""
        self._check_open()
        values = outbox_values(item)
        if values["session_id"] != self._session.session_id:
            raise ValueError(
                f"OutboxIn.session_id {item.session_id!r} is not this turn's session"
                f" {self._session.session_id!r}"
            )
        self._outbox.append(values)

    def discard(self) -> None:
        """Drop every write buffered so far: the turn will commit as cancelled.

        What is buffered after this (the user's message, the inbox rows) still commits, with
        a ``turn_cancelled`` event instead of ``turn_finished``.
        """
        self._check_open()
        self._pending.clear()
        self._rows.clear()
        self._agent = None
        self._metadata.clear()
        self._events.clear()
        self._hooks.clear()
        self._inbox_done.clear()
        self._outbox.clear()
        self._cancelled = True

    def add_commit_hook(self, hook: Hook) -> None:
        """Run ``hook`` inside the commit transaction, after the messages are inserted (on
        PostgreSQL it is a coroutine function, awaited there)."""
        self._check_open()
        self._hooks.append(hook)

    def _check_open(self) -> None:
        if not self._open:
            raise StoreError("the turn has ended; its writes can no longer change")

    def _closing_events(
        self, committed: list[Message], outbox: list[OutboxItem]
    ) -> list[tuple[str, dict[str, Any]]]:
        """The ``message`` event of each answer, then ``turn_finished`` or ``turn_cancelled``:
        ``(kind, detail)``, logged by the commit after everything else."""
        answers = [committed[index] for index in self._answer_indexes()]
        # One outbox row per answer, in order (the dispatcher and the operator reply add them
        # so): the event names the row, so its delivery statuses can be shown beside it.
        sending = [row.id for row in outbox] if len(outbox) == len(answers) else []
        events: list[tuple[str, dict[str, Any]]] = []
        for index, message in enumerate(answers):
            shown = message_event(message)
            if sending:
                shown["outbox_id"] = sending[index]
            events.append(("message", shown))
        events.append(self._last_event(len(answers)))
        return events

    def _answer_indexes(self) -> list[int]:
        """Which of the turn's messages are answers, each shown by a ``message`` event."""
        return [
            index
            for index, row in enumerate(self._rows)
            if row["role"] in ("assistant", "operator") and row["text"]
        ]

    def _last_event(self, answers: int) -> tuple[str, dict[str, Any]]:
        """``turn_finished``, or ``turn_cancelled`` for a discarded turn: ``(kind, detail)``."""
        if self._cancelled:
            return "turn_cancelled", {"reason": "cancelled"}
        return "turn_finished", {"replies": answers}

    def _finish(self, written: Written) -> None:
        committed, outbox = written
        self._committed = tuple(committed)
        self._committed_outbox = tuple(outbox)

    def _close(self) -> None:
        self._open = False


class TurnScope(Generic[Db, TurnT, SnapshotT]):
    """``async with store.turn(session_id) as turn``: see the backend's ``_turn`` module.

    A backend provides its three transactions (``_enter``, ``_commit_buffer``, ``_undo``) and
    makes its turn (``_new_turn``); ``_enter`` sets ``_snapshot``, what commit and undo need.
    """

    def __init__(
        self,
        db: Db,
        open_turns: set[str],
        session_id: str,
        clock: Clock,
        recent_turns: int | None = None,
        *,
        owner: str,
        inbox_ids: Sequence[int] = (),
    ) -> None:
        self._db = db
        self._open_turns = open_turns
        self._sid = session_id
        self._clock = clock
        self._recent_turns = recent_turns
        self._owner = owner
        self._inbox_ids = tuple(inbox_ids)
        self._snapshot: SnapshotT | None = None
        self._turn: TurnT | None = None

    async def _enter(self) -> tuple[Session, list[Message]]:
        """The begin transaction: the session as the turn sees it, and its history."""
        raise NotImplementedError

    async def _commit_buffer(self, turn: TurnT, now: float) -> Written:
        """The commit transaction: everything ``turn`` buffered."""
        raise NotImplementedError

    async def _undo(self, reason: str) -> None:
        """The undo transaction: the status as before the turn, and why it ended."""
        raise NotImplementedError

    def _new_turn(self, session: Session, history: list[Message]) -> TurnT:
        raise NotImplementedError

    async def __aenter__(self) -> TurnT:
        if self._sid in self._open_turns:
            raise TurnActive(self._sid)
        self._open_turns.add(self._sid)
        try:
            session, history = await self._enter()
        except Exception:
            self._open_turns.discard(self._sid)  # the begin failed and rolled back
            raise
        except BaseException:
            # Cancelled: the begin may have gone on (SQLite: queued on the connection's thread;
            # PostgreSQL: committed or not); the undo, after it, tells what to put back.
            self._open_turns.discard(self._sid)
            await self._undo("interrupted")
            raise
        self._turn = self._new_turn(session, history)
        return self._turn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._turn is not None
        try:
            if exc_type is None:
                await self._commit(self._turn)
            else:
                await self._undo(end_reason(exc))
        finally:
            self._turn._close()
            self._open_turns.discard(self._sid)

    async def _commit(self, turn: TurnT) -> None:
        assert self._snapshot is not None
        now = self._clock()
        try:
            written = await self._commit_buffer(turn, now)
        except BaseException:
            # A cancelled caller does not stop a commit already sent; then the undo finds the
            # status idle: nothing to undo.
            await self._undo("failed")
            raise
        turn._finish(written)
