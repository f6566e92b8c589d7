"""Schemathesis over the real ``gateway serve``: every documented operation, no 5xx, no answer
that breaks the document served at /api/openapi.json.

Deterministic (derandomized Hypothesis, no example database) and bounded: EXAMPLES cases per
operation and generation mode (positive and negative). Generated values are now and then swapped
for real ones (session ids, message ids, agent names, an attachment id), so the success paths
run too, not only the 404s.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.errors import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from .conftest import MakeGateway
from .gateway_proc import ADMIN_TOKEN, BOT, Gateway, eventually
from .webhooks import post_until_ok, telegram_text

EXAMPLES = 20
CHATS = (7001, 7002, 7003)
AGENTS = ("triage", "billing", "human")
CHECKS = [
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
    content_type_conformance,
]
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
Known = Mapping[str, Sequence[Any]]
SCHEMA_OPERATION = "GET /api/openapi.json"  # schemathesis leaves out the one it loaded from
Seen = defaultdict[str, Counter[int]]  # statuses answered, by operation
SUCCESS_EXPECTED = {  # the substitutions must reach these operations' success paths
    "GET /api/sessions",
    "GET /api/sessions/{id}",
    "GET /api/sessions/{id}/messages",
    "GET /api/sessions/{id}/events",
    "POST /api/sessions/{id}/reply",
    "POST /api/sessions/{id}/handoff",
    "POST /api/sessions/{id}/rewind",
    "DELETE /api/sessions/{id}",
    "GET /api/sessions/{id}/attachments/{att_id}",
}  # the upload's success path needs a generated multipart body: tests/gateway/test_uploads.py


async def test_schemathesis_finds_no_5xx_and_no_schema_break(
    make_gateway: MakeGateway, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    for update_id, chat in enumerate(CHATS, start=1):
        await post_until_ok(http, gateway.url, telegram_text(update_id, chat, "hello"))
    known = dict(await settled_sessions(gateway, http))
    web_session, attachment = await web_session_with_a_file(gateway, http)
    known["id"] = [*known["id"], web_session]
    known["att_id"] = [attachment]
    seen: Seen = defaultdict(Counter)
    failures = await asyncio.to_thread(fuzz, gateway.url, known, seen)
    assert failures == [], "\n\n".join(failures)
    documented = (await gateway_json(http, f"{gateway.url}/api/openapi.json"))["paths"]
    labels = {f"{method.upper()} {path}" for path, ops in documented.items() for method in ops}
    assert set(seen) == labels - {SCHEMA_OPERATION}  # every operation ran
    for label in SUCCESS_EXPECTED:
        assert any(200 <= status < 300 for status in seen[label]), (label, seen[label])


async def gateway_json(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url) as response:
        return await response.json()


async def settled_sessions(gateway: Gateway, http: aiohttp.ClientSession) -> Known:
    """Wait until every chat got its answer; the ids worth substituting into generated cases."""
    sids = [f"telegram-{BOT}-{chat}" for chat in CHATS]

    async def answered() -> bool:
        for sid in sids:
            branch = (await gateway.admin(http, f"/api/sessions/{sid}/messages"))["messages"]
            if len(branch) < 2:
                return False
        return True

    await eventually(answered, "a reply in every session")
    message_ids = []
    for sid in sids:
        branch = (await gateway.admin(http, f"/api/sessions/{sid}/messages"))["messages"]
        message_ids += [m["id"] for m in branch]
    return {"id": sids, "message_id": message_ids, "agent": AGENTS}


async def web_session_with_a_file(gateway: Gateway, http: aiohttp.ClientSession) -> tuple[str, str]:
    """A web session made by /ws, and the id of a file uploaded to it."""
    async with http.ws_connect(f"{gateway.url}/ws") as socket:
        first = await socket.receive_json(timeout=10)
    assert first["type"] == "connection", first
    sid: str = first["data"]["session_id"]
    form = aiohttp.FormData()
    form.add_field("file", b"%PDF-1.4 fuzz", filename="a.pdf", content_type="application/pdf")
    async with http.post(f"{gateway.url}/web/sessions/{sid}/attachments", data=form) as answer:
        assert answer.status == 201, await answer.text()
        attachment: str = (await answer.json())["attachment"]["id"]
    return sid, attachment


def fuzz(base_url: str, known: Known, seen: Seen) -> list[str]:
    """Run every operation (deletions last, so the others meet live sessions); the failures."""
    schema = schemathesis.openapi.from_url(f"{base_url}/api/openapi.json", timeout=10)
    operations = [result.ok() for result in schema.get_all_operations()]
    operations.sort(key=lambda op: op.method.upper() == "DELETE")
    failures: list[str] = []
    with requests.Session() as session:
        session.trust_env = False  # loopback: never a proxy from the environment
        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                try:
                    run_operation(operation, mode, base_url, session, known, seen)
                except (FailureGroup, Exception) as exc:  # keep going, report them all
                    failures.append(f"{operation.label} ({mode.value}): {exc}")
    return failures


def run_operation(
    operation: APIOperation,
    mode: GenerationMode,
    base_url: str,
    session: requests.Session,
    known: Known,
    seen: Seen,
) -> None:
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: the first failure is reported
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode), swap=st.data())
    def one(case: Case, swap: st.DataObject) -> None:
        substitute(case, known, swap)
        response = case.call(base_url=base_url, session=session, headers=AUTH)
        seen[operation.label][response.status_code] += 1
        case.validate_response(response, checks=CHECKS, headers=AUTH)

    one()


def substitute(case: Case, known: Known, swap: st.DataObject) -> None:
    """Now and then put a real session id, message id or agent name in place of a made-up one."""
    containers = [case.path_parameters, case.body if isinstance(case.body, dict) else None]
    for container in containers:
        for name, values in known.items():
            if container is not None and name in container:
                choice = swap.draw(st.sampled_from([None, *values]), label=name)
                if choice is not None:
                    container[name] = choice
