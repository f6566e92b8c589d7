"""The resolver: the session stores only a name; each turn binds it to a registry ``Agent``."""

from __future__ import annotations

import logging

from webhook_bot_gateway.store import Turn

from ._agent import Agent
from ._registry import Registry

logger = logging.getLogger("agents.resolver")

FALLBACK_EVENT = "agent_changed"


def resolve_agent(turn: Turn, registry: Registry) -> Agent:
    """The turn's active agent; a name that is not declared, or not allowed on the session's
    account, falls back to the starting agent of that account (its bot's or number's own, else
    ``agents.starting_agent``).

    The fallback is logged, recorded as a session event and made the session's active
    agent, all in the turn's transaction. It is never a placeholder without tools.
    """
    name = turn.active_agent
    session = turn.session
    agent = registry.get(name)
    if agent is not None and registry.allows(session.channel, session.account, name):
        return agent
    fallback = registry.starting_for(session.channel, session.account)
    why = "is not declared any more" if agent is None else "does not serve its account"
    logger.warning(
        "session %s: agent %r %s; falling back to %r",
        session.session_id,
        name,
        why,
        fallback.name,
    )
    turn.record_event(FALLBACK_EVENT, {"from": name, "to": fallback.name, "reason": "fallback"})
    turn.set_active_agent(fallback.name)
    return fallback
