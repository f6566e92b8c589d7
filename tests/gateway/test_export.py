"""A session's export: the admin route and the CLI give one JSON document that validates against
docs/export.schema.json and holds every message of every branch; the zip form holds the files."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import zipfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from webhook_bot_gateway.gateway._admin._export import export_schema
from webhook_bot_gateway.gateway._keys import STORE
from webhook_bot_gateway.gateway._media.files import attachment_path
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.gateway.cli import main
from webhook_bot_gateway.store import OutboxIn, SQLiteStore, Store

from .ingest_helpers import AUTH, settings

Client = TestClient[web.Request, web.Application]
ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "docs" / "export.schema.json"
SID = "telegram-support-42"
PDF = b"%PDF-1.7 the export's file"


def validate(document: dict[str, Any]) -> None:
    """Fail unless ``document`` is valid under docs/export.schema.json (formats checked)."""
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    validator.validate(document)


async def fill(store: Store, media_root: Path) -> dict[str, Any]:
    """A session with two branches (a rewind), an event and a stored file; what it holds."""
    await store.create_session("telegram", "support", "42", "triage")
    first = await store.append_message(SID, "user", "first question")
    old = await store.append_message(SID, "assistant", "an answer later rewound", agent="triage")
    await store.set_active_head(SID, first.id)
    new = await store.append_message(SID, "assistant", "the answer kept", agent="triage")
    made = await store.create_attachment(
        SID, name="bill.pdf", content_type="application/pdf", source="upload", size=len(PDF)
    )
    path = attachment_path(media_root, SID, made.id)
    path.parent.mkdir(parents=True)
    path.write_bytes(PDF)
    parents = {first.id: None, old.id: first.id, new.id: first.id}
    return {"parents": parents, "head": new.id, "attachment": made.id}


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path) -> Client:
    media = {"root": str(tmp_path / "media")}
    app = build_app(settings(tmp_path / "gateway.db", media=media), ingest_only=True)
    made: Client = await aiohttp_client(app)
    return made


async def test_export_validates_and_holds_every_message_of_every_branch(
    client: Client, tmp_path: Path
) -> None:
    held = await fill(client.app[STORE], tmp_path / "media")

    response = await client.get(f"/api/sessions/{SID}/export", headers=AUTH)

    assert response.status == 200
    document = await response.json()
    validate(document)
    assert {m["id"]: m["parent_id"] for m in document["messages"]} == held["parents"]
    assert document["session"]["head_id"] == held["head"]
    assert [e["kind"] for e in document["events"]] == ["head_moved"]
    [attachment] = document["attachments"]
    assert (attachment["id"], attachment["name"], attachment["file"]) == (
        held["attachment"],
        "bill.pdf",
        None,
    )


async def test_zip_export_holds_the_json_and_the_stored_files(
    client: Client, tmp_path: Path
) -> None:
    held = await fill(client.app[STORE], tmp_path / "media")

    response = await client.get(f"/api/sessions/{SID}/export?files=zip", headers=AUTH)

    assert response.status == 200
    assert response.content_type == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(await response.read()))
    name = f"files/{held['attachment']}"
    assert sorted(archive.namelist()) == [name, "session.json"]
    assert archive.read(name) == PDF
    document = json.loads(archive.read("session.json"))
    validate(document)
    assert [a["file"] for a in document["attachments"]] == [name]
    assert len(document["messages"]) == len(held["parents"])


async def test_export_session_is_what_the_session_route_gives(
    client: Client, tmp_path: Path
) -> None:
    """docs/data.md: the export's ``session`` is as GET /api/sessions/{id} gives it, the count
    of replies parked for a user who blocked the bot included."""
    store = client.app[STORE]
    await fill(store, tmp_path / "media")
    await store.enqueue_outbox(OutboxIn(SID, "telegram", "support", "42", {"text": "later"}))
    assert await store.park_outbox(SID) == 1

    shown = await (await client.get(f"/api/sessions/{SID}", headers=AUTH)).json()
    exported = await (await client.get(f"/api/sessions/{SID}/export", headers=AUTH)).json()

    assert exported["session"] == shown
    assert exported["session"]["parked_replies"] == 1


async def test_zip_export_of_a_missing_file_warns_naming_the_attachment(
    client: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    held = await fill(client.app[STORE], tmp_path / "media")
    attachment_path(tmp_path / "media", SID, held["attachment"]).unlink()

    with caplog.at_level(logging.WARNING, logger="gateway.export"):
        response = await client.get(f"/api/sessions/{SID}/export?files=zip", headers=AUTH)

    assert response.status == 200
    archive = zipfile.ZipFile(io.BytesIO(await response.read()))
    assert archive.namelist() == ["session.json"]
    assert [a["file"] for a in json.loads(archive.read("session.json"))["attachments"]] == [None]
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert held["attachment"] in warning
    assert "bill.pdf" not in warning


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/api/sessions/telegram-support-404/export", 404, "unknown_session"),
        ("/api/sessions/bad%20id/export", 400, "invalid_session_id"),
        (f"/api/sessions/{SID}/export?files=tar", 400, "invalid_field"),
    ],
)
async def test_export_refusals_name_the_cause(
    client: Client, tmp_path: Path, path: str, status: int, code: str
) -> None:
    await fill(client.app[STORE], tmp_path / "media")
    response = await client.get(path, headers=AUTH)
    assert response.status == status
    assert (await response.json())["error"]["code"] == code


def test_the_schema_file_is_the_one_the_model_generates() -> None:
    """docs/export.schema.json is regenerated, not edited: `python -c 'import json; from
    gateway._admin._export import export_schema; print(json.dumps(export_schema(), indent=2,
    sort_keys=True))' > docs/export.schema.json`."""
    assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8")) == export_schema()


def _cli_setup(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    db, media = tmp_path / "gw.db", tmp_path / "media"
    config = tmp_path / "config.toml"
    config.write_text(
        f'[store]\nurl = "sqlite:///{db}"\n[media]\nroot = "{media}"\n', encoding="utf-8"
    )

    async def prepare() -> dict[str, Any]:
        async with SQLiteStore(db) as store:
            return await fill(store, media)

    return config, asyncio.run(prepare())


def test_cli_export_prints_the_document_and_writes_the_zip(tmp_path: Path) -> None:
    config, held = _cli_setup(tmp_path)
    target = tmp_path / "out.zip"
    out = io.StringIO()

    code = main(["--config", str(config), "sessions", "export", SID, "--files", str(target)], out)

    assert code == 0
    document = json.loads(out.getvalue())
    validate(document)
    assert {m["id"] for m in document["messages"]} == set(held["parents"])
    with zipfile.ZipFile(target) as archive:
        assert archive.read(f"files/{held['attachment']}") == PDF
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no .part


def test_cli_export_of_an_unknown_session_or_onto_a_file_writes_nothing(tmp_path: Path) -> None:
    config, _ = _cli_setup(tmp_path)
    target = tmp_path / "out.zip"
    args = ["--config", str(config), "sessions", "export"]

    assert main([*args, "telegram-support-404", "--files", str(target)], io.StringIO()) == 1
    assert not target.exists()
    target.write_bytes(b"mine")
    assert main([*args, SID, "--files", str(target)], io.StringIO()) == 1
    assert target.read_bytes() == b"mine"
    assert main([*args, SID, "--files", str(tmp_path / "no" / "x.zip")], io.StringIO()) == 1
