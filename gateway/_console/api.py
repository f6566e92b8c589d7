"""Admin API routes the console needs beyond sessions and messages: the human queue, the
declared agents, cancelling a running turn, the live feed's ticket and what the console shows."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from aiohttp import web

from webhook_bot_gateway.store import Session, Store

from .._admin import ApiError, admin_route, existing_session, respond
from .._api_models import (
    AgentOut,
    AgentsPage,
    CancelAnswer,
    ConsoleConfig,
    QueuedSession,
    QueuePage,
    SandboxInfo,
    SessionOut,
    TicketAnswer,
)
from .._dispatcher import CANCEL_UNANSWERED, UNANSWERED_TEXT
from .._keys import AGENTS, DISPATCHER, SETTINGS, STORE
from .keys import TICKETS
from .tickets import TICKET_SECONDS

QUEUE_LIMIT = 500  # sessions per human agent in the queue


@admin_route
async def human_queue(request: web.Request) -> web.Response:
    """GET /api/queue: sessions whose active agent is a human agent, oldest waiting first."""
    store = request.app[STORE]
    humans = [agent.name for agent in request.app[AGENTS] if agent.kind == "human"]
    waiting: list[tuple[datetime, Session]] = []
    for name in humans:
        for session in await store.list_sessions(QUEUE_LIMIT, 0, agent=name):
            waiting.append((await _handed_at(store, session), session))
    waiting.sort(key=lambda pair: pair[0])
    now = time.time()
    queue = [
        QueuedSession(
            **SessionOut.model_validate(session, from_attributes=True).model_dump(),
            waiting_since=since,
            waiting_seconds=max(0.0, now - since.timestamp()),
        )
        for since, session in waiting
    ]
    return respond(QueuePage(queue=queue))


async def _handed_at(store: Store, session: Session) -> datetime:
    """When the session was last handed to its active agent (its creation if never)."""
    handed = session.created_at
    for event in await store.list_events(session.session_id):
        if event.kind == "agent_changed" and event.detail.get("to") == session.active_agent:
            handed = event.created_at
    return handed.astimezone(UTC)


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
        raise ApiError(409, "no_turn_running", "no turn of this session is running")
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
