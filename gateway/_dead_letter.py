"""A dead-lettered turn, kept in the history so that the next agent sees what happened.

The failed turn left no trace (it rolled back), so its user message, the apology the user was
sent and the handoff that followed are written here in one turn of their own: the message as
a user message marked ``dead_letter``, the apology as an assistant message whose
``dead_letter`` data names the agent the session went to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook_bot_gateway.agents import DEAD_LETTER
from webhook_bot_gateway.channels.web import CHANNEL as WEB
from webhook_bot_gateway.store import NewMessage, Store, Turn

from . import _convert as convert
from ._reachability import is_blocked


async def record_dead_letter(
    store: Store,
    session_id: str,
    events: Sequence[Mapping[str, Any]],
    apology: str,
    target: str | None,
) -> tuple[str, str] | None:
    """Write the failed message, the apology (with its outbox row) and the handoff to
    ``target`` in one commit; the handoff as (from, to), or None when there was none."""
    async with store.turn(session_id) as turn:
        before = turn.session.active_agent
        handoff = (before, target) if target and target != before else None
        inbound = convert.user_input(events)
        turn.append(NewMessage("user", inbound.text, data={**inbound.data, DEAD_LETTER: True}))
        if apology:
            _apologise(turn, apology, handoff)
        if handoff is not None:
            turn.record_event(
                "agent_changed", {"from": before, "to": target, "reason": DEAD_LETTER}
            )
            turn.set_active_agent(handoff[1])
    return handoff


def _apologise(turn: Turn, apology: str, handoff: tuple[str, str] | None) -> None:
    mark = {"handoff": handoff[1] if handoff else None}
    turn.append(NewMessage("assistant", apology, data={DEAD_LETTER: mark}))
    session = turn.session
    if session.channel == WEB:
        return  # the commit writes the apology to the session's event log: that is the send
    chat = convert.reply_target(session.chat_id, session.metadata)
    message = convert.text_message(session.channel, session.account, chat, apology)
    # A user who blocked the bot gets it once back.
    turn.add_outbox(convert.outbox_row(session, message, parked=is_blocked(session.metadata)))
