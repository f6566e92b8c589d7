"""A dead-lettered turn, kept in the history so that the next agent sees what happened.

The failed turn left no trace (it rolled back), so its user message, the apology the user was
sent and the handoff that followed are written here in one turn of their own: the message as
a user message marked ``dead_letter``, the apology as an assistant message whose
``dead_letter`` data names the agent the session went to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook_bot_gateway.agents import DEAD_LETTER, NOT_SENT, Registry, ReplyGuard
from webhook_bot_gateway.channels.web import CHANNEL as WEB
from webhook_bot_gateway.store import NewMessage, Session, Store, Turn

from .. import _convert as convert
from .._reachability import is_blocked
from ..config import DispatcherConfig

NO_PERSON_APOLOGY = "Sorry, something went wrong on our side. Please write again in a moment."


@dataclass(frozen=True, slots=True)
class DeadLetterRoute:
    """Where a dead-lettered session goes, and what its user is told: the apology promises a
    person only when a human agent holds the session afterwards."""

    registry: Registry
    target: str | None  # ``dispatcher.dead_letter_handoff``, declared; None for no handoff
    apology: str  # a human agent holds the session afterwards
    apology_no_person: str  # none does

    @classmethod
    def of(
        cls, registry: Registry, config: DispatcherConfig, target: str | None
    ) -> DeadLetterRoute:
        """The route of ``[dispatcher]``'s keys (``target``: the handoff, checked declared)."""
        no_person = config.apology_no_person
        if no_person is None:  # the default follows ``apology``: "" sends none either way
            no_person = NO_PERSON_APOLOGY if config.apology else ""
        return cls(registry, target, config.apology, no_person)

    def handoff(self, session: Session) -> str | None:
        """The agent to hand ``session`` to: the target, unless it already holds the session
        or the session's account does not allow it (its bot's or number's ``agents``)."""
        target = self.target
        if target is None or target == session.active_agent:
            return None
        if not self.registry.allows(session.channel, session.account, target):
            return None
        return target

    def apology_with(self, agent: str) -> str:
        """The apology for a session that ``agent`` holds afterwards."""
        found = self.registry.get(agent)
        return (
            self.apology if found is not None and found.kind == "human" else self.apology_no_person
        )


async def record_dead_letter(
    store: Store,
    session_id: str,
    events: Sequence[Mapping[str, Any]],
    route: DeadLetterRoute,
    reply_guard: ReplyGuard | None = None,
) -> tuple[str, str] | None:
    """Write the failed message, the apology (with its outbox row) and the handoff the route
    gives in one commit; the handoff as (from, to), or None when there was none. An apology
    ``reply_guard`` refuses (WhatsApp's window closed) is kept unsent, marked ``not_sent``."""
    async with store.turn(session_id) as turn:
        before = turn.session.active_agent
        target = route.handoff(turn.session)
        handoff = (before, target) if target else None
        apology = route.apology_with(target or before)
        inbound = convert.user_input(events)
        turn.append(NewMessage("user", inbound.text, data={**inbound.data, DEAD_LETTER: True}))
        if apology:
            refusal = reply_guard(turn.session) if reply_guard else None
            _apologise(turn, apology, handoff, refusal)
        if handoff is not None:
            turn.record_event(
                "agent_changed", {"from": before, "to": handoff[1], "reason": DEAD_LETTER}
            )
            turn.set_active_agent(handoff[1])
    return handoff


def _apologise(
    turn: Turn, apology: str, handoff: tuple[str, str] | None, refusal: str | None
) -> None:
    mark = {"handoff": handoff[1] if handoff else None}
    data: dict[str, Any] = {DEAD_LETTER: mark}
    if refusal is not None:
        data[NOT_SENT] = refusal
    turn.append(NewMessage("assistant", apology, data=data))
    session = turn.session
    if refusal is not None:
        return  # the platform would refuse it: kept, as a refused reply is
    if session.channel == WEB:
        return  # the commit writes the apology to the session's event log: that is the send
    chat = convert.reply_target(session.chat_id, session.metadata)
    message = convert.text_message(session.channel, session.account, chat, apology)
    # A user who blocked the bot gets it once back.
    turn.add_outbox(convert.outbox_row(session, message, parked=is_blocked(session.metadata)))
