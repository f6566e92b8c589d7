"""The admin API under /api/*: sessions, replies, handoffs, rewinds, dead letters, quarantine.

Every route needs ``Authorization: Bearer <admin.token>`` (compared in constant time, as the
bytes sent); an empty configured token turns the API off. Input is validated at the edge with
pydantic, and every refusal is a JSON error naming what was wrong: a body is read only when
sent as it is (415 otherwise), up to the application's ``client_max_size`` (1 MiB; 413) within
``server.read_timeout`` (408), and JSON nested deeper than ``MAX_JSON_DEPTH`` is refused (400).
Every answer is serialized through the models of ``_api_models``, which /api/openapi.json (the
one route without a token) is generated from.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import wraps
from pathlib import Path
from typing import NoReturn, TypeVar

from aiohttp import hdrs, web
from pydantic import BaseModel, ValidationError

from webhook_bot_gateway.agents import Agent
from webhook_bot_gateway.store import (
    PARKED_ERROR,
    InvalidSessionId,
    MessageNotFound,
    NewMessage,
    OutboxIn,
    RunActive,
    Session,
    SessionDeletedError,
    SessionNotFound,
    Store,
    StoreError,
    Turn,
    TurnActive,
    validate_session_id,
)

from .._accounts import account_allowed, gateway_registry
from .._convert import outbox_row, reply_target, text_message
from .._http import UNSUPPORTED_ENCODING, body_encoding, encoding_message
from .._keys import (
    AGENT_NAMES,
    AGENTS,
    DISPATCHER,
    METRICS,
    OPERATOR_WRITES,
    SENDER_WAKE,
    SETTINGS,
    STORE,
    AgentInfo,
)
from .._media.files import erase_session
from .._metrics import HANDOFFS
from .._reachability import is_blocked
from .._templates import (
    TemplateRefused,
    checked,
    summary,
    template_data,
    template_outbox,
)
from .._window import applies, free_text_refusal
from ._api_models import (
    MAX_JSON_DEPTH,
    MAX_ROW_ID,
    OPERATOR,
    DeadLetters,
    ErrorBody,
    ErrorDetail,
    EventOut,
    EventsPage,
    EventsQuery,
    HandoffBody,
    InboxOut,
    MessageOut,
    MessagesPage,
    OutboxOut,
    PageQuery,
    QuarantineDetail,
    QuarantineList,
    QuarantineOut,
    QuarantineQuery,
    ReplyAnswer,
    ReplyBody,
    RewindBody,
    SessionDetail,
    SessionOut,
    SessionsPage,
    SessionsQuery,
    TemplateBody,
)
from ._export import ExportQuery, SessionExport, build_export, write_zip
from ._handoff import hand_over, left_waiting
from ._openapi import openapi_json
from ._operator_writes import OperatorWrites, WaitedTooLong

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = logging.getLogger("gateway.admin")
M = TypeVar("M", bound=BaseModel)
HTTP_BLANKS = " \t"  # the optional whitespace around a header field's parts (RFC 9110)
WEB = "web"  # the channel whose users read replies from the session's event log, not an outbox


class ApiError(Exception):
    """A refusal: status, code and a message naming the cause (and the field, if any)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        *,
        close: bool = False,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field
        self.close = close  # refused with the body unread: "Connection: close"

    def response(self) -> web.Response:
        body = ErrorBody(error=ErrorDetail(code=self.code, message=self.message, field=self.field))
        response = web.json_response(body.dump(), status=self.status)
        if self.status == 401:  # RFC 9110: a 401 names the scheme it wants (RFC 6750: Bearer)
            response.headers[hdrs.WWW_AUTHENTICATE] = 'Bearer realm="gateway"'
        if self.close:
            response.force_close()
        return response


def admin_route(handler: Handler) -> Handler:
    """Check the bearer token, then run ``handler``; ApiError becomes its JSON response."""

    @wraps(handler)
    async def guarded(request: web.Request) -> web.StreamResponse:
        try:
            _authorize(request)
            return await handler(request)
        except ApiError as exc:
            return exc.response()
        except StoreError as exc:  # one the handler does not answer itself: the store failed
            return store_failed(request, exc).response()

    return guarded


def store_failed(request: web.Request, exc: StoreError) -> ApiError:
    """A store error no handler answered (the admin API's, a web upload's). A store that
    did not answer (down, locked past its busy timeout) is 503, so the caller tries again; a
    session deleted meanwhile 404; any other store error a JSON 500 naming its code. One line
    in the log, no traceback."""
    log.warning("%s %s: the store failed (%s)", request.method, _pattern(request), exc.code)
    if isinstance(exc, SessionNotFound):  # deleted while the request ran
        return ApiError(404, "unknown_session", "no such session")
    if exc.code == "store_unavailable":
        return ApiError(503, "store_unavailable", "the store did not answer; try again")
    return ApiError(500, "store_error", f"the store could not do it ({exc.code})")


def _pattern(request: web.Request) -> str:
    """The route's pattern, not its path: a web session id in a path is a credential."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "?"


def _authorize(request: web.Request) -> None:
    token = request.app[SETTINGS].admin.token.get_secret_value().encode()
    if not token:
        raise ApiError(403, "admin_disabled", "admin.token is empty, so the admin API is off")
    sent = _bearer_token(request)
    if sent is None or not hmac.compare_digest(sent, token):
        raise ApiError(401, "unauthorized", "missing or wrong Authorization: Bearer token")


def _bearer_token(request: web.Request) -> bytes | None:
    """The bytes after ``Bearer `` exactly as sent, or None without a bearer token.

    aiohttp decodes header bytes as UTF-8 with ``surrogateescape``: bytes that are not UTF-8
    become lone surrogates, which encode back to those bytes only the same way.
    """
    scheme, _, sent = request.headers.get(hdrs.AUTHORIZATION, "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    try:
        # Only HTTP's blanks: a bare strip() also drops NBSP, NEL and other Unicode spaces, so
        # "<token>\u00a0" would pass for the token.
        return sent.strip(HTTP_BLANKS).encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no decoder makes: not a token either
        return None


def respond(answer: BaseModel, status: int = 200) -> web.Response:
    """An answer model as JSON (datetimes as ISO 8601 strings)."""
    return web.json_response(answer.model_dump(mode="json"), status=status)


def parse(model: type[M], data: object, *, strict: bool = False) -> M:
    """Validate ``data``; the first error becomes a 400 invalid_field naming the field.

    ``strict`` for a JSON body, whose values come typed: ``true``, ``"5"`` or ``5.0`` is then
    no integer. A query's values are text, parsed (``limit=5``).
    """
    try:
        return model.model_validate(data, strict=strict)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        item = first.get("ctx", {}).get("index")  # a list's item a field validator refused
        loc = (*first["loc"], item) if item is not None else first["loc"]
        field = ".".join(str(part) for part in loc) or "body"
        raise ApiError(400, "invalid_field", f"{field}: {first['msg']}", field) from None


async def json_body(request: web.Request, model: type[M]) -> M:
    """The request body as ``model``, strictly typed: 400 invalid_json, json_too_deep, or
    invalid_field naming the field; 408, 413 or 415 when the body itself cannot be read
    (``read_body``)."""
    await read_body(request)
    try:
        data = await request.json(loads=_loads)  # the bytes read_body read
    except RecursionError:  # json's C scanner gives up deeper than the interpreter's stack
        raise _too_deep() from None
    except NumberTooLong as exc:
        raise ApiError(400, "invalid_json", str(exc)) from None
    except NotJsonValue as exc:
        raise ApiError(400, "invalid_json", exc.said_of("the body")) from None
    except (ValueError, LookupError):  # UnicodeDecodeError; LookupError: an unknown charset
        raise ApiError(400, "invalid_json", "the body is not JSON") from None
    if nested_deeper_than(data, MAX_JSON_DEPTH):
        raise _too_deep()
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_json", "the body is not a JSON object")
    return parse(model, data, strict=True)


def check_identity(request: web.Request) -> None:
    """ApiError 415 for a body sent with a Content-Encoding, before any of it is read."""
    encoding = body_encoding(request)
    if encoding is not None:
        message = encoding_message(encoding)
        raise ApiError(415, UNSUPPORTED_ENCODING, message, close=True)


async def read_body(request: web.Request) -> bytes:
    """The whole body as sent, at most ``client_max_size`` bytes, within read_timeout."""
    check_identity(request)
    limit = request.client_max_size
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit)
    seconds = request.app[SETTINGS].server.read_timeout
    try:
        async with asyncio.timeout(seconds):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:  # a chunked body, counted as it came
        raise _too_large(limit) from None
    except TimeoutError:
        message = f"the body took over {seconds:g} s"
        raise ApiError(408, "request_timeout", message, close=True) from None
    except ConnectionError:  # the client went away mid-body: an INFO line, not a traceback
        where = _pattern(request)
        log.info("%s %s: the client went away before its body came", request.method, where)
        message = "the connection closed before the body came"
        raise ApiError(400, "incomplete_body", message, close=True) from None


def _too_large(limit: int) -> ApiError:
    message = f"the body is larger than {limit} bytes"
    return ApiError(413, "body_too_large", message, close=True)


class NumberTooLong(ValueError):
    """A JSON number with more digits than Python converts (``sys.get_int_max_str_digits``)."""


def _int(digits: str) -> int:
    try:
        return int(digits)
    except ValueError:
        raise NumberTooLong(f"a number in the body has {len(digits)} digits; too long") from None


class NotJsonValue(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity``: Python's json reads them, JSON has none."""

    def __init__(self, constant: str) -> None:
        super().__init__(constant)
        self.constant = constant

    def said_of(self, what: str) -> str:
        """The refusal's words, for ``what`` was sent (``the body``, ``the frame``)."""
        return f"{what} is not JSON: {self.constant} is not a JSON value"


def refuse_constant(name: str) -> NoReturn:
    raise NotJsonValue(name)


def _loads(text: str) -> object:
    return json.loads(text, parse_int=_int, parse_constant=refuse_constant)


def _too_deep() -> ApiError:
    message = f"the JSON nests arrays and objects deeper than {MAX_JSON_DEPTH} levels"
    return ApiError(400, "json_too_deep", message)


def nested_deeper_than(data: object, limit: int) -> bool:
    """Whether arrays and objects in ``data`` nest more than ``limit`` levels (no recursion)."""
    level, depth = [data], 0
    while level := [item for item in level if isinstance(item, list | dict)]:
        depth += 1
        if depth > limit:
            return True
        level = [
            child for item in level for child in (item.values() if isinstance(item, dict) else item)
        ]
    return False


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
        raise _unknown_session(sid)
    return session


def _run_active(sid: str) -> ApiError:
    return ApiError(409, "run_active", f"session {sid!r} has a turn running; try again soon")


@asynccontextmanager
async def operator_write(request: web.Request, sid: str) -> AsyncIterator[None]:
    """An operator's write to ``sid``, after this process's others that came first
    (``OperatorWrites``). 409 run_active when the store refuses it for a turn of the session
    (TurnActive, RunActive): with every operator write here finished, that is a model's turn
    or another process's; 409 run_active too when the writes before did not finish in time."""
    try:
        async with request.app[OPERATOR_WRITES].one_at_a_time(sid):
            yield
    except (RunActive, TurnActive):
        raise _run_active(sid) from None
    except WaitedTooLong as exc:
        raise ApiError(409, "run_active", str(exc)) from None


def _unknown_session(sid: str) -> ApiError:
    return ApiError(404, "unknown_session", f"no session {sid!r}")


@admin_route
async def list_sessions(request: web.Request) -> web.Response:
    """GET /api/sessions?limit=&offset=&channel=&status=&agent=&q="""
    query = parse(SessionsQuery, dict(request.query))
    store = request.app[STORE]
    found = await store.list_sessions(
        query.limit,
        query.offset,
        channel=query.channel,
        status=query.status,
        agent=query.agent,
        search=query.q,
    )
    total = await store.count_sessions(
        channel=query.channel, status=query.status, agent=query.agent, search=query.q
    )
    sessions = [SessionOut.model_validate(s, from_attributes=True) for s in found]
    return respond(SessionsPage(sessions=sessions, total=total))


@admin_route
async def show_session(request: web.Request) -> web.Response:
    """GET /api/sessions/{id}, with the replies parked while the user is blocked."""
    session = await existing_session(request)
    rows = await request.app[STORE].list_outbox(session.session_id)
    return respond(SessionDetail.of(session, rows))


def _session(session: Session) -> SessionOut:
    return SessionOut.model_validate(session, from_attributes=True)


@admin_route
async def session_messages(request: web.Request) -> web.Response:
    """GET /api/sessions/{id}/messages: the current branch, oldest first."""
    session = await existing_session(request)
    branch = await request.app[STORE].get_branch(session.session_id)
    return respond(MessagesPage(messages=[MessageOut.of(m) for m in branch]))


@admin_route
async def session_events(request: web.Request) -> web.Response:
    """GET /api/sessions/{id}/events?after=&limit=: the event log after ``after``, oldest first."""
    query = parse(EventsQuery, dict(request.query))
    sid = session_id(request)
    try:
        found = await request.app[STORE].list_events(sid, after=query.after, limit=query.limit)
    except SessionNotFound:
        raise _unknown_session(sid) from None
    events = [EventOut.model_validate(e, from_attributes=True) for e in found]
    return respond(EventsPage(events=events))


@admin_route
async def delete_session(request: web.Request) -> web.Response:
    """DELETE /api/sessions/{id}: erase it; a running turn then writes nothing back."""
    sid = session_id(request)
    root = Path(request.app[SETTINGS].media.root)
    if await erase_session(request.app[STORE], root, sid) is None:
        raise _unknown_session(sid)  # a folder left behind is logged: the rows are gone, 204
    dispatcher = request.app.get(DISPATCHER)
    if dispatcher is not None:
        dispatcher.session_erased(sid)
    return web.Response(status=204)


@admin_route
async def export_session(request: web.Request) -> web.StreamResponse:
    """GET /api/sessions/{id}/export?files=zip: everything held of the session (docs/data.md)."""
    query = parse(ExportQuery, dict(request.query))
    sid = session_id(request)
    document = await build_export(request.app[STORE], sid)
    if document is None:
        raise _unknown_session(sid)
    if query.files is None:
        return respond(document)
    return await _zip_response(request, document)


EXPORT_CHUNK = 1 << 16


async def _zip_response(request: web.Request, document: SessionExport) -> web.StreamResponse:
    """The zip form, built in a temporary file (unlinked at once) off the event loop."""
    root = Path(request.app[SETTINGS].media.root)
    name = f"{document.session.session_id}-export.zip"
    with tempfile.TemporaryFile() as spool:
        await asyncio.to_thread(write_zip, document, root, spool)
        size = spool.tell()
        spool.seek(0)
        response = web.StreamResponse(
            headers={
                "Content-Type": "application/zip",
                "Content-Disposition": f'attachment; filename="{name}"',
                "Content-Length": str(size),
            }
        )
        await response.prepare(request)
        if request.method != hdrs.METH_HEAD:  # a HEAD gets the headers (the zip's length) only
            while chunk := await asyncio.to_thread(spool.read, EXPORT_CHUNK):
                await response.write(chunk)
        await response.write_eof()
    return response


@admin_route
async def operator_reply(request: web.Request) -> web.Response:
    """POST /api/sessions/{id}/reply {"text"}: history and outbox in one commit, then sent.

    A web session gets no outbox row: its user reads replies from the session's event log,
    which the turn's commit writes.
    """
    session = await existing_session(request)
    body = await json_body(request, ReplyBody)
    sid = session.session_id
    try:
        async with operator_write(request, sid), request.app[STORE].turn(sid) as turn:
            _window_open(turn.session)  # read in the turn: the session as it commits
            data = {"operator": body.operator} if body.operator else {}
            turn.append(NewMessage(role="operator", text=body.text, agent=OPERATOR, data=data))
            if turn.session.channel != WEB:
                turn.add_outbox(_outbox(turn.session, body.text))
    except (SessionNotFound, SessionDeletedError):
        raise _unknown_session(sid) from None
    return _queued(request, turn)


def _queued(request: web.Request, turn: Turn) -> web.Response:
    """202 with the operator's stored message and its outbox row; the sender is woken."""
    queued = turn.committed_outbox[0] if turn.committed_outbox else None
    if queued is not None:
        request.app[SENDER_WAKE].set()
    answer = ReplyAnswer(
        message=MessageOut.of(turn.committed[0]),
        outbox_id=queued.id if queued else None,
        parked=queued is not None and queued.error == PARKED_ERROR,
    )
    return respond(answer, 202)


def _window_open(session: Session) -> None:
    """409 window_closed when WhatsApp would refuse free text (error 131047)."""
    closed = free_text_refusal(session, time.time())
    if closed is not None:
        message = f"{closed.describe()}: send a template (POST /api/sessions/{{id}}/template)"
        raise ApiError(409, "window_closed", message)


@admin_route
async def send_template(request: web.Request) -> web.Response:
    """POST /api/sessions/{id}/template {"name", "language", "parameters"}: a declared
    WhatsApp template, sent whatever the window (it is what reopens the conversation)."""
    session = await existing_session(request)
    body = await json_body(request, TemplateBody)
    if not applies(session):
        message = f"templates are WhatsApp's; session {session.session_id!r} is {session.channel}"
        raise ApiError(422, "not_whatsapp", message)
    config = request.app[SETTINGS].whatsapp
    try:
        template = checked(config, body.name, body.language, body.parameters)
    except TemplateRefused as exc:
        raise ApiError(exc.status, exc.code, exc.message, exc.field) from None
    sid = session.session_id
    data = template_data(template) | ({"operator": body.operator} if body.operator else {})
    try:
        async with operator_write(request, sid), request.app[STORE].turn(sid) as turn:
            text = summary(template)
            turn.append(NewMessage(role="operator", text=text, agent=OPERATOR, data=data))
            turn.add_outbox(template_outbox(turn.session, template))
    except (SessionNotFound, SessionDeletedError):
        raise _unknown_session(sid) from None
    return _queued(request, turn)


def _outbox(session: Session, text: str) -> OutboxIn:
    """The operator's reply; parked, not sent, while the user has blocked the bot."""
    chat = reply_target(session.chat_id, session.metadata)
    message = text_message(session.channel, session.account, chat, text)
    return outbox_row(session, message, parked=is_blocked(session.metadata))


@admin_route
async def handoff(request: web.Request) -> web.Response:
    """POST /api/sessions/{id}/handoff {"agent"}: make another agent answer from now on."""
    session = await existing_session(request)
    body = await json_body(request, HandoffBody)
    if body.agent not in request.app[AGENT_NAMES]:
        raise ApiError(400, "unknown_agent", f"no agent named {body.agent!r}", "agent")
    allowed = account_allowed(request.app[SETTINGS]).get((session.channel, session.account))
    if allowed and body.agent not in allowed:
        message = f"agent {body.agent!r} does not serve this session's account"
        raise ApiError(400, "agent_not_allowed", message, "agent")
    sid = session.session_id
    target = next(agent for agent in request.app[AGENTS] if agent.name == body.agent)
    try:  # refused while a turn runs: it would commit its own agent over ours
        async with operator_write(request, sid):
            updated = await hand_over(request.app[STORE], sid, target, time.time())
    except (SessionNotFound, SessionDeletedError):
        raise _unknown_session(sid) from None
    if updated.told_outbox:
        request.app[SENDER_WAKE].set()
    await _answer_if_left_waiting(request, sid, target)
    metrics = request.app[METRICS]
    metrics.inc(HANDOFFS, from_agent=session.active_agent, to_agent=body.agent, reason=OPERATOR)
    return respond(_session(updated.session))


async def _answer_if_left_waiting(request: web.Request, sid: str, target: AgentInfo) -> None:
    """Handed back to a bot with the user's messages to the person unanswered: the bot
    answers them now, in the background (the user would otherwise wait for their next
    message). A crash first leaves them to that next message's turn, which sees them."""
    dispatcher = request.app.get(DISPATCHER)
    if target.kind == "human" or dispatcher is None:
        return
    if await left_waiting(request.app[STORE], sid):
        dispatcher.answer_waiting_soon(sid)


@admin_route
async def rewind(request: web.Request) -> web.Response:
    """POST /api/sessions/{id}/rewind {"message_id"}: HEAD back to a message of the branch.

    The messages after it stay in the table (another branch); the next turn continues from it.
    """
    session = await existing_session(request)
    body = await json_body(request, RewindBody)
    sid, target = session.session_id, body.message_id
    store = request.app[STORE]
    # A turn running is the move's RunActive: the status read above may be another write's.
    async with operator_write(request, sid):
        branch = await store.get_branch(sid)
        if all(message.id != target for message in branch):
            raise await _off_branch(store, sid, target)
        try:
            moved = await store.set_active_head(sid, target)
        except SessionNotFound:
            raise _unknown_session(sid) from None
        except MessageNotFound:  # deleted and created again meanwhile
            raise _unknown_message(sid, target) from None
    return respond(_session(moved))


async def _off_branch(store: Store, sid: str, message_id: int) -> ApiError:
    """Why ``message_id`` is not on the current branch: another branch (409) or not ours (404)."""
    try:
        await store.get_branch(sid, head_id=message_id)
    except MessageNotFound:
        return _unknown_message(sid, message_id)
    except SessionNotFound:
        return _unknown_session(sid)
    message = f"message {message_id} is not on the current branch of {sid!r}"
    return ApiError(409, "not_on_branch", message, "message_id")


def _unknown_message(sid: str, message_id: int) -> ApiError:
    return ApiError(404, "unknown_message", f"session {sid!r} has no message {message_id}")


@admin_route
async def dead_letters(request: web.Request) -> web.Response:
    """GET /api/deadletters: dead inbox rows (turns that kept failing) and dead outbox rows."""
    page = parse(PageQuery, dict(request.query))
    store = request.app[STORE]
    inbox = await store.list_dead_inbox(page.limit, page.offset)
    outbox = await store.list_dead_outbox(page.limit, page.offset)
    return respond(
        DeadLetters(
            inbox=[InboxOut.model_validate(i, from_attributes=True) for i in inbox],
            outbox=[OutboxOut.model_validate(o, from_attributes=True) for o in outbox],
        )
    )


@admin_route
async def quarantine(request: web.Request) -> web.Response:
    """GET /api/quarantine: deliveries that could not be parsed, newest first, without bodies."""
    query = parse(QuarantineQuery, dict(request.query))
    store = request.app[STORE]
    items = await store.list_quarantine(query.limit, query.offset, pending_only=query.pending)
    return respond(QuarantineList(quarantine=[QuarantineOut.of(q) for q in items]))


@admin_route
async def quarantine_item(request: web.Request) -> web.Response:
    """GET /api/quarantine/{qid}: one quarantined delivery with its body (as UTF-8 text)."""
    number = _quarantine_id(request)
    item = await request.app[STORE].get_quarantine(number) if number else None
    if item is None:
        raise _unknown_quarantine(request)
    return respond(QuarantineDetail.of(item))


@admin_route
async def delete_quarantine_item(request: web.Request) -> web.Response:
    """DELETE /api/quarantine/{qid}: erase one quarantined delivery (docs/data.md)."""
    number = _quarantine_id(request)
    if not (number and await request.app[STORE].delete_quarantine(number)):
        raise _unknown_quarantine(request)
    return web.Response(status=204)


def _quarantine_id(request: web.Request) -> int | None:
    """The path's quarantine id; None for a number no row can have; 400 for no number."""
    raw = request.match_info["qid"]
    if not (raw.isascii() and raw.isdigit()):
        raise ApiError(400, "invalid_field", "quarantine id must be a number", "id")
    number = int(raw)
    return number if 0 < number <= MAX_ROW_ID else None


def _unknown_quarantine(request: web.Request) -> ApiError:
    return ApiError(
        404, "unknown_quarantine", f"no quarantined delivery {request.match_info['qid']}"
    )


@admin_route
async def unknown_route(request: web.Request) -> web.Response:
    """Anything else under /api/: a JSON 404 (after the token check)."""
    raise ApiError(404, "unknown_route", f"no admin route {request.method} {request.path}")


async def agent_names_ctx(app: web.Application) -> AsyncIterator[None]:
    """The declared agents' names, for handoffs (the registry is built once and closed)."""
    registry = await gateway_registry(app[SETTINGS])
    try:
        app[AGENT_NAMES] = frozenset(registry.names)
        app[METRICS].allow_agents(registry.names)  # the only agent names /metrics labels with
        declared = [registry.get(name) for name in registry.names]
        app[AGENTS] = tuple(
            AgentInfo(agent.name, agent.kind, agent.description, _told(agent))
            for agent in declared
            if agent
        )
    finally:
        await registry.aclose()
    yield


def _told(agent: Agent) -> str:
    """What a user handed to ``agent`` is told: a human agent's ``handoff_reply``."""
    return agent.handoff_reply if agent.kind == "human" else ""


def add_admin_routes(app: web.Application) -> None:
    """Register /api/* and the context that knows the agents' names.

    A route added here belongs in ``_openapi.OPERATIONS`` too (tests/gateway/test_openapi.py).
    """
    app.cleanup_ctx.append(agent_names_ctx)
    app[OPERATOR_WRITES] = OperatorWrites()
    router = app.router  # add_get answers HEAD too (else the catch-all's 404 would)
    router.add_get("/api/sessions", list_sessions)
    router.add_get("/api/sessions/{id:[^/]*}", show_session)
    router.add_delete("/api/sessions/{id:[^/]*}", delete_session)
    router.add_get("/api/sessions/{id:[^/]*}/messages", session_messages)
    router.add_post("/api/sessions/{id:[^/]*}/reply", operator_reply)
    router.add_post("/api/sessions/{id:[^/]*}/template", send_template)
    router.add_post("/api/sessions/{id:[^/]*}/handoff", handoff)
    router.add_post("/api/sessions/{id:[^/]*}/rewind", rewind)
    router.add_get("/api/sessions/{id:[^/]*}/events", session_events)
    router.add_get("/api/sessions/{id:[^/]*}/export", export_session)
    router.add_get("/api/deadletters", dead_letters)
    router.add_get("/api/quarantine", quarantine)
    router.add_get("/api/quarantine/{qid}", quarantine_item)
    router.add_delete("/api/quarantine/{qid}", delete_quarantine_item)
    router.add_get("/api/openapi.json", openapi_json)  # no token: it holds no data
    router.add_route("*", r"/api/{tail:[\s\S]*}", unknown_route)  # last; "." misses a newline
