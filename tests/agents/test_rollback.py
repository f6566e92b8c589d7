"""A turn that fails, times out or is cancelled leaves the store exactly as before."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from webhook_bot_gateway.agents import (
    ModelBackendError,
    ModelResponse,
    Runner,
    TurnTimeout,
    UserInput,
)
from webhook_bot_gateway.agents.testing import Hang, ScriptedModel, call, reply, transfer
from webhook_bot_gateway.store import SQLiteStore

from .conftest import dump_tables, log_kinds, make_registry


async def _with_history(store: SQLiteStore, session_id: str) -> None:
    runner = Runner(store, make_registry(ScriptedModel(reply("Hi.")), ScriptedModel()))
    await runner.run_turn(session_id, UserInput("hello"))


def _failing_turn(billing_step: object) -> tuple[ScriptedModel, ScriptedModel]:
    """triage hands off, billing calls a tool, then ``billing_step`` happens."""
    triage = ScriptedModel(transfer("billing"))
    billing = ScriptedModel(call("lookup_invoice", {"number": "INV-1"}), billing_step)  # type: ignore[arg-type]
    return triage, billing


async def _assert_untouched(
    store: SQLiteStore,
    session_id: str,
    db_path: Path,
    before: dict[str, list[object]],
    reason: str = "failed",
) -> None:
    assert dump_tables(db_path) == before
    # The log says a turn began and ended without its commit, and nothing else.
    assert log_kinds(db_path)[-2:] == [
        ("turn_started", "{}"),
        ("turn_cancelled", json.dumps({"reason": reason}, separators=(",", ":"))),
    ]
    session = await store.get_session(session_id)
    assert session is not None
    assert (session.active_agent, session.status) == ("triage", "idle")
    assert [m.text for m in await store.get_branch(session_id)] == ["hello", "Hi."]


async def test_rollback_on_model_error(store: SQLiteStore, session_id: str, db_path: Path) -> None:
    await _with_history(store, session_id)
    before = dump_tables(db_path)
    triage, billing = _failing_turn(ModelBackendError("fake", "HTTP 400: bad request", 400))
    runner = Runner(store, make_registry(triage, billing))
    with pytest.raises(ModelBackendError, match="HTTP 400"):
        await runner.run_turn(session_id, UserInput("my invoice INV-1"))
    billing.assert_done()
    await _assert_untouched(store, session_id, db_path, before)


async def test_rollback_on_model_timeout(
    store: SQLiteStore, session_id: str, db_path: Path
) -> None:
    await _with_history(store, session_id)
    before = dump_tables(db_path)
    hang = Hang()
    triage, billing = _failing_turn(hang)
    # Time for the handoff and the (sync, so threaded) tool call on a loaded machine: the
    # model's hang is what times out.
    runner = Runner(store, make_registry(triage, billing), turn_timeout=0.5)
    with pytest.raises(TurnTimeout, match="longer than 0.5s") as caught:
        await runner.run_turn(session_id, UserInput("my invoice INV-1"))
    assert isinstance(caught.value, TimeoutError)
    assert hang.started.is_set()
    assert caught.value.waiting_on == "the model 'ScriptedModel'"
    await _assert_untouched(store, session_id, db_path, before, "timeout")


async def test_cancel_event_keeps_only_the_users_message(
    store: SQLiteStore, session_id: str, db_path: Path
) -> None:
    await _with_history(store, session_id)
    hang = Hang()
    triage, billing = _failing_turn(hang)
    runner = Runner(store, make_registry(triage, billing))
    cancel = asyncio.Event()
    turn = asyncio.create_task(
        runner.run_turn(session_id, UserInput("my invoice INV-1"), cancel=cancel)
    )
    await hang.started.wait()
    cancel.set()
    result = await turn
    assert result.cancelled
    assert (result.replies, result.agent_after) == ((), "triage")
    # The handoff, the tool call and its answer are gone; the message is kept, unanswered.
    branch = await store.get_branch(session_id)
    assert [(m.role, m.text) for m in branch] == [
        ("user", "hello"),
        ("assistant", "Hi."),
        ("user", "my invoice INV-1"),
    ]
    assert branch[-1].data == {"cancelled": True}
    session = await store.get_session(session_id)
    assert session is not None
    assert (session.active_agent, session.status) == ("triage", "idle")
    kinds = [kind for kind, _ in log_kinds(db_path)]
    assert kinds[-2:] == ["turn_started", "turn_cancelled"]
    assert "agent_changed" not in kinds


async def test_a_cancel_set_before_the_turn_asks_no_model(
    store: SQLiteStore, session_id: str, db_path: Path
) -> None:
    """A turn that starts cancelled (its cancel was accepted for an earlier try of its rows)
    commits the user's message alone without calling the model (it was called, then stopped)."""
    await _with_history(store, session_id)
    hang = Hang()
    triage, billing = _failing_turn(hang)
    runner = Runner(store, make_registry(triage, billing))
    cancel = asyncio.Event()
    cancel.set()
    result = await runner.run_turn(session_id, UserInput("my invoice INV-1"), cancel=cancel)
    assert result.cancelled
    assert not hang.started.is_set()
    branch = await store.get_branch(session_id)
    assert (branch[-1].text, branch[-1].data) == ("my invoice INV-1", {"cancelled": True})


async def test_rollback_on_task_cancellation(
    store: SQLiteStore, session_id: str, db_path: Path
) -> None:
    await _with_history(store, session_id)
    before = dump_tables(db_path)
    hang = Hang()
    triage, billing = _failing_turn(hang)
    runner = Runner(store, make_registry(triage, billing))
    turn = asyncio.create_task(runner.run_turn(session_id, UserInput("x"), cancel=asyncio.Event()))
    await hang.started.wait()
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    await _assert_untouched(store, session_id, db_path, before, "interrupted")


async def test_cancel_event_unset_lets_the_turn_commit(store: SQLiteStore, session_id: str) -> None:
    runner = Runner(store, make_registry(ScriptedModel(reply("ok"))))
    result = await runner.run_turn(session_id, UserInput("x"), cancel=asyncio.Event())
    assert [r.text for r in result.replies] == ["ok"]


async def test_cancel_set_as_the_agents_answer_still_stops_the_turn(
    store: SQLiteStore, session_id: str
) -> None:
    cancel = asyncio.Event()

    def answer(*_: object) -> ModelResponse:
        cancel.set()  # the user's cancel lands as the model's answer comes in: before the commit
        return reply("too late?")

    runner = Runner(store, make_registry(ScriptedModel(answer), ScriptedModel()))
    seen: list[bool] = []
    result = await runner.run_turn(
        session_id, UserInput("x"), cancel=cancel, before_commit=lambda *_: seen.append(True)
    )
    assert (result.cancelled, result.replies, seen) == (True, (), [True])
    assert [(m.text, m.data) for m in await store.get_branch(session_id)] == [
        ("x", {"cancelled": True})
    ]


async def test_cancel_set_once_before_commit_ran_changes_nothing(
    store: SQLiteStore, session_id: str
) -> None:
    """``before_commit`` is the point of no return: the turn commits what it has."""
    cancel = asyncio.Event()
    runner = Runner(store, make_registry(ScriptedModel(reply("ok")), ScriptedModel()))
    result = await runner.run_turn(
        session_id, UserInput("x"), cancel=cancel, before_commit=lambda *_: cancel.set()
    )
    assert (result.cancelled, [r.text for r in result.replies]) == (False, ["ok"])
    assert [m.text for m in await store.get_branch(session_id)] == ["x", "ok"]


async def test_raising_tool_does_not_abort_the_turn(store: SQLiteStore, session_id: str) -> None:
    from webhook_bot_gateway.agents import Agent, Registry, tool

    @tool
    def broken() -> str:
        """Fails."""
        raise KeyError("gone")

    model = ScriptedModel(call("broken"), reply("Sorry, that failed."))
    runner = Runner(store, Registry([Agent("triage", tools=[broken], model=model)], "triage"))
    result = await runner.run_turn(session_id, UserInput("x"))
    assert [r.text for r in result.replies] == ["Sorry, that failed."]
    assert model.calls[1].messages[-1].text == "error: broken failed: raised KeyError"
