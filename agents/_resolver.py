"""The resolver: the session stores only a name; each turn binds it to a registry ``Agent``."""

from __future__ import annotations

import logging

from webhook_bot_gateway.store import Turn

from ._agent import Agent
from ._registry import Registry

logger = logging.getLogger("agents.resolver")

FALLBACK_EVENT = "agent_changed"


def resolve_agent(turn: Turn, registry: Registry) -> Agent:
    """The turn's active agent; an undeclared name falls back to the starting agent of the
    session's account (its bot's or number's own, else ``agents.starting_agent``).

    The fallback is logged, recorded as a session event and made the session's active
    agent, all in the turn's transaction. It is never a placeholder without tools.
    """
    name = turn.active_agent
    agent = registry.get(name)
    if agent is not None:
        return agent
    session = turn.session
    fallback = registry.starting_for(session.channel, session.account)
    logger.warning(
        "session %s: agent %r is not declared any more; falling back to %r",
        session.session_id,
        name,
        fallback.name,
    )
    turn.record_event(FALLBACK_EVENT, {"from": name, "to": fallback.name, "reason": "fallback"})
    turn.set_active_agent(fallback.name)
    return fallback
