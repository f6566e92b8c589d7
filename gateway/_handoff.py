"""An operator's handoff (``POST /api/sessions/{id}/handoff``): the session's agent changes,
and a user handed to a human agent is told so, as a handoff in a turn tells them.

The handoff is ``set_agent``'s one transaction (refused while a turn runs). Then, for a human
agent with a ``handoff_reply`` that did not hold the session already, that reply is written in
a turn of its own, as the agent's assistant message with its outbox row (a web session reads it
from its event log; a WhatsApp session whose 24-hour window is closed keeps it unsent, marked
``not_sent``, as the runner keeps a refused reply; a user who blocked the bot gets it once
back). A turn of the session that began meanwhile (the human agent's: it records the user's
message and answers nothing) is waited out; a crash between the two commits loses the notice.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from webhook_bot_gateway.agents import NOT_SENT
from webhook_bot_gateway.channels.web import CHANNEL as WEB
from webhook_bot_gateway.store import (
    NewMessage,
    RunActive,
    Session,
    SessionDeletedError,
    SessionNotFound,
    Store,
    Turn,
    TurnActive,
)

from ._api_models import OPERATOR
from ._convert import outbox_row, reply_target, text_message
from ._keys import AgentInfo
from ._reachability import is_blocked
from ._window import free_text_refusal

log = logging.getLogger("gateway.admin")

NOTICE_TRIES = 20  # a running turn of the session is waited out this many times...
NOTICE_WAIT = 0.1  # ...this long each


@dataclass(frozen=True, slots=True)
class HandedOver:
    """The session after the handoff, and whether the user's notice was queued to send."""

    session: Session
    told_outbox: bool


async def hand_over(store: Store, session_id: str, agent: AgentInfo, now: float) -> HandedOver:
    """Hand ``session_id`` to ``agent`` for an operator, then tell the user if ``agent`` is a
    human agent new to the session; RunActive while a turn runs (it would commit its own agent
    over this one), SessionNotFound for none."""
    before = await store.get_session(session_id)
    session = await store.set_agent(session_id, agent.name, reason=OPERATOR)
    if not agent.handoff_reply or before is None or before.active_agent == agent.name:
        return HandedOver(session, False)
    for _ in range(NOTICE_TRIES):
        try:
            told = await _notice(store, session_id, agent, now)
            return HandedOver(await store.get_session(session_id) or session, told)
        except (RunActive, TurnActive):
            await asyncio.sleep(NOTICE_WAIT)
        except (SessionNotFound, SessionDeletedError):
            break  # erased meanwhile: nobody to tell
    else:
        log.warning(
            "session %s: handed to %r, but a turn held it: not told", session_id, agent.name
        )
    return HandedOver(session, False)


async def _notice(store: Store, session_id: str, agent: AgentInfo, now: float) -> bool:
    """The notice, if ``agent`` still holds the session; whether it has an outbox row."""
    async with store.turn(session_id) as turn:
        if turn.active_agent != agent.name:
            return False  # handed on meanwhile: the notice would be wrong now
        _tell(turn, agent, now)
    return bool(turn.committed_outbox)


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
