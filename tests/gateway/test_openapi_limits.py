"""/api/openapi.json declares the refusals of a request body: 408, 413 and 415 with their
codes in the document's description (said once for every JSON-body operation), json_too_deep
among each such operation's 400s; and each operation answers them as declared."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from webhook_bot_gateway.gateway._admin._openapi import OPERATIONS, cached_document
from webhook_bot_gateway.gateway._keys import STORE
from webhook_bot_gateway.gateway.app import build_app

from .ingest_helpers import AUTH, settings

Client = TestClient[web.Request, web.Application]
BODY_OPERATIONS = [op for op in OPERATIONS if op.body is not None]
BODY_CODES = {408: "request_timeout", 413: "body_too_large", 415: "unsupported_encoding"}


def test_there_are_json_body_operations() -> None:
    assert {op.path for op in BODY_OPERATIONS} >= {
        "/api/sessions/{id}/reply",
        "/api/sessions/{id}/handoff",
        "/api/sessions/{id}/rewind",
    }


def test_the_document_declares_the_body_refusals_once() -> None:
    description = cached_document()["info"]["description"]
    for status, code in BODY_CODES.items():
        assert f"{status} {code}" in description


@pytest.mark.parametrize("op", BODY_OPERATIONS, ids=lambda op: f"{op.method} {op.path}")
def test_every_json_body_operation_declares_json_too_deep(op: Any) -> None:
    responses = cached_document()["paths"][op.path][op.method.lower()]["responses"]
    assert "json_too_deep" in responses["400"]["description"]


@pytest.mark.parametrize("op", BODY_OPERATIONS, ids=lambda op: f"{op.method} {op.path}")
async def test_every_json_body_operation_answers_the_declared_refusals(
    aiohttp_client: Any, tmp_path: Path, op: Any
) -> None:
    app = build_app(settings(tmp_path / "gateway.db"), ingest_only=True)
    client: Client = await aiohttp_client(app)
    session = await client.app[STORE].create_session("telegram", "support", "42", "triage")
    path = op.path.replace("{id}", session.session_id)
    json_headers = {**AUTH, "Content-Type": "application/json"}
    cases = [
        ({**json_headers, "Content-Encoding": "gzip"}, gzip.compress(b"{}"), 415),
        (json_headers, b"[" * 40 + b"]" * 40, 400),
        ({**json_headers, "Content-Length": str(2 * 1024 * 1024)}, b"", 413),
    ]
    document = cached_document()
    documented = document["paths"][op.path][op.method.lower()]["responses"]
    for headers, body, status in cases:
        response = await client.request(op.method, path, data=body, headers=headers)
        assert response.status == status
        code = (await response.json())["error"]["code"]
        if status in BODY_CODES:
            assert f"{status} {code}" in document["info"]["description"]
        else:
            assert code in documented[str(status)]["description"]
