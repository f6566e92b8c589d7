"""The offline CLI beside the admin API, on one store: `gateway sessions list` and `quarantine
list` take the bounds of `GET /api/sessions` and `GET /api/quarantine`, `--search` finds what
`q` finds, and an id or a session id the API refuses is refused with the API's message. The
CLI is the console script's ``main``, in-process, and for some cases the process
(``python -m webhook_bot_gateway``); the API the real app in-process. Every failure of the CLI
is one ``error: ...`` line on stderr and exit 1."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from webhook_bot_gateway.gateway._keys import STORE
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.gateway.cli import main
from webhook_bot_gateway.store import QuarantineIn

from .ingest_helpers import AUTH, settings
from .test_cli import config_with_store, run_cli

Client = TestClient[web.Request, web.Application]
CHATS = [("telegram", "support", "AbC42"), ("telegram", "sales", "abc_7"), ("web", "", "Zed-1")]


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path) -> Client:
    """The admin API on ``tmp_path/gw.db``, the store the CLI's config names: three sessions
    and one quarantined delivery."""
    app = build_app(settings(tmp_path / "gw.db"), ingest_only=True)
    made: Client = await aiohttp_client(app)
    store = made.app[STORE]
    for channel, account, chat_id in CHATS:
        await store.create_session(channel, account, chat_id, "triage")
    await store.ingest([QuarantineIn("whatsapp", None, b"{not json", "not JSON")])
    return made


async def api(client: Client, path: str) -> tuple[int, Any]:
    response = await client.get(path, headers=AUTH)
    return response.status, await response.json()


async def gateway(
    tmp_path: Path, *args: str, process: bool = False
) -> subprocess.CompletedProcess[str]:
    """``gateway ARGS --config ...`` beside the running app: ``main`` in a thread of its own
    (its own event loop), or a process."""
    argv = [*args, "--config", str(config_with_store(tmp_path))]
    if process:
        return await asyncio.to_thread(run_cli, *argv)
    return await asyncio.to_thread(in_process, argv)


def in_process(argv: list[str]) -> subprocess.CompletedProcess[str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stderr(err):
        status = main(argv, out=out)
    return subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The failure's message: exit 1, nothing on stdout, one ``error: ...`` line on stderr."""
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    return result.stderr.removeprefix("error: ").removesuffix("\n")


@pytest.mark.parametrize(
    "search",
    ["abc", "ABC", "aBc4", "Zed", "support-a", "_", "%", "", "nothing-like-it", "x" * 128],
)
async def test_sessions_list_search_finds_what_the_apis_q_finds(
    client: Client, tmp_path: Path, search: str
) -> None:
    """Case-insensitive pieces of the chat id or the session id; LIKE's wildcards as
    themselves; an empty search is no filter; 128 characters are still taken."""
    status, answer = await api(client, f"/api/sessions?q={quote(search)}")
    assert status == 200, answer
    result = await gateway(tmp_path, "sessions", "list", "--search", search)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == answer


async def test_the_search_is_also_spelled_q_as_in_the_api(client: Client, tmp_path: Path) -> None:
    status, answer = await api(client, "/api/sessions?q=aBc")
    assert (status, answer["total"]) == (200, 2)
    result = await gateway(tmp_path, "sessions", "list", "--q", "aBc", process=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == answer


async def test_the_search_is_combined_with_the_other_filters_as_in_the_api(
    client: Client, tmp_path: Path
) -> None:
    status, answer = await api(client, "/api/sessions?q=abc&channel=telegram&limit=1&offset=1")
    assert (status, answer["total"], len(answer["sessions"])) == (200, 2, 1)
    args = ["--search", "abc", "--channel", "telegram", "--limit", "1", "--offset", "1"]
    result = await gateway(tmp_path, "sessions", "list", *args)
    assert json.loads(result.stdout) == answer


async def test_a_search_longer_than_the_apis_q_is_refused_by_both(
    client: Client, tmp_path: Path
) -> None:
    status, answer = await api(client, f"/api/sessions?q={'x' * 129}")
    assert (status, answer["error"]["field"]) == (400, "q")
    result = await gateway(tmp_path, "sessions", "list", "--search", "x" * 129)
    assert one_error_line(result) == "--search must be at most 128 characters, got 129"


@pytest.mark.parametrize(("option", "field"), [("--search", "q"), ("--agent", "agent")])
async def test_a_nul_character_is_refused_by_both_naming_the_option(
    client: Client, tmp_path: Path, option: str, field: str
) -> None:
    """Only an in-process caller can pass one: a process's arguments hold no NUL."""
    status, answer = await api(client, f"/api/sessions?{field}=42%00")
    assert (status, answer["error"]["field"]) == (400, field)
    result = await gateway(tmp_path, "sessions", "list", option, "42\x00")
    assert one_error_line(result) == f"{option} must not hold a NUL character"


@pytest.mark.parametrize("listing", ["sessions", "quarantine"])
@pytest.mark.parametrize(("limit", "taken"), [("1", True), ("500", True), ("501", False)])
async def test_a_listing_takes_the_page_sizes_its_route_takes(
    client: Client, tmp_path: Path, listing: str, limit: str, taken: bool
) -> None:
    status, answer = await api(client, f"/api/{listing}?limit={limit}")
    assert status == (200 if taken else 400), answer
    result = await gateway(tmp_path, listing, "list", "--limit", limit)
    if taken:
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == answer
    else:
        assert answer["error"]["field"] == "limit"
        assert one_error_line(result) == f"--limit must be between 1 and 500, got {limit}"


@pytest.mark.parametrize("row", ["0", "7", str(2**63 - 1), str(2**63)])
async def test_quarantine_replay_of_an_id_that_names_no_row_says_what_the_api_says(
    client: Client, tmp_path: Path, row: str
) -> None:
    """0 and 2^63 name no row either: 404 ``no quarantined delivery ID`` in both."""
    status, answer = await api(client, f"/api/quarantine/{row}")
    assert (status, answer["error"]["code"]) == (404, "unknown_quarantine")
    result = await gateway(tmp_path, "quarantine", "replay", row, process=row == "0")
    assert one_error_line(result) == answer["error"]["message"] == f"no quarantined delivery {row}"


@pytest.mark.parametrize(
    ("sid", "status"), [("bad%20id", 400), ("telegram-support-404", 404)], ids=["bad", "unknown"]
)
@pytest.mark.parametrize("action", ["show", "delete", "export"])
async def test_a_session_id_the_api_refuses_is_refused_in_its_words(
    client: Client, tmp_path: Path, sid: str, status: int, action: str
) -> None:
    got, answer = await api(client, f"/api/sessions/{sid}")
    assert got == status, answer
    result = await gateway(tmp_path, "sessions", action, sid.replace("%20", " "))
    assert one_error_line(result) == answer["error"]["message"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["purge", "--config", "{tmp}/absent.toml"], "{tmp}/absent.toml: config file not found"),
        (
            ["purge", "--config", "{tmp}/wrong.toml"],
            "{tmp}/wrong.toml: server.port: must be a whole number",
        ),
        (["sessions", "list", "--config", "{tmp}/c.toml"], "no SQLite store at {tmp}/gw.db"),
        (["sessions", "show", "a b", "--config", "{tmp}/c.toml"], "session id 'a b' may hold"),
        (["quarantine", "replay", "0", "--config", "{tmp}/c.toml"], "no quarantined delivery 0"),
    ],
    ids=["config-file", "config-key", "store", "session-id", "quarantine-id"],
)
def test_every_failure_is_one_error_line_and_exit_1(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """A failure of each kind: the config file, a config key, the store, an argument, a row
    (those that once began ``config error`` or ``invalid session id`` included)."""
    (tmp_path / "wrong.toml").write_text('[server]\nport = "x"\n', encoding="utf-8")
    config_with_store(tmp_path).rename(tmp_path / "c.toml")  # no store made: none at gw.db
    argv = [arg.format(tmp=tmp_path) for arg in args]
    assert one_error_line(in_process(argv)).startswith(message.format(tmp=tmp_path))
