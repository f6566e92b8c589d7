"""An operator's handoff (``POST /api/sessions/{id}/handoff``): the session's agent changes,
and a user handed to a human agent is told so, as a handoff in a turn tells them.

To any other agent, or to a human agent without a ``handoff_reply``, the handoff is
``set_agent``'s one transaction. To a human agent with one, it is a turn of its own: the agent
change, its ``agent_changed`` event and the notice (the agent's assistant message with its
outbox row) commit together, so no crash can leave the handoff made and the user untold. A web
session reads the notice from its event log; a WhatsApp session whose 24-hour window is closed
keeps it unsent, marked ``not_sent``, as the runner keeps a refused reply; a user who blocked
the bot gets it once back. Either way the handoff is refused (RunActive or TurnActive) while a
turn of the session runs: that turn would commit its own agent over the operator's.
"""

from __future__ import annotations

from dataclasses import dataclass

from webhook_bot_gateway.agents import NOT_SENT
from webhook_bot_gateway.channels.web import CHANNEL as WEB
from webhook_bot_gateway.store import (
    OUTSIDE_TURNS,
    NewMessage,
    Session,
    SessionNotFound,
    Store,
    Turn,
)

from .._convert import outbox_row, reply_target, text_message
from .._keys import AgentInfo
from .._reachability import is_blocked
from .._window import free_text_refusal
from ._api_models import OPERATOR

CHANGED = "agent_changed"


@dataclass(frozen=True, slots=True)
class HandedOver:
    """The session after the handoff, and whether the user's notice was queued to send."""

    session: Session
    told_outbox: bool


class _AlreadyHeld(Exception):
    """The agent holds the session already: the turn writes nothing."""


async def hand_over(store: Store, session_id: str, agent: AgentInfo, now: float) -> HandedOver:
    """Hand ``session_id`` to ``agent`` for an operator, telling the user in the same commit if
    ``agent`` is a human agent new to the session; RunActive or TurnActive while a turn runs,
    SessionNotFound (or SessionDeletedError) for none."""
    if not agent.handoff_reply:
        return HandedOver(await store.set_agent(session_id, agent.name, reason=OPERATOR), False)
    held = await store.get_session(session_id)
    if held is not None and held.active_agent == agent.name:
        return HandedOver(held, False)  # nothing to change, no turn to log (the usual case)
    told = False
    try:
        async with store.turn(session_id, recent_turns=1) as turn:
            before = turn.active_agent
            if before == agent.name:
                raise _AlreadyHeld
            turn.record_event(CHANGED, {"from": before, "to": agent.name, "reason": OPERATOR})
            turn.set_active_agent(agent.name)
            _tell(turn, agent, now)
        told = bool(turn.committed_outbox)
    except _AlreadyHeld:
        pass
    session = await store.get_session(session_id)
    if session is None:  # erased right after
        raise SessionNotFound(session_id)
    return HandedOver(session, told)


async def left_waiting(store: Store, session_id: str) -> bool:
    """Whether the session's head is a message the user wrote to a person, unanswered: an
    operator who hands it back to a bot leaves the bot to answer it (``answer_waiting``)."""
    branch = await store.get_branch(session_id)
    return bool(branch) and branch[-1].role == "user" and bool(branch[-1].data.get(OUTSIDE_TURNS))


def _tell(turn: Turn, agent: AgentInfo, now: float) -> None:
    """The human agent's ``handoff_reply``, in the history and (unless refused) the outbox."""
    session = turn.session
    closed = free_text_refusal(session, now)
    data = {NOT_SENT: closed.describe()} if closed is not None else {}
    turn.append(NewMessage("assistant", agent.handoff_reply, agent=agent.name, data=data))
    if closed is not None or session.channel == WEB:
        return  # a web session's commit writes it to its event log: that is the send
    chat = reply_target(session.chat_id, session.metadata)
    message = text_message(session.channel, session.account, chat, agent.handoff_reply)
    turn.add_outbox(outbox_row(session, message, parked=is_blocked(session.metadata)))
