"""The runner loads only the last ``max_turns`` turns; the model's context stays the same."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from webhook_bot_gateway.agents import Agent, Registry, UserInput
from webhook_bot_gateway.agents._context import StoredMessage, build_context
from webhook_bot_gateway.agents.testing import ScriptedModel, call, reply
from webhook_bot_gateway.store import Message, NewMessage, Role, SQLiteStore
from webhook_bot_gateway.store.sqlite._turn import TurnScope

from .conftest import runner_for

AGENT = Agent("triage", "You route.")


# --- property: build_context on the full branch and on the limited one ------------------------

Op = tuple[str, int]
PLAIN: dict[str, Role] = {"system": "system", "user": "user", "assistant": "assistant"}


@st.composite
def scripts(draw: st.DrawFn) -> list[Op]:
    """Appends of every role (tool calls with results, orphans) and rewinds to any message."""
    kinds = st.sampled_from(["system", "user", "assistant", "call", "tool", "rewind"])
    return [(draw(kinds), draw(st.integers(0, 1_000))) for _ in range(draw(st.integers(0, 40)))]


@st.composite
def pendings(draw: st.DrawFn) -> list[NewMessage]:
    """What the current turn appended so far: nothing, or its user message and more."""
    roles: list[Role] = ["assistant", "tool", "system"]
    tail = draw(st.lists(st.sampled_from(roles), max_size=3))
    if not draw(st.booleans()):
        return []
    data: dict[str, Any] = {"tool_call_id": "c0", "name": "t"}
    return [NewMessage("user", "now")] + [
        NewMessage(role, role, data=data if role == "tool" else {}) for role in tail
    ]


async def _play(store: SQLiteStore, sid: str, script: list[Op]) -> None:
    made: list[Message] = []
    ids = itertools.count()
    for kind, pick in script:
        if kind == "rewind":
            if made:
                await store.set_active_head(sid, made[pick % len(made)].id)
            continue
        if kind == "call":
            calls = [{"id": f"c{pick % 5}", "name": "t", "arguments": "{}"}]
            message = await store.append_message(sid, "assistant", None, data={"tool_calls": calls})
        elif kind == "tool":
            data = {"tool_call_id": f"c{pick % 5}", "name": "t"}
            message = await store.append_message(sid, "tool", "result", data=data)
        else:
            message = await store.append_message(sid, PLAIN[kind], f"{kind} {next(ids)}")
        made.append(message)


async def _contexts_agree(script: list[Op], max_turns: int, pending: list[NewMessage]) -> None:
    async with SQLiteStore(":memory:") as store:
        sid = (await store.create_session("test", "bot", "1", "triage")).session_id
        await _play(store, sid, script)
        full = await store.get_branch(sid)
        async with store.turn(sid, recent_turns=max_turns) as turn:
            limited = list(turn.history)
        assert len(limited) <= len(full)
        everything: list[StoredMessage] = [*full, *pending]
        loaded: list[StoredMessage] = [*limited, *pending]
        assert build_context(AGENT, loaded, max_turns) == build_context(
            AGENT, everything, max_turns
        )


@settings(max_examples=200, deadline=None)
@given(scripts(), st.integers(1, 6), pendings())
def test_recent_turns_context_is_the_full_branch_context(
    script: list[Op], max_turns: int, pending: list[NewMessage]
) -> None:
    asyncio.run(_contexts_agree(script, max_turns, pending))


# --- the runner asks the store for max_turns turns ----------------------------------------------


class RecordingStore(SQLiteStore):
    """The real store, noting what each turn asked to load."""

    asked: list[int | None]

    def turn(
        self, session_id: str, *, recent_turns: int | None = None, inbox_ids: Sequence[int] = ()
    ) -> TurnScope:
        self.asked.append(recent_turns)
        return super().turn(session_id, recent_turns=recent_turns, inbox_ids=inbox_ids)


def _full_context(branch: Sequence[Message], max_turns: int) -> list[Any]:
    return build_context(Agent("triage", "You route."), branch, max_turns)


async def test_runner_loads_max_turns_and_model_sees_the_full_branch_context(
    db_path: Path,
) -> None:
    model = ScriptedModel()
    registry = Registry([Agent("triage", "You route.", model=model, tools=())], "triage")
    async with RecordingStore(db_path) as store:
        store.asked = []
        sid = (await store.create_session("test", "bot", "42", "triage")).session_id
        await store.append_message(sid, "system", "Be brief.")
        runner = runner_for(store, registry, max_turns=2)
        for n in range(5):
            model.add(reply(f"answer {n}"))
            await runner.run_turn(sid, UserInput(f"question {n}"))
            branch = await store.get_branch(sid)  # ..., this turn's question, its answer
            assert list(model.calls[-1].messages) == _full_context(branch[:-1], 2)
            assert model.calls[-1].messages[1].text == "Be brief."
        assert store.asked == [2] * 5
        model.assert_done()


async def test_runner_with_tool_turns_sees_the_same_context(db_path: Path) -> None:
    model = ScriptedModel()
    registry = Registry([Agent("triage", "You route.", model=model)], "triage")
    async with SQLiteStore(db_path) as store:
        sid = (await store.create_session("test", "bot", "43", "triage")).session_id
        runner = runner_for(store, registry, max_turns=1)
        for n in range(3):
            model.add(call("nothing", id=f"x{n}"), reply(f"done {n}"))
            await runner.run_turn(sid, UserInput(f"do {n}"))
        branch = await store.get_branch(sid)
        # the last call saw: instructions, this turn's user message, the call and its result
        assert list(model.calls[-1].messages) == _full_context(branch[:-1], 1)
        model.assert_done()
