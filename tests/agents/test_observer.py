"""The runner's observer: every model call with its outcome, and only committed handoffs."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from webhook_bot_gateway.agents import (
    Agent,
    ModelBackendError,
    ModelOutcome,
    Registry,
    Runner,
    TurnTimeout,
    UserInput,
)
from webhook_bot_gateway.agents.testing import Hang, ScriptedModel, reply, transfer
from webhook_bot_gateway.store import SQLiteStore

from .conftest import make_registry


@dataclass
class Seen:
    """A TurnObserver that keeps what it is told."""

    calls: list[tuple[str, ModelOutcome]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    handoffs: list[tuple[str, str]] = field(default_factory=list)

    def model_call(self, model: str, seconds: float, outcome: ModelOutcome) -> None:
        self.calls.append((model, outcome))
        self.seconds.append(seconds)

    def handoff(self, source: str, target: str) -> None:
        self.handoffs.append((source, target))


async def test_a_committed_turn_reports_each_model_call_and_its_handoff(
    store: SQLiteStore, session_id: str
) -> None:
    seen = Seen()
    triage, billing = ScriptedModel(transfer("billing")), ScriptedModel(reply("Billing here."))
    runner = Runner(store, make_registry(triage, billing), observer=seen)
    await runner.run_turn(session_id, UserInput("refund"))
    # Backends given as objects are named by their class (only config names them otherwise).
    assert seen.calls == [("ScriptedModel", "ok"), ("ScriptedModel", "ok")]
    assert all(seconds >= 0 for seconds in seen.seconds)
    assert seen.handoffs == [("triage", "billing")]


async def test_a_failed_turn_reports_the_failed_call_and_no_handoff(
    store: SQLiteStore, session_id: str
) -> None:
    seen = Seen()
    triage = ScriptedModel(transfer("billing"))
    billing = ScriptedModel(ModelBackendError("local", "model server down"))
    runner = Runner(store, make_registry(triage, billing), observer=seen)
    with pytest.raises(ModelBackendError):
        await runner.run_turn(session_id, UserInput("refund"))
    assert seen.calls == [("ScriptedModel", "ok"), ("ScriptedModel", "error")]
    assert seen.handoffs == []  # rolled back with the turn: the session never changed agent


async def test_a_timed_out_call_is_reported_cancelled(store: SQLiteStore, session_id: str) -> None:
    seen = Seen()
    runner = Runner(store, make_registry(ScriptedModel(Hang())), observer=seen, turn_timeout=0.05)
    with pytest.raises(TurnTimeout):
        await runner.run_turn(session_id, UserInput("hi"))
    assert seen.calls == [("ScriptedModel", "cancelled")]


def test_model_names_come_from_the_config() -> None:
    agents = [
        Agent("triage", model="local", handoffs=["human"]),
        Agent("human", kind="human"),
    ]
    registry = Registry(agents, "triage", models={"local": ScriptedModel()})
    triage = registry.get("triage")
    assert triage is not None
    assert registry.model_name(triage) == "local"
