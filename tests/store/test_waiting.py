"""The human-support queue's reads: sessions by how long they have waited for their agent,
and the sessions of each active agent (what a start checks against the declared agents)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from webhook_bot_gateway.store import OUTSIDE_TURNS, AgentCount, Store

from .conftest import START, FakeClock


def at(offset: float) -> datetime:
    return datetime.fromtimestamp(START + offset, tz=UTC)


async def test_waiting_sessions_are_ordered_by_their_handoff_not_their_last_update(
    store: Store, clock: FakeClock
) -> None:
    for chat in ("1", "2", "3"):
        await store.create_session("web", "x", chat, "triage")
    clock.advance(10)
    await store.set_agent("web-x-2", "human", reason="handoff")
    clock.advance(10)
    await store.set_agent("web-x-1", "human", reason="handoff")
    clock.advance(10)
    await store.append_message("web-x-2", "user", "anyone?")  # the most recently updated now
    waiting = await store.waiting_sessions(["human"])
    assert [(w.session.session_id, w.since) for w in waiting] == [
        ("web-x-2", at(10)),
        ("web-x-1", at(20)),
    ]
    assert [w.session.session_id for w in await store.waiting_sessions(["human"], 1, 1)] == [
        "web-x-1"
    ]


async def test_a_session_waits_since_its_last_handoff_to_its_agent(
    store: Store, clock: FakeClock
) -> None:
    await store.create_session("web", "x", "1", "triage")
    clock.advance(5)
    await store.set_agent("web-x-1", "human", reason="handoff")
    clock.advance(5)
    await store.set_agent("web-x-1", "triage", reason="operator")
    clock.advance(5)
    await store.set_agent("web-x-1", "human", reason="handoff")
    [waiting] = await store.waiting_sessions(["human"])
    assert waiting.since == at(15)


async def test_a_session_started_on_the_agent_waits_since_its_creation_across_agents(
    store: Store, clock: FakeClock
) -> None:
    await store.create_session("web", "x", "b", "desk")  # never handed: since its creation
    clock.advance(1)
    await store.create_session("web", "x", "a", "human")
    await store.create_session("web", "x", "c", "triage")
    waiting = await store.waiting_sessions(["human", "desk"])
    assert [(w.session.session_id, w.since) for w in waiting] == [
        ("web-x-b", at(0)),
        ("web-x-a", at(1)),
    ]
    assert await store.waiting_sessions([]) == []


async def test_unanswered_means_the_user_wrote_for_a_person_since_the_last_answer(
    store: Store,
) -> None:
    for chat in ("1", "2", "3"):
        await store.create_session("web", "x", chat, "human")
    await store.append_message("web-x-1", "user", "hello?", data={OUTSIDE_TURNS: True})
    await store.append_message("web-x-2", "user", "hello?", data={OUTSIDE_TURNS: True})
    await store.append_message("web-x-2", "operator", "Ann here", agent="operator")
    flags = {w.session.session_id: w.unanswered for w in await store.waiting_sessions(["human"])}
    assert flags == {"web-x-1": True, "web-x-2": False, "web-x-3": False}


async def test_agent_counts_name_each_active_agent_but_the_excluded(store: Store) -> None:
    await store.create_session("web", "x", "1", "human")
    await store.create_session("web", "x", "2", "human")
    await store.create_session("web", "x", "3", "billing")
    await store.create_session("web", "x", "4", "triage")
    await store.append_message("web-x-1", "user", "hello?", data={OUTSIDE_TURNS: True})
    assert await store.agent_counts(["triage"]) == [
        AgentCount("billing", 1, 0),
        AgentCount("human", 2, 1),
    ]
    assert [c.agent for c in await store.agent_counts()] == ["billing", "human", "triage"]
    assert await store.agent_counts(["triage", "billing", "human"]) == []


@pytest.mark.parametrize("agents", ["human", ["hu\x00man"], [None]])
async def test_waiting_sessions_refuse_a_bad_agent_list(store: Store, agents: object) -> None:
    with pytest.raises(ValueError, match="agents"):
        await store.waiting_sessions(agents)  # type: ignore[arg-type]


async def test_waiting_sessions_check_the_page(store: Store) -> None:
    with pytest.raises(ValueError, match="limit"):
        await store.waiting_sessions(["human"], 0)
    with pytest.raises(ValueError, match="offset"):
        await store.waiting_sessions(["human"], 10, -1)
