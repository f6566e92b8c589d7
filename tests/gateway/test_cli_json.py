"""The JSON of `gateway sessions list / show` and `gateway quarantine list` is the admin API's:
the same models, so timestamps are ISO 8601 with a ``T`` (``datetime.isoformat()``), as in
the API's answers and in `gateway sessions export`."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from webhook_bot_gateway.gateway._admin._api_models import (
    MessageOut,
    QuarantineOut,
    SessionOut,
)
from webhook_bot_gateway.store import QuarantineIn, SQLiteStore

from .test_cli import cli, config_with_store

SID = "telegram-support-42"
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00$")


@pytest.fixture
def config(tmp_path: Path) -> str:
    """A store with one session of two messages and one quarantined delivery."""

    async def seed() -> None:
        async with SQLiteStore(tmp_path / "gw.db") as store:
            await store.create_session("telegram", "support", "42", "triage")
            await store.append_message(SID, "user", "hello")
            await store.append_message(SID, "assistant", "hi", agent="triage")
            await store.ingest([QuarantineIn("whatsapp", None, b"{not json", "not JSON")])

    asyncio.run(seed())
    return str(config_with_store(tmp_path))


def shown(config: str, *command: str) -> Any:
    code, out = cli(*command, "--config", config)
    assert code == 0, out
    return json.loads(out)


async def stored(db: Path) -> dict[str, Any]:
    """What the admin API would answer for the seeded rows (its models, dumped as JSON)."""
    async with SQLiteStore(db) as store:
        session = await store.get_session(SID)
        branch = await store.get_branch(SID)
        quarantined = await store.list_quarantine(10, 0)
    return {
        "session": SessionOut.model_validate(session, from_attributes=True).model_dump(mode="json"),
        "messages": [MessageOut.of(m).model_dump(mode="json") for m in branch],
        "quarantine": [QuarantineOut.of(q).model_dump(mode="json") for q in quarantined],
    }


def test_sessions_list_prints_the_api_sessions_page(config: str, tmp_path: Path) -> None:
    api = asyncio.run(stored(tmp_path / "gw.db"))
    listed = shown(config, "sessions", "list")
    assert listed == {"sessions": [api["session"]], "total": 1}
    for field in ("created_at", "updated_at"):
        assert ISO.match(listed["sessions"][0][field]), listed["sessions"][0][field]


def test_sessions_show_prints_the_api_session_and_its_branch(config: str, tmp_path: Path) -> None:
    api = asyncio.run(stored(tmp_path / "gw.db"))
    session = shown(config, "sessions", "show", SID)
    assert session == {**api["session"], "parked_replies": 0, "messages": api["messages"]}
    assert [m["text"] for m in session["messages"]] == ["hello", "hi"]
    for stamp in [session["created_at"], *(m["created_at"] for m in session["messages"])]:
        assert ISO.match(stamp), stamp


def test_sessions_show_and_export_write_the_same_timestamps(config: str) -> None:
    session = shown(config, "sessions", "show", SID)
    exported = shown(config, "sessions", "export", SID)
    fields = ("created_at", "updated_at")
    assert [session[f] for f in fields] == [exported["session"][f] for f in fields]
    assert [m["created_at"] for m in session["messages"]] == [
        m["created_at"] for m in exported["messages"]
    ]


def test_quarantine_list_prints_the_api_quarantine_list(config: str, tmp_path: Path) -> None:
    api = asyncio.run(stored(tmp_path / "gw.db"))
    listed = shown(config, "quarantine", "list")
    assert listed == {"quarantine": api["quarantine"]}
    assert ISO.match(listed["quarantine"][0]["received_at"])
