"""GET /api/openapi.json: valid OpenAPI 3.1, served without a token, and the router's twin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from openapi_spec_validator import OpenAPIV31SpecValidator

from webhook_bot_gateway.gateway._admin._openapi import (
    OPERATIONS,
    cached_document,
    openapi_document,
)
from webhook_bot_gateway.gateway.app import build_app

from .ingest_helpers import settings

Client = TestClient[web.Request, web.Application]
CATCH_ALL = "/api/{tail}"
PREFIXES = ("/api/", "/web/")
UNAUTHENTICATED = {("GET", "/api/openapi.json"), ("POST", "/web/sessions/{id}/attachments")}


@pytest.fixture
def app(tmp_path: Path) -> web.Application:
    return build_app(settings(tmp_path / "gateway.db"), ingest_only=True)


def routed(app: web.Application) -> set[tuple[str, str]]:
    """(method, path template) of every /api/ and /web/ route but the catch-all.

    HEAD is left out: aiohttp's ``add_get`` adds it as the GET route's twin.
    """
    found = set()
    for route in app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        if path.startswith(PREFIXES) and path != CATCH_ALL and route.method not in {"*", "HEAD"}:
            found.add((route.method, path))
    return found


def documented(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method in operations
    }


def test_openapi_document_is_valid_openapi_3_1() -> None:
    document = cached_document()
    assert document["openapi"].startswith("3.1.")
    OpenAPIV31SpecValidator(document).validate()


def test_openapi_every_router_route_is_documented_and_nothing_else(app: web.Application) -> None:
    in_router, in_document = routed(app), documented(cached_document())
    assert in_router - in_document == set(), (
        "add these routes to gateway._admin._openapi.OPERATIONS"
    )
    assert in_document - in_router == set(), "documented, but the router lacks them"
    assert {
        ("POST", "/api/sessions/{id}/rewind"),
        ("POST", "/web/sessions/{id}/attachments"),
        ("GET", "/api/sessions/{id}/attachments/{att_id}"),
        ("GET", "/api/openapi.json"),
    } <= in_router


def test_openapi_table_has_one_operation_per_route() -> None:
    keys = [(op.method, op.path) for op in OPERATIONS]
    assert len(keys) == len(set(keys))
    assert all(op.path.startswith(PREFIXES) for op in OPERATIONS)


def test_openapi_bearer_auth_everywhere_but_the_document_and_web_uploads() -> None:
    document = cached_document()
    assert document["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "admin.token",
    }
    for method, path in documented(document):
        operation = document["paths"][path][method.lower()]
        if (method, path) in UNAUTHENTICATED:
            assert operation["security"] == []
            assert "401" not in operation["responses"]
        else:
            assert operation["security"] == [{"bearer": []}]
            assert {"401", "403"} <= set(operation["responses"])


def test_openapi_every_error_answer_is_the_error_model() -> None:
    document = cached_document()
    errors = [
        answer
        for operations in document["paths"].values()
        for operation in operations.values()
        for status, answer in operation["responses"].items()
        if int(status) >= 400
    ]
    assert errors
    for answer in errors:
        assert answer["content"] == {
            "application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}
        }
    error = document["components"]["schemas"]["ErrorDetail"]
    assert set(error["required"]) == {"code", "message"}


def test_openapi_models_become_components_and_uploads_multipart() -> None:
    document = cached_document()
    schemas = document["components"]["schemas"]
    assert {"SessionOut", "MessageOut", "RewindBody", "AttachmentAnswer", "EventsPage"} <= set(
        schemas
    )
    roles = schemas["MessageOut"]["properties"]["role"]["enum"]
    assert roles == ["system", "user", "assistant", "operator", "tool"]
    upload = document["paths"]["/web/sessions/{id}/attachments"]["post"]["requestBody"]
    form = upload["content"]["multipart/form-data"]["schema"]
    assert form["required"] == ["file"]
    assert form["properties"]["file"]["format"] == "binary"
    rewind = document["paths"]["/api/sessions/{id}/rewind"]["post"]
    assert set(rewind["responses"]) == {"200", "400", "401", "403", "404", "409", "503"}
    events = document["paths"]["/api/sessions/{id}/events"]["get"]
    assert [p["name"] for p in events["parameters"]] == ["id", "after", "limit"]


def test_openapi_sessions_filters_show_their_closed_sets() -> None:
    listing = cached_document()["paths"]["/api/sessions"]["get"]
    schemas = {p["name"]: p["schema"] for p in listing["parameters"]}
    assert schemas["channel"]["enum"] == ["telegram", "whatsapp", "web"]
    assert schemas["status"]["enum"] == ["idle", "running", "interrupted"]
    assert "enum" not in schemas["agent"]  # agents are the config's: any name, none found
    assert {p["name"]: p["required"] for p in listing["parameters"]}["channel"] is False


def test_openapi_document_is_built_from_the_table_it_is_given() -> None:
    only = [op for op in OPERATIONS if op.path == "/api/openapi.json"]
    document = openapi_document(only)
    assert list(document["paths"]) == ["/api/openapi.json"]
    assert document["components"]["schemas"] == {}


@pytest.mark.parametrize("token", ["admin-token-for-tests", ""])
async def test_openapi_json_is_served_without_a_token(
    aiohttp_client: Any, tmp_path: Path, token: str
) -> None:
    app = build_app(settings(tmp_path / "gateway.db", admin={"token": token}), ingest_only=True)
    client: Client = await aiohttp_client(app)
    response = await client.get("/api/openapi.json")
    assert response.status == 200
    assert response.content_type == "application/json"
    assert await response.json() == cached_document()
    other = await client.get("/api/sessions")
    assert other.status == (401 if token else 403)
