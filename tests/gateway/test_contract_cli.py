"""Promises of CONTRACT.md's command line that no other test held: `[dedup] ttl_hours` reaches
`gateway purge`, `gateway sessions list` prints stored sessions and filters them, and
`--config` falls back to `$GATEWAY_CONFIG`, then to `config.toml` in the working directory."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from webhook_bot_gateway.store import SQLiteStore

from .ingest_helpers import rows
from .pipeline_helpers import FakeClock
from .test_cli import cli, config_with_store

HOUR = 3600.0


@pytest.mark.parametrize(
    ("ttl_hours", "purged", "kept"),
    [("1", 1, [("young",)]), ("0.25", 2, []), ("3", 0, [("old",), ("young",)])],
    ids=["1h", "15min", "3h"],
)
def test_purge_removes_processed_ids_older_than_the_configured_ttl_hours(
    tmp_path: Path, ttl_hours: str, purged: int, kept: list[tuple[str]]
) -> None:
    """Two ids, seen 2 h and 30 min ago; the config's ttl decides which of them go."""
    now = time.time()

    async def claim() -> None:
        for key, age in (("old", 2 * HOUR), ("young", 0.5 * HOUR)):
            async with SQLiteStore(tmp_path / "gw.db", clock=FakeClock(now - age)) as store:
                assert await store.claim([key]) == {key}

    asyncio.run(claim())
    config = config_with_store(tmp_path, f"[dedup]\nttl_hours = {ttl_hours}\n")
    code, out = cli("purge", "--config", str(config))
    assert code == 0, out
    assert f"purged {purged} expired processed-message row(s)" in out
    assert rows(tmp_path / "gw.db", "SELECT key FROM processed_messages ORDER BY key") == kept


SESSIONS = {
    "telegram-support-41": ("telegram", "support", "41", "triage"),
    "telegram-support-42": ("telegram", "support", "42", "billing"),
    "whatsapp-100-15550001111": ("whatsapp", "100", "15550001111", "triage"),
}


@pytest.fixture
def config(tmp_path: Path) -> str:
    """A store holding SESSIONS; whatsapp-100-15550001111 was interrupted."""

    async def seed() -> None:
        async with SQLiteStore(tmp_path / "gw.db") as store:
            for channel, account, chat_id, agent in SESSIONS.values():
                await store.create_session(channel, account, chat_id, agent)

    asyncio.run(seed())
    db = sqlite3.connect(tmp_path / "gw.db")
    try:
        db.execute("UPDATE sessions SET status = 'interrupted' WHERE channel = 'whatsapp'")
        db.commit()
    finally:
        db.close()
    return str(config_with_store(tmp_path))


def sessions_list(config: str, *options: str) -> Any:
    """What `gateway sessions list` printed, parsed."""
    code, out = cli("sessions", "list", *options, "--config", config)
    assert code == 0, out
    return json.loads(out)


@pytest.mark.parametrize(
    ("filters", "listed"),
    [
        ([], set(SESSIONS)),
        (["--channel", "telegram"], {"telegram-support-41", "telegram-support-42"}),
        (["--agent", "billing"], {"telegram-support-42"}),
        (["--status", "interrupted"], {"whatsapp-100-15550001111"}),
        (["--status", "idle", "--agent", "triage"], {"telegram-support-41"}),
        (["--channel", "web"], set()),
    ],
    ids=["all", "channel", "agent", "status", "status-and-agent", "none"],
)
def test_sessions_list_prints_the_stored_sessions_its_filters_keep(
    config: str, filters: list[str], listed: set[str]
) -> None:
    shown = sessions_list(config, *filters)
    assert {s["session_id"] for s in shown["sessions"]} == listed
    assert shown["total"] == len(listed)
    for session in shown["sessions"]:
        fields = (session["channel"], session["account"], session["chat_id"])
        assert (*fields, session["active_agent"]) == SESSIONS[session["session_id"]]


def test_sessions_list_pages_with_limit_and_offset_and_counts_all(config: str) -> None:
    pages = [sessions_list(config, "--limit", "2", "--offset", n) for n in ("0", "2")]
    assert [len(page["sessions"]) for page in pages] == [2, 1]
    assert [page["total"] for page in pages] == [3, 3]
    assert {s["session_id"] for page in pages for s in page["sessions"]} == set(SESSIONS)


AGENTS = '[agents]\nstarting_agent = "a"\n[[agents.list]]\nname = "a"\nkind = "human"\n'


def check_config_in(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`gateway check-config` without --config, run in ``cwd`` with GATEWAY_CONFIG from ``env``
    only."""
    environ = {k: v for k, v in os.environ.items() if k != "GATEWAY_CONFIG"}
    return subprocess.run(
        [sys.executable, "-m", "webhook_bot_gateway", "check-config"],
        capture_output=True,
        text=True,
        env={**environ, **env},
        cwd=cwd,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("with_env", [False, True], ids=["config.toml", "GATEWAY_CONFIG"])
def test_config_defaults_to_gateway_config_else_config_toml_in_the_working_directory(
    tmp_path: Path, with_env: bool
) -> None:
    """Each file says which it is by its dedup.ttl_hours, which check-config prints."""
    (tmp_path / "config.toml").write_text(AGENTS + "[dedup]\nttl_hours = 7\n", encoding="utf-8")
    other = tmp_path / "elsewhere" / "other.toml"
    other.parent.mkdir()
    other.write_text(AGENTS + "[dedup]\nttl_hours = 11\n", encoding="utf-8")
    result = check_config_in(tmp_path, {"GATEWAY_CONFIG": str(other)} if with_env else {})
    assert result.returncode == 0, result.stderr
    used, hours = (str(other), 11) if with_env else ("config.toml", 7)
    assert f"config {used}: OK" in result.stdout
    assert f"dedup: processed ids kept {hours} h" in result.stdout
