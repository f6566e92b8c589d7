"""The admin API under /api/*: sessions, operator replies and handoffs, dead letters, quarantine.

Every route needs ``Authorization: Bearer <admin.token>`` (compared in constant time); an empty
configured token turns the API off. Input is validated at the edge with pydantic, and every
refusal is a JSON error naming what was wrong.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from functools import wraps
from typing import Any, Literal, TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents import build_registry
from store import (
    InvalidSessionId,
    Message,
    NewMessage,
    OutboxIn,
    RunActive,
    Session,
    SessionDeletedError,
    SessionNotFound,
    TurnActive,
    validate_session_id,
)

from ._convert import payload, reply_target, text_message
from ._http import json_error
from ._keys import AGENT_NAMES, SENDER_WAKE, SETTINGS, STORE
from ._quarantine import quarantine_json

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
M = TypeVar("M", bound=BaseModel)
OPERATOR = "operator"  # the agent name of an operator's messages
Status = Literal["idle", "running", "interrupted"]  # store.SESSION_STATUSES


class ApiError(Exception):
    """A refusal: status, code and a message naming the cause (and the field, if any)."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field

    def response(self) -> web.Response:
        extra = {"field": self.field} if self.field else {}
        return json_error(self.status, self.code, self.message, **extra)


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SessionsQuery(_Input):
    limit: int = Field(default=50, ge=1, le=500)
    offset: int = Field(default=0, ge=0)
    channel: str | None = None
    status: Status | None = None
    agent: str | None = None


class PageQuery(_Input):
    limit: int = Field(default=50, ge=1, le=500)
    offset: int = Field(default=0, ge=0)


class ReplyBody(_Input):
    text: str = Field(min_length=1, max_length=32_768)


class HandoffBody(_Input):
    agent: str = Field(min_length=1, max_length=64)


def admin_route(handler: Handler) -> Handler:
    """Check the bearer token, then run ``handler``; ApiError becomes its JSON response."""

    @wraps(handler)
    async def guarded(request: web.Request) -> web.StreamResponse:
        try:
            _authorize(request)
            return await handler(request)
        except ApiError as exc:
            return exc.response()

    return guarded


def _authorize(request: web.Request) -> None:
    token = request.app[SETTINGS].admin.token.get_secret_value().encode()
    if not token:
        raise ApiError(403, "admin_disabled", "admin.token is empty, so the admin API is off")
    scheme, _, sent = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(sent.strip().encode(), token):
        raise ApiError(401, "unauthorized", "missing or wrong Authorization: Bearer token")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=_default)


def _default(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def respond(data: object, status: int = 200) -> web.Response:
    """JSON with datetimes as ISO 8601 strings."""
    return web.json_response(data, status=status, dumps=_dumps)


def record(row: Any) -> dict[str, Any]:
    """A store dataclass as a JSON object."""
    return dataclasses.asdict(row)


def parse(model: type[M], data: object) -> M:
    """Validate ``data``; the first error becomes a 400 invalid_field naming the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "body"
        raise ApiError(400, "invalid_field", f"{field}: {first['msg']}", field) from None


async def json_body(request: web.Request, model: type[M]) -> M:
    """The request body as ``model``: 400 invalid_json, or invalid_field naming the field."""
    try:
        data = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "invalid_json", "the body is not JSON") from None
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_json", "the body is not a JSON object")
    return parse(model, data)


def session_id(request: web.Request) -> str:
    """The id in the path, validated before any lookup."""
    try:
        return validate_session_id(request.match_info["id"])
    except InvalidSessionId as exc:
        raise ApiError(400, "invalid_session_id", str(exc)) from None


async def existing_session(request: web.Request) -> Session:
    """The session named in the path; 400 or 404."""
    sid = session_id(request)
    session = await request.app[STORE].get_session(sid)
    if session is None:
        raise ApiError(404, "unknown_session", f"no session {sid!r}")
    return session


def _run_active(sid: str) -> ApiError:
    return ApiError(409, "run_active", f"session {sid!r} has a turn running; try again soon")


@admin_route
async def list_sessions(request: web.Request) -> web.Response:
    """GET /api/sessions?limit=&offset=&channel=&status=&agent="""
    query = parse(SessionsQuery, dict(request.query))
    store = request.app[STORE]
    found = await store.list_sessions(
        query.limit, query.offset, channel=query.channel, status=query.status, agent=query.agent
    )
    total = await store.count_sessions(
        channel=query.channel, status=query.status, agent=query.agent
    )
    return respond({"sessions": [record(s) for s in found], "total": total})


@admin_route
async def show_session(request: web.Request) -> web.Response:
    """GET /api/sessions/{id}"""
    return respond(record(await existing_session(request)))


@admin_route
async def session_messages(request: web.Request) -> web.Response:
    """GET /api/sessions/{id}/messages: the current branch, oldest first."""
    session = await existing_session(request)
    branch = await request.app[STORE].get_branch(session.session_id)
    return respond({"messages": [_message(m) for m in branch]})


def _message(message: Message) -> dict[str, Any]:
    return record(message)


@admin_route
async def delete_session(request: web.Request) -> web.Response:
    """DELETE /api/sessions/{id}: erase it; a running turn then writes nothing back."""
    sid = session_id(request)
    if not await request.app[STORE].delete_session(sid):
        raise ApiError(404, "unknown_session", f"no session {sid!r}")
    return web.Response(status=204)


@admin_route
async def operator_reply(request: web.Request) -> web.Response:
    """POST /api/sessions/{id}/reply {"text"}: history and outbox in one commit, then sent."""
    session = await existing_session(request)
    body = await json_body(request, ReplyBody)
    sid = session.session_id
    try:
        async with request.app[STORE].turn(sid) as turn:
            chat = reply_target(turn.session.chat_id, turn.session.metadata)
            message = text_message(turn.session.channel, turn.session.account, chat, body.text)
            turn.append(NewMessage(role="assistant", text=body.text, agent=OPERATOR))
            turn.add_outbox(
                OutboxIn(sid, turn.session.channel, turn.session.account, chat, payload(message))
            )
    except (RunActive, TurnActive):
        raise _run_active(sid) from None
    except (SessionNotFound, SessionDeletedError):
        raise ApiError(404, "unknown_session", f"no session {sid!r}") from None
    request.app[SENDER_WAKE].set()
    outbox = turn.committed_outbox[0]
    return respond({"message": _message(turn.committed[0]), "outbox_id": outbox.id}, 202)


@admin_route
async def handoff(request: web.Request) -> web.Response:
    """POST /api/sessions/{id}/handoff {"agent"}: make another agent answer from now on."""
    session = await existing_session(request)
    body = await json_body(request, HandoffBody)
    if body.agent not in request.app[AGENT_NAMES]:
        raise ApiError(400, "unknown_agent", f"no agent named {body.agent!r}", "agent")
    sid = session.session_id
    if session.status == "running":
        raise _run_active(sid)  # the turn would commit its own agent over ours
    store = request.app[STORE]
    try:
        updated = await store.update_session(sid, active_agent=body.agent)
    except SessionNotFound:
        raise ApiError(404, "unknown_session", f"no session {sid!r}") from None
    detail = {"from": session.active_agent, "to": body.agent, "reason": OPERATOR}
    await store.record_event(sid, "handoff", detail)
    return respond(record(updated))


@admin_route
async def dead_letters(request: web.Request) -> web.Response:
    """GET /api/deadletters: dead inbox rows (turns that kept failing) and dead outbox rows."""
    page = parse(PageQuery, dict(request.query))
    store = request.app[STORE]
    inbox = await store.list_dead_inbox(page.limit, page.offset)
    outbox = await store.list_dead_outbox(page.limit, page.offset)
    return respond({"inbox": [record(i) for i in inbox], "outbox": [record(o) for o in outbox]})


@admin_route
async def quarantine(request: web.Request) -> web.Response:
    """GET /api/quarantine: deliveries that could not be parsed, newest first, without bodies."""
    page = parse(PageQuery, dict(request.query))
    items = await request.app[STORE].list_quarantine(page.limit, page.offset)
    return respond({"quarantine": [quarantine_json(q) for q in items]})


@admin_route
async def quarantine_item(request: web.Request) -> web.Response:
    """GET /api/quarantine/{qid}: one quarantined delivery with its body (as UTF-8 text)."""
    raw = request.match_info["qid"]
    if not raw.isdigit():
        raise ApiError(400, "invalid_field", "quarantine id must be a number", "id")
    item = await request.app[STORE].get_quarantine(int(raw))
    if item is None:
        raise ApiError(404, "unknown_quarantine", f"no quarantined delivery {raw}")
    return respond({**quarantine_json(item), "body": item.body})


@admin_route
async def unknown_route(request: web.Request) -> web.Response:
    """Anything else under /api/: a JSON 404 (after the token check)."""
    raise ApiError(404, "unknown_route", f"no admin route {request.method} {request.path}")


async def agent_names_ctx(app: web.Application) -> AsyncIterator[None]:
    """The declared agents' names, for handoffs (the registry is built once and closed)."""
    registry = build_registry(app[SETTINGS].agents)
    try:
        app[AGENT_NAMES] = frozenset(registry.names)
    finally:
        await registry.aclose()
    yield


def add_admin_routes(app: web.Application) -> None:
    """Register /api/* and the context that knows the agents' names."""
    app.cleanup_ctx.append(agent_names_ctx)
    add = app.router.add_route
    add("GET", "/api/sessions", list_sessions)
    add("GET", "/api/sessions/{id:[^/]*}", show_session)
    add("DELETE", "/api/sessions/{id:[^/]*}", delete_session)
    add("GET", "/api/sessions/{id:[^/]*}/messages", session_messages)
    add("POST", "/api/sessions/{id:[^/]*}/reply", operator_reply)
    add("POST", "/api/sessions/{id:[^/]*}/handoff", handoff)
    add("GET", "/api/deadletters", dead_letters)
    add("GET", "/api/quarantine", quarantine)
    add("GET", "/api/quarantine/{qid}", quarantine_item)
    add("*", "/api/{tail:.*}", unknown_route)
