"""What a turn writes inside its commit: its inbox rows done, and one outbox row per reply."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook_bot_gateway.agents import Reply
from webhook_bot_gateway.channels.web import CHANNEL as WEB
from webhook_bot_gateway.store import InboxItem, Turn

from .. import _convert as convert
from .. import _reachability as reachability
from .._templates import queued_templates, template_outbox
from ._cancels import Running
from ._typing import Typing


def before_commit(
    batch: Sequence[InboxItem],
    typing: Typing,
    returned: list[str],
    running: Running,
    turn: Turn,
    replies: Sequence[Reply],
) -> None:
    """Inside the turn's transaction: finish the inbox rows, keep a deep link's payload in the
    session's metadata, queue one outbox row per reply (parked while the user is blocked; a
    WhatsApp user who writes again is back: ``returned`` gets the session).

    The runner calls it at the turn's point of no return, once it has looked at the cancel
    event for the last time: from here a cancel is refused, as the turn commits what it has."""
    running.committing = True
    typing.stop()
    turn.complete_inbox([row.id for row in batch])
    payload = convert.last_start_payload([row.event for row in batch])
    if payload is not None:
        turn.update_metadata({convert.START_PAYLOAD: payload})
    _follow_number_change(turn, [row.event for row in batch])
    thread = convert.thread_of(batch)
    session = turn.session
    parked = reachability.is_blocked(session.metadata)
    if reachability.released_by_message(session.channel, session.metadata):
        turn.update_metadata({reachability.BLOCKED: False})
        turn.record_event("user_unblocked", {"reason": "the user wrote again"})
        returned.append(session.session_id)
        parked = False
    queue_replies(turn, replies, thread, parked=parked)


def _follow_number_change(turn: Turn, events: Sequence[Mapping[str, Any]]) -> None:
    """A WhatsApp user who changed their number, a Telegram group upgraded to a supergroup:
    the session's replies (agents', operators') go to the new chat from now on."""
    new_chat = convert.moved_chat(events)
    session = turn.session
    if new_chat is None or new_chat == convert.reply_target(session.chat_id, session.metadata):
        return
    turn.update_metadata({convert.MIGRATED_CHAT: new_chat})
    turn.record_event("chat_migrated", {"from": session.chat_id, "to": new_chat})


def queue_replies(
    turn: Turn, replies: Sequence[Reply], thread: str | None = None, *, parked: bool
) -> None:
    """One outbox row per reply and per template a tool queued (none for a web session)."""
    session = turn.session
    if session.channel == WEB:
        return  # the commit writes the replies to the session's event log: that is the send
    for template in queued_templates(turn):
        turn.add_outbox(template_outbox(session, template))
    chat = convert.reply_target(session.chat_id, session.metadata)
    for reply in replies:
        message = convert.outbound(session.channel, session.account, chat, reply, thread)
        turn.add_outbox(convert.outbox_row(session, message, parked=parked))


def queue_answers(turn: Turn, replies: Sequence[Reply]) -> None:
    """``answer_waiting``'s commit hook: the replies, parked while the user is blocked."""
    queue_replies(turn, replies, parked=reachability.is_blocked(turn.session.metadata))
