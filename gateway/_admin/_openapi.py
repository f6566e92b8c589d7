"""GET /api/openapi.json: an OpenAPI 3.1 document built from ``OPERATIONS`` and the models.

Every route under /api/ and /web/ has one ``Operation`` in the table below; the schemas come
from the same pydantic models the handlers answer through (``_api_models``), so the document
cannot drift from the answers, and tests/gateway/test_openapi.py fails while the router and the
table disagree. To document a new route, add one ``Operation``: its method and path template,
a summary, its query model, JSON body model or multipart file field, and its answers by status.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel

from ._api_models import (
    MAX_JSON_DEPTH,
    SESSION_ID_PATTERN,
    AgentsPage,
    AttachmentAnswer,
    CancelAnswer,
    ConsoleConfig,
    DeadLetters,
    ErrorBody,
    EventsPage,
    EventsQuery,
    HandoffBody,
    MessagesPage,
    PageQuery,
    QuarantineDetail,
    QuarantineList,
    QuarantineQuery,
    QueuePage,
    ReplyAnswer,
    ReplyBody,
    RewindBody,
    SessionDetail,
    SessionOut,
    SessionsPage,
    SessionsQuery,
    TemplateBody,
    TicketAnswer,
)
from ._export import ExportQuery, SessionExport

REF = "#/components/schemas/{model}"
BEARER = "bearer"
JSON = "application/json"
Mode = Literal["validation", "serialization"]


@dataclass(frozen=True, slots=True)
class Content:
    """An answer that is not one of the models: a description, a media type, its schema."""

    description: str
    media_type: str
    schema: Mapping[str, Any]


FILE = Content(
    "the file's bytes, with the content type it was stored with",
    "*/*",
    {"type": "string", "format": "binary"},
)
ZIP = Content(
    "with files=zip: session.json and files/<attachment id>",
    "application/zip",
    {"type": "string", "format": "binary"},
)
# An answer by status: a model (the JSON body), Content, or words. Words on an error status name
# the codes it may carry (the body is always ErrorBody); on a success they mean "no body".
Answer = type[BaseModel] | Content | str


@dataclass(frozen=True, slots=True)
class Operation:
    """One route: ``path`` is an OpenAPI template (``{id}``, not aiohttp's ``{id:[^/]*}``)."""

    method: str
    path: str
    summary: str
    responses: Mapping[int, Answer]
    auth: bool = True  # Authorization: Bearer <admin.token>; adds the 401 and 403 answers
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None  # a JSON object
    upload: str | None = None  # multipart/form-data with one file in this field
    description: str = ""
    also: Mapping[int, Content] = field(default_factory=dict)  # another media type of a status


# Path parameters by name: their schema and what they are.
PATH_PARAMETERS: Mapping[str, tuple[Mapping[str, Any], str]] = {
    "id": ({"type": "string", "pattern": SESSION_ID_PATTERN}, "session id"),
    "att_id": ({"type": "string", "pattern": "^[0-9a-f]{32}$"}, "attachment id"),
    "qid": ({"type": "integer", "minimum": 1}, "quarantine row id"),
}
BAD_ID = "invalid_session_id: the id is not 1..128 letters, digits, '_' or '-'"
STORE_DOWN = "store_unavailable: the store did not answer; try again"
NO_SESSION = "unknown_session"
BAD_BODY = (
    f"{BAD_ID}; invalid_json: not a JSON object; json_too_deep: arrays and objects nested"
    f" deeper than {MAX_JSON_DEPTH}; invalid_field: names the field"
)
# What any operation with a JSON body may answer before the body is parsed. Said once, in the
# document's description, not per operation: tests/gateway/test_openapi.py pins the exact
# statuses of an operation (rewind's).
BODY_REFUSALS: Mapping[int, str] = {
    408: "request_timeout: the body did not arrive within server.read_timeout",
    413: "body_too_large: over 1 MiB",
    415: "unsupported_encoding: a Content-Encoding other than identity (bodies are not inflated)",
}
DESCRIPTION = 'Errors are JSON: {"error": {"code", "message", "field"?}}. ' + (
    "Any operation with a JSON request body may also answer "
    + "; ".join(f"{status} {answer}" for status, answer in BODY_REFUSALS.items())
    + "."
)
BAD_QUERY = "invalid_field: names the query parameter"

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/api/sessions",
        "List sessions, most recently updated first",
        {200: SessionsPage, 400: BAD_QUERY},
        query=SessionsQuery,
    ),
    Operation(
        "GET",
        "/api/sessions/{id}",
        "One session",
        {200: SessionDetail, 400: BAD_ID, 404: NO_SESSION},
    ),
    Operation(
        "DELETE",
        "/api/sessions/{id}",
        "Erase a session: history, events, inbox and outbox rows, attachments",
        {204: "erased", 400: BAD_ID, 404: NO_SESSION},
    ),
    Operation(
        "GET",
        "/api/sessions/{id}/messages",
        "The current branch of the history, oldest first",
        {200: MessagesPage, 400: BAD_ID, 404: NO_SESSION},
    ),
    Operation(
        "GET",
        "/api/sessions/{id}/events",
        "The session's event log after a sequence number, oldest first",
        {200: EventsPage, 400: f"{BAD_ID}; {BAD_QUERY}", 404: NO_SESSION},
        query=EventsQuery,
    ),
    Operation(
        "GET",
        "/api/sessions/{id}/export",
        "Everything held of a session: every message of every branch, events, attachments",
        {200: SessionExport, 400: f"{BAD_ID}; {BAD_QUERY}", 404: NO_SESSION},
        query=ExportQuery,
        description="With files=zip the answer is application/zip: session.json (this schema,"
        " each stored file named in attachments[].file) and files/<attachment id>"
        " (docs/data.md).",
        also={200: ZIP},
    ),
    Operation(
        "POST",
        "/api/sessions/{id}/reply",
        "A human operator's reply: appended to the history and sent to the user",
        {
            202: ReplyAnswer,
            400: BAD_BODY,
            404: NO_SESSION,
            409: "run_active; window_closed: a WhatsApp session 24 hours or more after the"
            " user's last message (send a template)",
        },
        body=ReplyBody,
    ),
    Operation(
        "POST",
        "/api/sessions/{id}/template",
        "Send a declared WhatsApp message template (it may go outside the 24-hour window)",
        {
            202: ReplyAnswer,
            400: BAD_BODY,
            404: f"{NO_SESSION}; unknown_template: no such name and language declared",
            409: "run_active",
            422: "not_whatsapp: not a WhatsApp session; template_parameters: not as many"
            " parameters as the template declares",
        },
        body=TemplateBody,
    ),
    Operation(
        "POST",
        "/api/sessions/{id}/handoff",
        "Make another agent answer from now on",
        {
            200: SessionOut,
            400: f"{BAD_BODY}; unknown_agent; agent_not_allowed",
            404: NO_SESSION,
            409: "run_active",
        },
        body=HandoffBody,
    ),
    Operation(
        "POST",
        "/api/sessions/{id}/rewind",
        "Move HEAD back to a message of the current branch; the next turn continues from it",
        {
            200: SessionOut,
            400: BAD_BODY,
            404: f"{NO_SESSION}; unknown_message: not a message of this session",
            409: "run_active; not_on_branch: a message of another branch",
        },
        body=RewindBody,
    ),
    Operation(
        "GET",
        "/api/sessions/{id}/attachments/{att_id}",
        "One attachment's bytes",
        {200: FILE, 400: BAD_ID, 404: f"{NO_SESSION}; unknown_attachment"},
    ),
    Operation(
        "POST",
        "/api/sessions/{id}/cancel",
        "Stop the session's running turn: only the user's message is kept (docs/web.md)",
        {
            202: CancelAnswer,
            400: BAD_ID,
            404: NO_SESSION,
            409: "no_turn_running",
            503: f"cancel_unanswered: the process running the turn did not answer; {STORE_DOWN}",
        },
    ),
    Operation(
        "GET",
        "/api/queue",
        "The human-support queue: sessions a human agent holds, oldest waiting first",
        {200: QueuePage, 400: BAD_QUERY},
        query=PageQuery,
    ),
    Operation("GET", "/api/agents", "The declared agents and their kind", {200: AgentsPage}),
    Operation(
        "POST",
        "/api/console/ticket",
        "A one-time ticket for the console's live feed (GET /console/live)",
        {200: TicketAnswer},
    ),
    Operation(
        "GET",
        "/api/console/config",
        "What the console shows: whether the sandbox is on, and its accounts",
        {200: ConsoleConfig},
    ),
    Operation(
        "GET",
        "/api/deadletters",
        "Inbound messages whose turn kept failing and replies that could not be sent",
        {200: DeadLetters, 400: BAD_QUERY},
        query=PageQuery,
    ),
    Operation(
        "GET",
        "/api/quarantine",
        "Authenticated deliveries that could not be parsed, newest first",
        {200: QuarantineList, 400: BAD_QUERY},
        query=QuarantineQuery,
    ),
    Operation(
        "GET",
        "/api/quarantine/{qid}",
        "One quarantined delivery with its body",
        {200: QuarantineDetail, 400: "invalid_field: not a number", 404: "unknown_quarantine"},
    ),
    Operation(
        "DELETE",
        "/api/quarantine/{qid}",
        "Erase one quarantined delivery (its body held a user's message)",
        {204: "erased", 400: "invalid_field: not a number", 404: "unknown_quarantine"},
    ),
    Operation(
        "GET",
        "/api/openapi.json",
        "This document",
        {200: Content("OpenAPI 3.1", JSON, {"type": "object"})},
        auth=False,
    ),
    Operation(
        "POST",
        "/web/sessions/{id}/attachments",
        "Upload a file to a web session",
        {
            201: AttachmentAnswer,
            400: f"{BAD_ID}; invalid_body: not readable multipart/form-data, or cut short"
            '; missing_file: no file part, or an empty one with filename="" (none chosen)',
            404: NO_SESSION,
            408: "request_timeout: nothing sent for server.read_timeout seconds",
            413: "too_large: over media.max_bytes",
            409: "too_many_uploads: the session holds media.max_uploads_per_session files",
            415: "unsupported_encoding: a Content-Encoding other than identity",
            503: f"busy: too many uploads are being read; {STORE_DOWN}",
            507: "insufficient_storage: the file would leave less than media.min_free_bytes"
            " free on the server's disk",
        },
        auth=False,
        upload="file",
        description="No bearer token: the web session id is the web user's credential.",
    ),
)


def openapi_document(operations: Iterable[Operation] = OPERATIONS) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``operations``."""
    schemas = _Schemas()
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, schemas)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "webhook-bot-gateway admin and web API",
            "version": _version(),
            "description": DESCRIPTION,
        },
        "paths": paths,
        "components": {
            "schemas": dict(sorted(schemas.found.items())),
            "securitySchemes": {
                BEARER: {"type": "http", "scheme": "bearer", "description": "admin.token"}
            },
        },
    }


@cache
def cached_document() -> dict[str, Any]:
    """The document of ``OPERATIONS``, built once per process."""
    return openapi_document()


async def openapi_json(request: web.Request) -> web.Response:
    """GET /api/openapi.json, without a token: it holds no data."""
    return web.json_response(cached_document())


def _version() -> str:
    try:
        return metadata.version("webhook-bot-gateway")
    except metadata.PackageNotFoundError:  # run from a checkout that is not installed
        return "0+unknown"


class _Schemas:
    """components/schemas, gathered from the models' JSON schemas and their ``$defs``."""

    def __init__(self) -> None:
        self.found: dict[str, dict[str, Any]] = {}

    def ref(self, model: type[BaseModel], mode: Mode) -> dict[str, str]:
        return {"$ref": REF.format(model=self.add(model, mode))}

    def add(self, model: type[BaseModel], mode: Mode) -> str:
        schema = model.model_json_schema(ref_template=REF, mode=mode)
        for name, sub in schema.pop("$defs", {}).items():
            self._put(name, sub)
        self._put(model.__name__, schema)
        return model.__name__

    def inline(self, model: type[BaseModel], mode: Mode) -> dict[str, Any]:
        """A model's schema in place (query parameters), its ``$defs`` gathered."""
        schema = model.model_json_schema(ref_template=REF, mode=mode)
        for name, sub in schema.pop("$defs", {}).items():
            self._put(name, sub)
        return schema

    def _put(self, name: str, schema: dict[str, Any]) -> None:
        if self.found.setdefault(name, schema) != schema:
            raise ValueError(f"two different schemas are named {name!r}")


def _operation(op: Operation, schemas: _Schemas) -> dict[str, Any]:
    doc: dict[str, Any] = {"operationId": _operation_id(op), "summary": op.summary}
    if op.description:
        doc["description"] = op.description
    parameters = _path_parameters(op.path) + _query_parameters(op.query, schemas)
    if parameters:
        doc["parameters"] = parameters
    if op.body is not None:
        content = {JSON: {"schema": schemas.ref(op.body, "validation")}}
        doc["requestBody"] = {"required": True, "content": content}
    if op.upload is not None:
        doc["requestBody"] = _upload(op.upload)
    doc["responses"] = _responses(op, schemas)
    doc["security"] = [{BEARER: []}] if op.auth else []
    return doc


def _operation_id(op: Operation) -> str:
    words = re.findall(r"[A-Za-z0-9]+", op.path)
    return "_".join([op.method.lower(), *words])


def _path_parameters(path: str) -> list[dict[str, Any]]:
    parameters = []
    for name in re.findall(r"{(\w+)}", path):
        schema, description = PATH_PARAMETERS[name]
        parameters.append(
            {
                "name": name,
                "in": "path",
                "required": True,
                "description": description,
                "schema": dict(schema),
            }
        )
    return parameters


def _query_parameters(model: type[BaseModel] | None, schemas: _Schemas) -> list[dict[str, Any]]:
    if model is None:
        return []
    schema = schemas.inline(model, "validation")
    required = set(schema.get("required", ()))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": _not_null(prop)}
        for name, prop in schema["properties"].items()
    ]


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional query parameter's schema without its ``null`` (a query has no null)."""
    variants = [s for s in schema.get("anyOf", ()) if s != {"type": "null"}]
    if len(variants) != 1:
        return schema
    rest = {key: value for key, value in schema.items() if key != "anyOf"}
    if rest.get("default", 0) is None:
        del rest["default"]
    return {**variants[0], **rest}


def _upload(name: str) -> dict[str, Any]:
    file = {"type": "string", "format": "binary", "contentMediaType": "application/octet-stream"}
    form = {"type": "object", "properties": {name: file}, "required": [name]}
    return {"required": True, "content": {"multipart/form-data": {"schema": form}}}


def _responses(op: Operation, schemas: _Schemas) -> dict[str, Any]:
    answers: dict[int, Answer] = dict(op.responses)
    if op.auth:
        answers.setdefault(401, "unauthorized: missing or wrong Authorization: Bearer token")
        answers.setdefault(403, "admin_disabled: admin.token is empty, so the admin API is off")
        answers.setdefault(503, STORE_DOWN)
    found = {str(status): _response(status, answers[status], schemas) for status in sorted(answers)}
    for status, other in op.also.items():
        found[str(status)]["content"][other.media_type] = {"schema": dict(other.schema)}
    return found


def _response(status: int, answer: Answer, schemas: _Schemas) -> dict[str, Any]:
    if isinstance(answer, Content):
        content = {answer.media_type: {"schema": dict(answer.schema)}}
        return {"description": answer.description, "content": content}
    if isinstance(answer, str):
        if status < 400:
            return {"description": answer}
        return {"description": answer, "content": {JSON: {"schema": _error_ref(schemas)}}}
    description = (answer.__doc__ or answer.__name__).strip().splitlines()[0]
    return {
        "description": description,
        "content": {JSON: {"schema": schemas.ref(answer, "serialization")}},
    }


def _error_ref(schemas: _Schemas) -> dict[str, str]:
    return schemas.ref(ErrorBody, "serialization")
