"""The ``Store`` protocol: what agents/ and gateway/ may rely on, whatever the backend."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from ._types import Message, NewMessage, Role, Session, SessionEvent, SessionStatus


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

    @property
    def committed(self) -> Sequence[Message]:
        """After commit: the appended messages with their ids."""


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
    ) -> list[Session]: ...

    async def count_sessions(
        self,
        *,
        channel: str | None = None,
        status: SessionStatus | None = None,
        agent: str | None = None,
    ) -> int: ...

    async def interrupt_running(self) -> list[str]:
        """Turn every ``running`` session into ``interrupted``; return their ids."""

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

    async def latest_user_text(self, session_id: str) -> str | None: ...

    async def record_event(
        self, session_id: str, kind: str, detail: dict[str, Any] | None = None
    ) -> SessionEvent:
        """Record a session event outside a turn (e.g. an operator's handoff)."""

    async def list_events(self, session_id: str) -> list[SessionEvent]: ...

    # turns
    def turn(self, session_id: str) -> AbstractAsyncContextManager[Turn]: ...

    # dedup guard
    async def claim(self, keys: Iterable[str]) -> set[str]:
        """Return the keys seen for the first time (or whose earlier claim expired)."""

    async def purge(self, chunk_size: int = 1000) -> int:
        """Delete expired dedup rows in chunks; return how many went."""
