"""The operator's handoff (POST /api/sessions/{id}/handoff) against a bot turn of the real
runner, in every order: the two never interleave.

A turn running when the handoff writes makes the handoff 409 ``run_active`` (the turn keeps its
reply and its agent); a turn that begins after the handoff's write sees the operator's agent
(a human agent: no model call, no bot reply) and cannot overwrite it. The handler reads the
session first (for 400/404) but decides nothing on that read. A handoff to a human agent with a
``handoff_reply`` is a turn of its own (the agent change, its event and the notice to the user
commit together), and a turn marks itself ``running`` in one transaction: two turns of a
session never overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from webhook_bot_gateway.agents import (
    ModelMessage,
    ModelResponse,
    Reply,
    Runner,
    ToolSpec,
    TurnResult,
    UserInput,
)
from webhook_bot_gateway.agents.testing import ScriptedModel, reply
from webhook_bot_gateway.gateway._admin import _handoff as handoff_module
from webhook_bot_gateway.gateway._keys import STORE
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.store import OutboxIn, SessionEvent, Store, Turn, TurnActive

from .ingest_helpers import AUTH, settings
from .pipeline_helpers import registry

Client = TestClient[web.Request, web.Application]
SID = "telegram-support-42"
HANDOFF = f"/api/sessions/{SID}/handoff"


@pytest.fixture
async def client(store_url: str, aiohttp_client: Any, tmp_path: Path) -> Client:
    # store_url first: set up before the app and torn down after it (the app's close still
    # writes to the store: it drops its lease).
    app = build_app(settings(tmp_path / "unused.db", store={"url": store_url}), ingest_only=True)
    made: Client = await aiohttp_client(app)
    await made.app[STORE].create_session("telegram", "support", "42", "triage")
    return made


def store_of(client: Client) -> Store:
    return client.app[STORE]


def queue_replies(turn: Turn, replies: Sequence[Reply]) -> None:
    """As the dispatcher does: each reply's send commits with the turn, or not at all."""
    for answer in replies:
        turn.add_outbox(OutboxIn(SID, "telegram", "support", "42", {"text": answer.text}))


class Gate:
    """A model step that waits until released, then answers."""

    def __init__(self, text: str = "a bot answer") -> None:
        self.started, self.release, self.text = asyncio.Event(), asyncio.Event(), text

    async def __call__(
        self, messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        self.started.set()
        await self.release.wait()
        return reply(self.text)


def start_turn(runner: Runner, text: str = "hello") -> asyncio.Task[TurnResult]:
    return asyncio.create_task(runner.run_turn(SID, UserInput(text), before_commit=queue_replies))


def bot_turn_ends(events: Sequence[SessionEvent]) -> list[int]:
    """The seqs of ``turn_finished`` of the turns that are not a human agent's handoff notice
    (a turn of its own, whose one answer is the human agent's)."""
    ends, notice = [], False
    for event in events:
        if event.kind == "turn_started":
            notice = False
        elif event.kind == "message" and event.detail.get("agent") == "human":
            notice = True
        elif event.kind == "turn_finished" and not notice:
            ends.append(event.seq)
    return ends


async def operator_events(store: Store) -> list[int]:
    events = await store.list_events(SID)
    return [e.seq for e in events if e.kind == "agent_changed" and e.detail["reason"] == "operator"]


async def test_a_handoff_while_the_bot_turn_runs_is_409_and_the_turn_keeps_its_reply(
    client: Client,
) -> None:
    store, gate = store_of(client), Gate()
    model = ScriptedModel(gate)
    runner = Runner(store, registry(model))
    turn = start_turn(runner)
    await gate.started.wait()  # the turn is asking its model
    response = await client.post(HANDOFF, headers=AUTH, json={"agent": "human"})
    assert response.status == 409
    assert (await response.json())["error"]["code"] == "run_active"
    gate.release.set()
    result = await turn
    assert [r.text for r in result.replies] == ["a bot answer"]
    session = await store.get_session(SID)
    assert session is not None
    assert (session.active_agent, session.status) == ("triage", "idle")
    assert await operator_events(store) == []
    # Retried once the turn ended, the handoff holds, and the next turn is the human's.
    assert (await client.post(HANDOFF, headers=AUTH, json={"agent": "human"})).status == 200
    after = await runner.run_turn(SID, UserInput("still there?"), before_commit=queue_replies)
    assert (after.agent_before, after.agent_after, after.replies) == ("human", "human", ())
    model.assert_done()  # the human turn never asked the bot's model


async def test_a_turn_starting_between_the_handlers_read_and_its_write_makes_it_409(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler read the session idle; the turn marks it running before the write: the
    write's own check in its transaction refuses, so the turn's reply and agent stand."""
    store, gate = store_of(client), Gate()
    runner = Runner(store, registry(ScriptedModel(gate)))
    turn = store.turn
    turns: list[asyncio.Task[TurnResult]] = []

    @contextlib.asynccontextmanager
    async def turn_slips_in(*args: Any, **kwargs: Any) -> AsyncIterator[Turn]:
        if not turns:  # the handoff's own turn (the bot's turn comes through here too)
            turns.append(start_turn(runner))
            await gate.started.wait()
        async with turn(*args, **kwargs) as opened:
            yield opened

    monkeypatch.setattr(store, "turn", turn_slips_in)
    response = await client.post(HANDOFF, headers=AUTH, json={"agent": "human"})
    assert response.status == 409
    assert (await response.json())["error"]["code"] == "run_active"
    gate.release.set()
    result = await turns[0]
    assert (result.agent_before, result.agent_after) == ("triage", "triage")
    assert [r.text for r in result.replies] == ["a bot answer"]
    session = await store.get_session(SID)
    assert session is not None
    assert session.active_agent == "triage"
    assert await operator_events(store) == []


async def test_a_turn_starting_right_after_the_handoffs_write_sees_the_operators_agent(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_of(client)
    model = ScriptedModel()  # any call of the bot's model fails the turn
    runner = Runner(store, registry(model))
    turn = store.turn
    turns: list[asyncio.Task[TurnResult]] = []

    @contextlib.asynccontextmanager
    async def turn_follows(*args: Any, **kwargs: Any) -> AsyncIterator[Turn]:
        first = not turns
        async with turn(*args, **kwargs) as opened:
            yield opened
        if first:  # the handoff committed; the bot's turn begins before the handler answers
            turns.append(start_turn(runner))
            await asyncio.sleep(0)

    monkeypatch.setattr(store, "turn", turn_follows)
    response = await client.post(HANDOFF, headers=AUTH, json={"agent": "human"})
    assert response.status == 200
    result = await turns[0]
    assert (result.agent_before, result.agent_after, result.replies) == ("human", "human", ())
    assert model.calls == []
    session = await store.get_session(SID)
    assert session is not None
    assert session.active_agent == "human"


async def test_handoffs_and_bot_turns_at_random_moments_never_interleave(client: Client) -> None:
    """Many rounds of a handoff racing a bot turn with random delays on both sides. In every
    round: the handoff is 409 and the bot's reply and agent stand, or it is 200 and the
    operator's agent is the session's at the end, any bot reply having committed before it.
    Over the whole event log: no operator handoff lands inside a turn."""
    store, chance = store_of(client), random.Random(20250101)

    async def thinking(
        messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        await asyncio.sleep(chance.uniform(0, 0.004))
        return reply("a bot answer")

    async def handoff() -> int:
        await asyncio.sleep(chance.uniform(0, 0.006))
        response = await client.post(HANDOFF, headers=AUTH, json={"agent": "human"})
        return response.status

    async def bot_turn(runner: Runner) -> TurnResult:
        await asyncio.sleep(chance.uniform(0, 0.006))
        while True:  # as the dispatcher does, a turn refused while the handoff's notice is
            try:  # being written runs again
                return await runner.run_turn(SID, UserInput("hello"), before_commit=queue_replies)
            except TurnActive:
                await asyncio.sleep(0.001)

    outcomes = set()
    for _ in range(40):
        await store.set_agent(SID, "triage", reason="test")
        model = ScriptedModel(thinking)
        runner = Runner(store, registry(model))
        status, result = await asyncio.gather(handoff(), bot_turn(runner))
        session = await store.get_session(SID)
        assert session is not None
        last_operator = (await operator_events(store) or [0])[-1]
        events = await store.list_events(SID)
        finished = bot_turn_ends(events)[-1]
        if status == 409:
            assert (result.agent_before, session.active_agent) == ("triage", "triage")
            assert [r.text for r in result.replies] == ["a bot answer"]
            outcomes.add("refused")
        else:
            assert status == 200
            assert session.active_agent == "human"
            if result.replies:  # the bot answered: its turn ended before the handoff
                assert result.agent_before == "triage"
                assert finished < last_operator
                outcomes.add("bot first")
            else:  # the turn began after the handoff: the human's turn, no bot reply
                assert (result.agent_before, result.agent_after) == ("human", "human")
                assert finished > last_operator
                assert model.calls == []  # the bot's model was not asked
                outcomes.add("handoff first")
    # The race itself happened (a handoff while the turn ran), and some other order too.
    assert "refused" in outcomes
    assert len(outcomes) > 1
    for turn_events in turns_of(await store.list_events(SID)):
        handoffs = [e for e in turn_events if e.kind == "agent_changed"]
        if any(e.detail["reason"] == "operator" for e in handoffs):
            # Only in the handoff's own turn: its one message is the human agent's notice.
            messages = [e.detail.get("agent") for e in turn_events if e.kind == "message"]
            assert messages == ["human"], f"an operator handoff landed inside a turn: {messages}"


def turns_of(events: Sequence[SessionEvent]) -> list[list[SessionEvent]]:
    """The events of each turn, from its ``turn_started`` to its end."""
    turns: list[list[SessionEvent]] = []
    running = False
    for event in events:
        if event.kind == "turn_started":
            turns.append([])
            running = True
        if running:
            turns[-1].append(event)
        if event.kind in ("turn_finished", "turn_cancelled"):
            running = False
    return turns


async def test_a_handoff_to_a_human_agent_and_its_notice_commit_together_or_not_at_all(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure while the notice is written (as a crash would be) leaves the session where it
    was: the handoff never stands without the user being told."""
    store = store_of(client)

    def fails(turn: Turn, agent: Any, now: float) -> None:
        raise RuntimeError("the notice could not be written")

    monkeypatch.setattr(handoff_module, "_tell", fails)
    response = await client.post(HANDOFF, headers=AUTH, json={"agent": "human"})
    assert response.status == 500
    session = await store.get_session(SID)
    assert session is not None
    assert (session.active_agent, session.status) == ("triage", "idle")
    assert await operator_events(store) == []
    monkeypatch.undo()
    assert (await client.post(HANDOFF, headers=AUTH, json={"agent": "human"})).status == 200
    failed, told = turns_of(await store.list_events(SID))
    assert [(e.kind, e.detail) for e in failed][-1] == ("turn_cancelled", {"reason": "failed"})
    kinds = [e.kind for e in told]
    assert kinds == ["turn_started", "agent_changed", "message", "turn_finished"]
    assert len(await store.list_outbox(SID)) == 1
