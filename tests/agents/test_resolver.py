"""The resolver across restarts: the session keeps only the agent's name."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from webhook_bot_gateway.agents import AgentConfigError, Reply, Runner, UserInput
from webhook_bot_gateway.agents.testing import ScriptedModel, call, reply, transfer
from webhook_bot_gateway.store import SQLiteStore

from .conftest import make_registry


async def _handed_to_billing(db_path: Path) -> str:
    async with SQLiteStore(db_path) as store:
        session = await store.create_session("test", "bot", "7", "triage")
        triage = ScriptedModel(transfer("billing"))
        billing = ScriptedModel(reply("Billing here."))
        runner = Runner(store, make_registry(triage, billing))
        result = await runner.run_turn(session.session_id, UserInput("my bill"))
        assert result.agent_after == "billing"
        return session.session_id


async def test_resolver_handoff_survives_restart_with_tools(db_path: Path) -> None:
    session_id = await _handed_to_billing(db_path)
    # a new process: a new store on the same file, a new registry and runner
    billing = ScriptedModel(call("lookup_invoice", {"number": "INV-1001"}), reply("It is paid."))
    async with SQLiteStore(db_path) as store:
        runner = Runner(store, make_registry(ScriptedModel(), billing))
        result = await runner.run_turn(session_id, UserInput("INV-1001?"))
        branch = await store.get_branch(session_id)
    billing.assert_done()
    assert (result.agent_before, result.agent_after) == ("billing", "billing")
    assert result.replies == (Reply("It is paid.", "billing"),)
    assert billing.calls[0].tool_names == ["lookup_invoice", "transfer_to_triage"]
    assert billing.calls[1].messages[-1].text == "INV-1001: 49.00 EUR, paid"
    assert [m.agent for m in branch if m.role == "assistant"][-2:] == ["billing", "billing"]


async def test_resolver_unknown_agent_falls_back_to_starting_agent(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    session_id = await _handed_to_billing(db_path)
    triage = ScriptedModel(reply("Triage here."))
    async with SQLiteStore(db_path) as store:
        runner = Runner(store, make_registry(triage, billing=None))  # billing removed
        with caplog.at_level(logging.WARNING, logger="agents.resolver"):
            result = await runner.run_turn(session_id, UserInput("hello"))
        session = await store.get_session(session_id)
        events = await store.list_events(session_id)
    triage.assert_done()
    assert (result.agent_before, result.agent_after) == ("billing", "triage")
    assert result.replies == (Reply("Triage here.", "triage"),)
    assert triage.calls[0].tool_names == ["transfer_to_human"]  # triage with its own tools
    assert session is not None
    assert session.active_agent == "triage"
    [record] = [r for r in caplog.records if r.name == "agents.resolver"]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        f"session {session_id}: agent 'billing' is not declared any more; falling back to 'triage'"
    )
    changes = [(e.kind, e.detail) for e in events if e.kind == "agent_changed"]
    assert changes[-1] == (
        "agent_changed",
        {"from": "billing", "to": "triage", "reason": "fallback"},
    )


async def test_resolver_fallback_is_not_recorded_when_turn_rolls_back(db_path: Path) -> None:
    session_id = await _handed_to_billing(db_path)
    async with SQLiteStore(db_path) as store:
        failing = ScriptedModel(RuntimeError("model down"))
        runner = Runner(store, make_registry(failing, billing=None))
        with pytest.raises(RuntimeError, match="model down"):
            await runner.run_turn(session_id, UserInput("hello"))
        session = await store.get_session(session_id)
        events = await store.list_events(session_id)
    assert session is not None
    assert session.active_agent == "billing"
    assert [e.detail["reason"] for e in events if e.kind == "agent_changed"] == ["handoff"]


async def test_resolver_falls_back_to_the_accounts_own_starting_agent(db_path: Path) -> None:
    """A session of an account with its own starting agent falls back there, not to the
    global one, when its active agent is no longer declared."""
    async with SQLiteStore(db_path) as store:
        session = await store.create_session("telegram", "sales", "7", "gone")
        other = await store.create_session("telegram", "support", "8", "gone")
        triage = ScriptedModel(reply("Triage here."))
        billing = ScriptedModel(reply("Billing here."))
        registry = make_registry(triage, billing)
        registry.bind_accounts({("telegram", "sales"): "billing"})
        runner = Runner(store, registry)
        sales = await runner.run_turn(session.session_id, UserInput("hello"))
        support = await runner.run_turn(other.session_id, UserInput("hello"))
        events = await store.list_events(session.session_id)
    assert (sales.agent_before, sales.agent_after) == ("gone", "billing")
    assert sales.replies == (Reply("Billing here.", "billing"),)
    assert support.agent_after == "triage"
    changed = [e.detail for e in events if e.kind == "agent_changed"]
    assert changed == [{"from": "gone", "to": "billing", "reason": "fallback"}]


def test_registry_refuses_an_account_agent_that_is_not_declared() -> None:
    registry = make_registry(ScriptedModel())
    with pytest.raises(AgentConfigError, match="sales"):
        registry.bind_accounts({("telegram", "sales"): "billing"})
    assert registry.starting_for("telegram", "sales").name == "triage"


async def test_an_account_limited_to_some_agents_offers_and_takes_only_those(
    db_path: Path,
) -> None:
    """On an account that lists its agents, handoffs to others are neither offered nor taken,
    and a session whose agent is not listed falls back to the account's starting agent."""
    async with SQLiteStore(db_path) as store:
        session = await store.create_session("telegram", "sales", "7", "human")
        triage = ScriptedModel(transfer("human"), reply("Still me."))
        registry = make_registry(triage, ScriptedModel())
        registry.bind_accounts({}, {("telegram", "sales"): ["triage", "billing"]})
        result = await Runner(store, registry).run_turn(session.session_id, UserInput("person?"))
    triage.assert_done()
    assert (result.agent_before, result.agent_after) == ("human", "triage")
    assert triage.calls[0].tool_names == ["transfer_to_billing"]
    refused = triage.calls[1].messages[-1]
    assert refused.role == "tool"
    assert "does not serve this account" in (refused.text or "")
    assert registry.tool_specs(registry.starting_agent) != registry.tool_specs(
        registry.starting_agent, ("telegram", "sales")
    )
