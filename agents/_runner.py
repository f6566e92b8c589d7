"""The runner: one atomic turn per inbound message, committed once or not at all."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from webhook_bot_gateway.store import OUTSIDE_TURNS, NewMessage, Store, Turn

from ._config import AgentsConfig
from ._deadline import turn_deadline
from ._errors import TurnCancelled, TurnTimeout
from ._loop import Limits, Reply, ReplyGuard, TurnLoop
from ._model import ImagePart
from ._observer import NO_OBSERVER, TurnObserver
from ._registry import Registry
from ._resolver import resolve_agent

T = TypeVar("T")
BeforeCommit = Callable[[Turn, Sequence[Reply]], None]


@dataclass(frozen=True, slots=True)
class UserInput:
    """A user's message as the runner needs it; the gateway converts channel events."""

    text: str
    data: Mapping[str, Any] = field(default_factory=dict)  # kept on the stored user message
    images: tuple[ImagePart, ...] = ()  # shown to a model that can see; not stored


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What a committed turn produced: the replies to send and the agent before and after."""

    session_id: str
    replies: tuple[Reply, ...]
    agent_before: str
    agent_after: str
    message_ids: tuple[int, ...]
    cancelled: bool = False  # the cancel event stopped it: only the user's message was kept


class Runner:
    """Runs turns against a store and a registry.

    A turn that raises, times out or is cancelled leaves no trace in the store: the store's
    turn context rolls back when the exception passes through it. A second turn of a session
    whose turn is open raises the store's ``TurnActive``.
    """

    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        max_turns: int = 40,
        max_steps: int = 8,
        max_handoffs: int = 3,
        turn_timeout: float | None = 120.0,
        observer: TurnObserver = NO_OBSERVER,
        refusal_reply: str | None = None,
    ) -> None:
        if max_turns <= 0:
            raise ValueError(f"max_turns must be > 0, got {max_turns}")
        self._store = store
        self._registry = registry
        self._limits = Limits(max_turns, max_steps, max_handoffs, refusal_reply)
        self._turn_timeout = turn_timeout
        self._observer = observer

    @classmethod
    def from_config(
        cls,
        store: Store,
        registry: Registry,
        config: AgentsConfig,
        observer: TurnObserver = NO_OBSERVER,
    ) -> Runner:
        """A runner with the limits of ``[agents]``."""
        return cls(
            store,
            registry,
            max_turns=config.max_turns,
            max_steps=config.max_steps,
            max_handoffs=config.max_handoffs,
            turn_timeout=config.turn_timeout,
            observer=observer,
            refusal_reply=config.refusal_reply,
        )

    @property
    def registry(self) -> Registry:
        """The declared agents this runner binds sessions to."""
        return self._registry

    async def run_turn(
        self,
        session_id: str,
        inbound: UserInput,
        *,
        cancel: asyncio.Event | None = None,
        before_commit: BeforeCommit | None = None,
        inbox_ids: Sequence[int] = (),
        reply_guard: ReplyGuard | None = None,
    ) -> TurnResult:
        """Answer ``inbound`` in ``session_id``; commit history and active agent once.

        Setting ``cancel`` stops the agents: the turn then commits only the user's message (see
        ``TurnResult.cancelled``); an exception or a timeout rolls everything back.

        ``before_commit(turn, replies)`` runs inside the turn after the agents answered, so what
        it buffers (outbox rows, finished inbox rows) commits with the turn or not at all. It
        marks the point of no return: ``cancel`` is looked at for the last time just before it,
        with nothing awaited in between, and a cancel set from then on changes nothing (the
        turn commits its answer); a caller that reports whether a cancel took must refuse one
        from there.
        ``inbox_ids``: the inbox rows this turn answers; the store refuses to begin if one is no
        longer pending (another process answered it meanwhile), before any agent runs. They
        also name the turn for its tools' idempotency keys (``ToolContext``), which are then
        the same when the turn runs again (a retry, a re-run after a crash).
        ``reply_guard(session)``: why a text reply cannot be sent now (None: it can); a refused
        text is kept in the history marked ``not_sent``, and the model is told why and asked
        once more, so that it can do what it can instead (send a template with a tool).
        """
        cancelled = False
        handoffs: list[tuple[str, str]] = []
        # The model sees at most max_turns whole turns (this one included): load no more.
        recent = self._limits.max_turns
        async with self._store.turn(session_id, recent_turns=recent, inbox_ids=inbox_ids) as turn:
            before = turn.session.active_agent
            try:
                loop = self._begin(turn, inbound, inbox_ids, reply_guard)
                replies = await self._guarded(session_id, loop, cancel)
                handoffs = loop.handoffs
                if cancel is not None and cancel.is_set():  # the last look: see the docstring
                    raise TurnCancelled(session_id)
            except TurnCancelled:
                _keep_only_the_message(turn, inbound)
                replies, handoffs, cancelled = [], [], True
            if before_commit is not None:
                before_commit(turn, replies)
            after = turn.active_agent
        for source, target in handoffs:  # committed: a rolled-back handoff never happened
            self._observer.handoff(source, target)
        ids = tuple(message.id for message in turn.committed)
        return TurnResult(session_id, tuple(replies), before, after, ids, cancelled)

    async def answer_waiting(
        self,
        session_id: str,
        *,
        before_commit: BeforeCommit | None = None,
        reply_guard: ReplyGuard | None = None,
    ) -> TurnResult | None:
        """Answer what the user wrote to a person no longer there: a session whose head is a
        user message written while a human agent held it (``OUTSIDE_TURNS``), and whose active
        agent is no longer declared (or no longer serves its account), or is a bot again (an
        operator handed the session back unanswered). That agent (the resolver's fallback for
        a gone one) answers those messages now, in a turn without a new message, committed once
        like ``run_turn``'s. None, with nothing written but the log's ``turn_started`` and
        ``turn_cancelled``, when the session is not such a one (any more)."""
        recent = self._limits.max_turns
        try:
            async with self._store.turn(session_id, recent_turns=recent) as turn:
                before = turn.session.active_agent
                if not _waits_for_an_answer(turn, self._registry):
                    raise _NothingToAnswer(session_id)
                agent = resolve_agent(turn, self._registry)
                loop = TurnLoop(
                    turn, self._registry, self._limits, agent, (), (), self._observer, reply_guard
                )
                replies = await self._guarded(session_id, loop, None)
                if before_commit is not None:
                    before_commit(turn, replies)
                after = turn.active_agent
        except _NothingToAnswer:
            return None
        for source, target in loop.handoffs:
            self._observer.handoff(source, target)
        ids = tuple(message.id for message in turn.committed)
        return TurnResult(session_id, tuple(replies), before, after, ids)

    async def record_turn(
        self,
        session_id: str,
        inbound: UserInput,
        *,
        before_commit: BeforeCommit | None = None,
        inbox_ids: Sequence[int] = (),
    ) -> TurnResult:
        """Keep ``inbound`` in the history and run no agent (a message that asks nothing, such
        as a reaction): one commit, as ``run_turn``'s, with no replies."""
        async with self._store.turn(session_id, recent_turns=1, inbox_ids=inbox_ids) as turn:
            agent = turn.session.active_agent
            turn.append(NewMessage("user", inbound.text, data=dict(inbound.data)))
            if before_commit is not None:
                before_commit(turn, [])
        ids = tuple(message.id for message in turn.committed)
        return TurnResult(session_id, (), agent, agent, ids)

    def _begin(
        self,
        turn: Turn,
        inbound: UserInput,
        inbox_ids: Sequence[int],
        reply_guard: ReplyGuard | None,
    ) -> TurnLoop:
        """The turn's agent bound and the user's message buffered: the loop that answers it
        (its ``handoffs``, once run, are those made on the way, as (from, to))."""
        agent = resolve_agent(turn, self._registry)
        data = dict(inbound.data)
        if agent.kind == "human":  # a message to a person: not a turn of the model's context
            data[OUTSIDE_TURNS] = True
        turn.append(NewMessage("user", inbound.text, data=data))
        return TurnLoop(
            turn,
            self._registry,
            self._limits,
            agent,
            inbound.images,
            inbox_ids,
            self._observer,
            reply_guard,
        )

    async def _guarded(
        self, session_id: str, loop: TurnLoop, cancel: asyncio.Event | None
    ) -> list[Reply]:
        """``loop``'s replies, within ``turn_timeout`` and unless ``cancel`` is set first. A
        timeout's ``TurnTimeout`` names what the turn was waiting on (a model or a tool)."""
        timeout = asyncio.timeout(self._turn_timeout)
        try:
            with turn_deadline(self._turn_timeout):  # a backend's retry does not wait past it
                async with timeout:
                    return await _unless_cancelled(session_id, loop.run(), cancel)
        except TimeoutError:
            if timeout.expired() and self._turn_timeout is not None:
                raise TurnTimeout(session_id, self._turn_timeout, loop.waiting_on) from None
            raise


class _NothingToAnswer(Exception):
    """The session does not wait for an agent that is gone: roll the turn back."""


def _waits_for_an_answer(turn: Turn, registry: Registry) -> bool:
    """The head is a user message written for a person, and no person holds the session any
    more: its agent does not resolve (gone), or it is a bot (an operator handed it back)."""
    history = turn.history
    if not history or history[-1].role != "user" or not history[-1].data.get(OUTSIDE_TURNS):
        return False
    session = turn.session
    name = turn.active_agent
    agent = registry.get(name)
    if agent is None or not registry.allows(session.channel, session.account, name):
        return True
    return agent.kind != "human"


def _keep_only_the_message(turn: Turn, inbound: UserInput) -> None:
    """A cancelled turn: nothing it did is kept, but the user's message stays in the history,
    answered by nobody, so the next turn's model sees it beside the user's next message."""
    turn.discard()
    data = {**inbound.data, "cancelled": True}
    turn.append(NewMessage("user", inbound.text, data=data))


async def _unless_cancelled(
    session_id: str, work: Coroutine[Any, Any, T], cancel: asyncio.Event | None
) -> T:
    """Await ``work``; when ``cancel`` is set first, stop it and raise TurnCancelled."""
    if cancel is None:
        return await work
    if cancel.is_set():  # cancelled before it began: no model is asked
        work.close()
        raise TurnCancelled(session_id)
    body = asyncio.create_task(work)
    stop = asyncio.create_task(cancel.wait())
    try:
        await asyncio.wait({body, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (body, stop):
            task.cancel()
        await asyncio.gather(body, stop, return_exceptions=True)
    if cancel.is_set():
        raise TurnCancelled(session_id)
    return body.result()
