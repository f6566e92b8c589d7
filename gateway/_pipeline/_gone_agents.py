"""At start: the sessions whose active agent is no longer declared (a renamed or removed agent).

Their next turn falls back to the account's starting agent (the resolver). A session whose
user wrote to a person (its head a user message written while a human agent held it) would
wait for that turn until the user writes again: nobody answers it, and it is in no queue. So
the start warns with the count of each such agent (the ones whose sessions wait for a person
first, then by name), and the fallback answers those waiting messages now
(``Dispatcher.answer_waiting``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from webhook_bot_gateway.agents import Registry
from webhook_bot_gateway.store import AgentCount, Store, StoreError

from ._dispatcher import Dispatcher

log = logging.getLogger("gateway.agents")

PAGE = 1000


async def gone_agents(store: Store, registry: Registry) -> list[AgentCount]:
    """The active agents of sessions that are not declared, those with unanswered sessions
    first, then by name."""
    counts = await store.agent_counts(registry.names)
    return sorted(counts, key=lambda count: (count.unanswered == 0, count.agent))


def gone_warning(counts: Sequence[AgentCount]) -> str | None:
    """One line for the log: each agent gone with its sessions; None when there is none."""
    if not counts:
        return None
    parts = [_part(count) for count in counts]
    total = sum(count.sessions for count in counts)
    return (
        f"{total} session(s) have an active agent that is not declared any more: "
        f"{'; '.join(parts)}. Their next turn falls back to their account's starting agent"
        " (docs/agents.md#resolver-and-handoffs)"
    )


def _part(count: AgentCount) -> str:
    waiting = (
        f", {count.unanswered} with messages to a person not answered yet: the fallback"
        " answers them now"
        if count.unanswered
        else ""
    )
    return f"{count.agent!r} {count.sessions}{waiting}"


async def waiting_on(store: Store, agents: Sequence[str]) -> list[str]:
    """The sessions of ``agents`` whose user wrote to a person since the last answer."""
    found: list[str] = []
    offset = 0
    while True:
        page = await store.waiting_sessions(agents, PAGE, offset)
        found += [waiting.session.session_id for waiting in page if waiting.unanswered]
        if len(page) < PAGE:
            return found
        offset += PAGE


async def answer_gone(store: Store, registry: Registry, dispatcher: Dispatcher) -> int:
    """Warn of the agents gone, and have the fallback answer the users waiting on them; how
    many sessions were answered. A store error is logged (the next start looks again)."""
    try:
        counts = await gone_agents(store, registry)
        warning = gone_warning(counts)
        if warning is None:
            return 0
        log.warning("%s", warning)
        waiting = [count.agent for count in counts if count.unanswered]
        sessions = await waiting_on(store, waiting) if waiting else []
    except StoreError as exc:
        log.error("could not look for sessions of agents not declared any more: %s", exc)
        return 0
    answered = 0
    for sid in sessions:
        answered += await dispatcher.answer_waiting(sid)
    return answered
