"""A user's cancel landing at a chosen point of a turn, on either store: what the dispatcher
answered must agree with what the turn committed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

import pytest

from webhook_bot_gateway.agents import Runner
from webhook_bot_gateway.agents.testing import ScriptedModel, reply
from webhook_bot_gateway.gateway._metrics import TURNS, Metrics
from webhook_bot_gateway.gateway._pipeline import _turns
from webhook_bot_gateway.gateway._pipeline._dispatcher import Dispatcher
from webhook_bot_gateway.gateway.config import DispatcherConfig
from webhook_bot_gateway.store import InboxIn, RunActive, Store, Turn

from .pipeline_helpers import add_inbox, inbound, registry

Point = Literal["begin", "commit", "refused"]


class HeldTurn:
    """The turns of a store wait at ``at`` (the begin, or the commit once the turn has its
    answer and ``before_commit`` has run) until ``release`` is set; ``reached`` says one is
    waiting there. The store's own turn does the rest. At "refused" the first turn waits at
    the begin, then is refused as if the session's turn ran in another process (RunActive):
    the lane runs the same rows again."""

    def __init__(self, at: Point) -> None:
        self.at = at
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        self.refused = False
        self.refusing = asyncio.Event()  # the begin was refused

    def install(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        real: Callable[..., Any] = store.turn
        monkeypatch.setattr(
            store, "turn", lambda sid, *a, **kw: _HeldScope(self, sid, real(sid, *a, **kw))
        )

    async def hold(self, point: Point) -> None:
        if point == self.at:
            self.reached.set()
            await self.release.wait()

    async def begin(self, session_id: str) -> None:
        await self.hold("refused" if self.at == "refused" else "begin")
        if self.at == "refused" and not self.refused:
            self.refused = True
            self.refusing.set()
            raise RunActive(session_id)


class _HeldScope:
    def __init__(self, held: HeldTurn, session_id: str, scope: Any) -> None:
        self._held = held
        self._session_id = session_id
        self._scope = scope

    async def __aenter__(self) -> Turn:
        await self._held.begin(self._session_id)
        turn: Turn = await self._scope.__aenter__()
        return turn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self._held.hold("commit")
        await self._scope.__aexit__(exc_type, exc, tb)


@dataclass(frozen=True)
class Outcome:
    accepted: bool  # what cancel_turn answered
    replies: list[str]  # the outbox rows the turn committed
    users: list[tuple[str | None, bool]]  # the user's messages kept, and whether marked cancelled
    ended: str  # the turn's last event: turn_finished or turn_cancelled
    outcomes: dict[str, float]  # gateway_turns_total by outcome


async def cancel_at(
    store: Store, monkeypatch: pytest.MonkeyPatch, at: Point, event: InboxIn
) -> Outcome:
    """Run the turn of ``event`` (answered "the answer"), cancel it while it waits at ``at``."""
    held = HeldTurn(at)
    held.install(store, monkeypatch)
    monkeypatch.setattr(_turns, "BUSY_RETRY_SECONDS", 0.0)  # a refused turn: again at once
    metrics = Metrics()
    runner = Runner(store, registry(ScriptedModel(reply("the answer"))))
    dispatcher = Dispatcher(store, runner, DispatcherConfig(retry_base_seconds=0), metrics=metrics)
    [sid] = await add_inbox(store, event)
    dispatcher.wake([sid])
    try:
        await asyncio.wait_for(held.reached.wait(), 10)
        accepted = await dispatcher.cancel_turn(sid)
        again = await dispatcher.cancel_turn(sid)
    finally:
        held.release.set()
    await asyncio.wait_for(dispatcher.wait_idle(), 10)
    assert again is accepted  # a second cancel is answered as the first
    assert await store.pending_inbox(sid, 10) == []  # the message is done either way
    branch = await store.get_branch(sid)
    events = [e.kind for e in await store.list_events(sid)]
    names = ("committed", "cancelled_by_user", "failed")
    return Outcome(
        accepted,
        [row.payload["text"] for row in await store.list_outbox(sid)],
        [(m.text, bool(m.data.get("cancelled"))) for m in branch if m.role == "user"],
        next(k for k in reversed(events) if k in ("turn_finished", "turn_cancelled")),
        {name: metrics.value(TURNS, outcome=name) for name in names},
    )


CASES = [
    # A cancel before the turn has its answer stops it; one while it commits the answer is
    # refused (past the point of no return); a turn of reactions runs no agent to stop.
    pytest.param("begin", inbound("hello", n=1), True, [], id="message-cancelled-at-begin"),
    # Accepted before a begin that is then refused (the session's turn runs elsewhere): the
    # cancel sticks to the rows, and the lane's next turn of them starts cancelled.
    pytest.param(
        "refused", inbound("hello", n=1), True, [], id="message-cancelled-then-begin-refused"
    ),
    pytest.param(
        "commit", inbound("hello", n=1), False, ["the answer"], id="message-cancelled-at-commit"
    ),
    pytest.param(
        "begin",
        inbound("", n=1, kind="reaction", reaction={"message_id": "m0", "emoji": "+1"}),
        False,
        [],
        id="reaction-cancelled-at-begin",
    ),
]


def check_agrees(outcome: Outcome, accepted: bool, replies: list[str]) -> None:
    """A cancel that was accepted left nothing but the user's message, marked cancelled; one
    refused left the turn as it would have been without it, answer committed."""
    assert outcome.accepted is accepted
    assert outcome.replies == replies
    if accepted:
        assert outcome.ended == "turn_cancelled"
        assert outcome.users == [("hello", True)]
        assert outcome.outcomes == {"committed": 0, "cancelled_by_user": 1, "failed": 0}
    else:
        assert outcome.ended == "turn_finished"
        assert [cancelled for _, cancelled in outcome.users] == [False]
        assert outcome.outcomes == {"committed": 1, "cancelled_by_user": 0, "failed": 0}
