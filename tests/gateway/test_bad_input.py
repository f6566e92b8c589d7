"""The bad-input table over both webhook routes: status, error code, and what the store holds.

Unauthenticated requests leave no row in any table; authenticated ones that cannot be read leave
exactly one quarantine row and nothing else; a 3 MB WhatsApp batch is accepted whole.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.channels import telegram_fakes as tg
from webhook_bot_gateway.gateway.app import build_app

from .ingest_helpers import (
    counts,
    grown,
    rows,
    settings,
    tg_headers,
    tg_update,
    wa_delivery,
    wa_headers,
    wa_text,
)

Client = TestClient[web.Request, web.Application]
MIB = 1024 * 1024
WA = "/webhooks/whatsapp"
TG = "/webhooks/telegram/support"
QUARANTINED = {"quarantine": 1}


@dataclass(frozen=True)
class Case:
    path: str
    body: bytes
    headers: dict[str, str]
    status: int
    code: str | None = None  # the error code, for a refusal
    rows: dict[str, int] = field(default_factory=dict)  # tables that grow, and by how much


def signed(body: bytes) -> Case:
    return Case(WA, body, wa_headers(body), 200, rows=QUARANTINED)


GOOD_WA = wa_delivery([wa_text("wamid.t1")])
GOOD_TG = tg_update(1)
CASES = {
    "whatsapp bad signature": Case(
        WA, GOOD_WA, {"X-Hub-Signature-256": "sha256=" + "0" * 64}, 401, "bad_signature"
    ),
    "whatsapp signature of another body": Case(
        WA, GOOD_WA, wa_headers(GOOD_WA + b" "), 401, "bad_signature"
    ),
    "whatsapp malformed signature": Case(
        WA, GOOD_WA, {"X-Hub-Signature-256": "md5=abc"}, 401, "bad_signature"
    ),
    "whatsapp missing signature": Case(WA, GOOD_WA, {}, 401, "bad_signature"),
    "telegram bad secret": Case(TG, GOOD_TG, tg_headers("wrong"), 401, "bad_secret_token"),
    "telegram another bot's secret": Case(
        TG, GOOD_TG, tg_headers(tg.OTHER_SECRET), 401, "bad_secret_token"
    ),
    "telegram missing secret": Case(TG, GOOD_TG, {}, 401, "bad_secret_token"),
    "telegram unknown bot": Case(
        "/webhooks/telegram/nobody", GOOD_TG, tg_headers(), 404, "unknown_bot"
    ),
    "whatsapp not JSON": signed(b"<xml>not json</xml>"),
    "whatsapp not UTF-8": signed(b"\xff\xfe\x00"),
    "whatsapp empty body": signed(b""),
    "whatsapp wrong shape": signed(b'{"object": "page", "entry": []}'),
    "whatsapp JSON array": signed(b"[1, 2, 3]"),
    "whatsapp only broken messages": signed(
        wa_delivery([{**wa_text("wamid.b1"), "timestamp": "yesterday"}])
    ),
    "telegram not JSON": Case(TG, b"{not json", tg_headers(), 200, rows=QUARANTINED),
    "telegram wrong shape": Case(TG, b'{"update_id": "7"}', tg_headers(), 200, rows=QUARANTINED),
    "telegram update without a type": Case(
        TG, b'{"update_id": 7}', tg_headers(), 200, rows=QUARANTINED
    ),
    "telegram message without a chat": Case(
        TG, b'{"update_id": 7, "message": {"message_id": 1}}', tg_headers(), 200, rows=QUARANTINED
    ),
    "whatsapp over the limit": Case(
        WA, b"x" * (4 * MIB + 1), wa_headers(b"x" * (4 * MIB + 1)), 413, "body_too_large"
    ),
    "telegram over the limit": Case(TG, b"x" * (MIB + 1), tg_headers(), 413, "body_too_large"),
    "telegram over the limit, unknown bot": Case(
        "/webhooks/telegram/nobody", b"x" * (MIB + 1), tg_headers(), 413, "body_too_large"
    ),
}


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "gateway.db"


@pytest.fixture
async def client(aiohttp_client: Any, db_path: Path) -> Client:
    app = build_app(settings(db_path), ingest_only=True)
    made: Client = await aiohttp_client(app)
    return made


@pytest.mark.parametrize("name", list(CASES))
async def test_bad_input_gets_its_status_and_leaves_only_what_it_should(
    client: Client, db_path: Path, name: str
) -> None:
    case = CASES[name]
    before = counts(db_path)
    response = await client.post(case.path, data=io.BytesIO(case.body), headers=case.headers)
    assert response.status == case.status
    if case.code is None:
        assert await response.json() == {"ok": True}
    else:
        error = (await response.json())["error"]
        assert error["code"] == case.code
        assert error["message"]
    assert grown(before, counts(db_path)) == case.rows
    if case.rows == QUARANTINED:
        [(body, reason)] = rows(db_path, "SELECT body, reason FROM quarantine")
        assert body == case.body
        assert reason


async def test_a_3_mb_whatsapp_delivery_is_accepted_with_every_message(
    client: Client, db_path: Path
) -> None:
    messages = [wa_text(f"wamid.big{i:05d}", "z" * 1000) for i in range(3000)]
    body = wa_delivery(messages)
    assert 3 * 1000 * 1000 < len(body) < 4 * MIB
    before = counts(db_path)
    response = await client.post(WA, data=io.BytesIO(body), headers=wa_headers(body))
    assert response.status == 200
    assert grown(before, counts(db_path)) == {"deliveries": 1, "processed_messages": 3000}
    [(stored, keys)] = rows(db_path, "SELECT body, keys FROM deliveries")
    assert stored == body
    assert sorted(json.loads(keys)) == sorted(f"whatsapp:{m['id']}" for m in messages)
