"""Admin API routes the console needs beyond sessions and messages: the human queue, the
declared agents, cancelling a running turn, the live feed's ticket and what the console shows."""

from __future__ import annotations

import time
from datetime import UTC

from aiohttp import web

from webhook_bot_gateway.store import Waiting

from .._admin._api_models import (
    AgentOut,
    AgentsPage,
    CancelAnswer,
    ConsoleConfig,
    PageQuery,
    QueuedSession,
    QueuePage,
    SandboxInfo,
    SessionOut,
    TicketAnswer,
)
from .._admin._routes import ApiError, admin_route, existing_session, parse, respond
from .._cancel_refusal import not_stopped
from .._keys import AGENTS, DISPATCHER, SETTINGS, STORE
from .._pipeline._dispatcher import CANCEL_UNANSWERED, UNANSWERED_TEXT
from .keys import TICKETS
from .tickets import TICKET_SECONDS


@admin_route
async def human_queue(request: web.Request) -> web.Response:
    """GET /api/queue?limit=&offset=: sessions whose active agent is a human agent, the one
    waiting longest first (since its handoff to that agent), across every human agent."""
    query = parse(PageQuery, dict(request.query))
    store = request.app[STORE]
    humans = [agent.name for agent in request.app[AGENTS] if agent.kind == "human"]
    found = await store.waiting_sessions(humans, query.limit, query.offset)
    total = sum([await store.count_sessions(agent=name) for name in humans])
    now = time.time()
    queue = [_queued(waiting, now) for waiting in found]
    return respond(QueuePage(queue=queue, total=total))


def _queued(waiting: Waiting, now: float) -> QueuedSession:
    since = waiting.since.astimezone(UTC)
    return QueuedSession(
        **SessionOut.model_validate(waiting.session, from_attributes=True).model_dump(),
        waiting_since=since,
        waiting_seconds=max(0.0, now - since.timestamp()),
        unanswered=waiting.unanswered,
    )


@admin_route
async def agents(request: web.Request) -> web.Response:
    """GET /api/agents: the declared agents, with their kind."""
    found = [AgentOut.model_validate(agent, from_attributes=True) for agent in request.app[AGENTS]]
    return respond(AgentsPage(agents=found))


@admin_route
async def cancel_turn(request: web.Request) -> web.Response:
    """POST /api/sessions/{id}/cancel: stop the session's running turn (see docs/web.md)."""
    session = await existing_session(request)
    dispatcher = request.app.get(DISPATCHER)
    taken = False if dispatcher is None else await dispatcher.cancel(session.session_id)
    if taken is None:
        raise ApiError(503, CANCEL_UNANSWERED, UNANSWERED_TEXT)
    if not taken:
        why = await not_stopped(request.app[STORE], session.session_id)
        raise ApiError(409, "no_turn_running", why)
    return respond(CancelAnswer(cancelled=True), 202)


@admin_route
async def ticket(request: web.Request) -> web.Response:
    """POST /api/console/ticket: a one-time ticket for the live feed."""
    issued = request.app[TICKETS].issue()
    return respond(TicketAnswer(ticket=issued, expires_in=TICKET_SECONDS))


@admin_route
async def console_config(request: web.Request) -> web.Response:
    """GET /api/console/config: whether the sandbox is on, and its accounts."""
    settings = request.app[SETTINGS]
    sandbox = SandboxInfo(
        enabled=settings.sandbox.enabled,
        telegram=[bot.name for bot in settings.telegram.bots],
        whatsapp=[number.phone_number_id for number in settings.whatsapp.numbers],
    )
    return respond(ConsoleConfig(sandbox=sandbox))
