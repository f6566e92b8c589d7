"""The `gateway` command line, in-process and as the real console entry point."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from webhook_bot_gateway.gateway._media.files import attachment_path
from webhook_bot_gateway.gateway._summary import mask_url
from webhook_bot_gateway.gateway.cli import main
from webhook_bot_gateway.store import SQLiteStore

from .pipeline_helpers import FakeClock

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config.example.toml"
SECRET_ENV = {
    "TELEGRAM_BOT_TOKEN": "999:SECRET-BOT-TOKEN",
    "WHATSAPP_ACCESS_TOKEN": "SECRET-ACCESS-TOKEN",
    "WHATSAPP_APP_SECRET": "SECRET-APP-SECRET",
    "GATEWAY_ADMIN_TOKEN": "SECRET-ADMIN-TOKEN",
}


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``gateway ARGS`` as a process, without GATEWAY_CONFIG, in ``cwd`` or a new folder."""
    if cwd is None:
        # A directory of its own: config.example.toml's admin.token_file (data/admin-token) is
        # relative to the working directory, and the checkout's own must stay make run's.
        with tempfile.TemporaryDirectory() as temporary:
            return run_cli(*args, env=env, cwd=Path(temporary))
    environ = {k: v for k, v in os.environ.items() if k != "GATEWAY_CONFIG"}
    return subprocess.run(
        [sys.executable, "-m", "webhook_bot_gateway", *args],
        capture_output=True,
        text=True,
        env={**environ, **(env or {})},
        cwd=cwd,
        timeout=60,
        check=False,
    )


def config_with_store(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f'[store]\nurl = "sqlite:///{tmp_path}/gw.db"\n{extra}', encoding="utf-8")
    return path


def create_store(db: Path) -> None:
    """An empty store at ``db``, as ``gateway serve`` leaves it (offline commands need one)."""

    async def create() -> None:
        async with SQLiteStore(db):
            pass

    asyncio.run(create())


def cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(args), out=out), out.getvalue()


def test_check_config_of_the_example_exits_0_with_a_summary() -> None:
    result = run_cli("check-config", "--config", str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    assert "agents: starting triage; max_turns 40" in result.stdout
    assert "backlog: /readyz 503 past 5000, deliveries refused at 20000" in result.stdout
    assert "sandbox: on" in result.stdout
    assert "warning" not in result.stdout  # the example's sandbox is where it belongs


def test_check_config_masks_every_secret() -> None:
    result = run_cli("check-config", "--config", str(EXAMPLE), env=SECRET_ENV)
    assert result.returncode == 0, result.stderr
    for secret in SECRET_ENV.values():
        assert secret not in result.stdout + result.stderr
    assert "token ***" in result.stdout


def test_check_config_with_max_turns_0_exits_1_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[agents]\nmax_turns = 0\n", encoding="utf-8")
    result = run_cli("check-config", "--config", str(path))
    assert result.returncode == 1
    assert "agents.max_turns" in result.stderr
    assert "Traceback" not in result.stderr


def test_config_defaults_to_the_environment_variable(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[agents]\nmax_turns = -1\n", encoding="utf-8")
    result = run_cli("check-config", env={"GATEWAY_CONFIG": str(path)})
    assert result.returncode == 1
    assert "agents.max_turns" in result.stderr


def test_check_config_masks_a_database_password(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    agents = '[agents]\nstarting_agent = "a"\n[[agents.list]]\nname = "a"\nkind = "human"\n'
    store = '[store]\nurl = "postgresql://gw:hunter2@db:5432/gw"\n'
    path.write_text(store + agents, encoding="utf-8")
    code, out = cli("check-config", "--config", str(path))
    assert code == 0
    assert "hunter2" not in out
    assert "postgresql://gw:***@db:5432/gw" in out


def test_check_config_names_an_undeclared_starting_agent(tmp_path: Path) -> None:
    result = run_cli("check-config", "--config", str(config_with_store(tmp_path)))
    assert result.returncode == 1
    assert "agent 'triage'" in result.stderr
    assert "Traceback" not in result.stderr


def test_sessions_list_on_a_new_store_is_empty(tmp_path: Path) -> None:
    create_store(tmp_path / "gw.db")
    code, out = cli("sessions", "list", "--config", str(config_with_store(tmp_path)))
    assert code == 0
    assert json.loads(out) == {"sessions": [], "total": 0}


@pytest.mark.parametrize(("flag", "value"), [("--channel", "sms"), ("--status", "asleep")])
def test_sessions_list_refuses_a_filter_value_that_names_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    create_store(tmp_path / "gw.db")
    with pytest.raises(SystemExit) as exited:
        cli("sessions", "list", flag, value, "--config", str(config_with_store(tmp_path)))
    assert exited.value.code == 2
    assert f"argument {flag}: invalid choice: '{value}'" in capsys.readouterr().err


async def _seed(db: Path) -> None:
    from webhook_bot_gateway.store import open_store

    store = await open_store(f"sqlite:///{db}")
    try:
        session = await store.create_session("telegram", "support", "42", "triage")
        await store.append_message(session.session_id, "user", "hello")
    finally:
        await store.aclose()


def test_sessions_show_lists_the_branch_and_delete_erases(tmp_path: Path) -> None:
    import asyncio

    config = str(config_with_store(tmp_path))
    asyncio.run(_seed(tmp_path / "gw.db"))
    code, out = cli("sessions", "show", "telegram-support-42", "--config", config)
    assert code == 0
    shown = json.loads(out)
    assert shown["active_agent"] == "triage"
    assert [m["text"] for m in shown["messages"]] == ["hello"]
    assert cli("sessions", "delete", "telegram-support-42", "--config", config)[0] == 0
    assert cli("sessions", "show", "telegram-support-42", "--config", config)[0] == 1


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (["sessions", "show", "telegram-support-404"], "error: no session 'telegram-support-404'"),
        (
            ["sessions", "delete", "telegram-support-404"],
            "error: no session 'telegram-support-404'",
        ),
        (
            ["sessions", "export", "telegram-support-404"],
            "error: no session 'telegram-support-404'",
        ),
        (["quarantine", "replay", "999"], "error: no quarantined delivery 999"),
        (["quarantine", "delete", "999"], "error: no quarantined delivery 999"),
    ],
)
def test_an_unknown_id_is_an_error_on_stderr_and_nothing_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], error: str
) -> None:
    """`gateway sessions show X | jq` must get no line that is not the answer."""
    create_store(tmp_path / "gw.db")
    code, out = cli(*command, "--config", str(config_with_store(tmp_path)))
    assert (code, out) == (1, "")
    assert capsys.readouterr().err == error + "\n"


def test_check_config_warns_of_a_dead_letter_handoff_to_an_undeclared_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the example's admin.token_file is relative: not the checkout's
    path = tmp_path / "c.toml"
    agents = '[agents]\nstarting_agent = "a"\n[[agents.list]]\nname = "a"\nkind = "human"\n'
    path.write_text(agents, encoding="utf-8")  # dead_letter_handoff defaults to "human"
    code, out = cli("check-config", "--config", str(path))
    assert code == 0
    assert "warning: dispatcher.dead_letter_handoff 'human' is not a declared agent" in out
    code, out = cli("check-config", "--config", str(EXAMPLE))
    assert "warning" not in out


def test_check_config_warns_of_an_account_whose_agents_leave_out_the_dead_letter_handoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.toml"
    text = EXAMPLE.read_text(encoding="utf-8").replace(
        'name = "support"', 'name = "support"\nagents = ["triage", "billing"]', 1
    )
    path.write_text(text, encoding="utf-8")
    code, out = cli("check-config", "--config", str(path))
    assert code == 0
    assert (
        "warning: dispatcher.dead_letter_handoff 'human' does not serve telegram.bots[0]"
        " (telegram 'support'), whose agents are triage, billing: a dead letter there leaves"
        " the session with its agent, and the user gets dispatcher.apology_no_person"
    ) in out


def test_missing_config_file_is_named_once(tmp_path: Path) -> None:
    absent = tmp_path / "absent.toml"
    result = run_cli("check-config", "--config", str(absent))
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: {absent}: config file not found"


def test_sessions_show_of_a_malformed_id_creates_no_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = cli("sessions", "show", "", "--config", str(config_with_store(tmp_path)))
    assert code == 1
    assert "session id is empty" in capsys.readouterr().err
    assert not (tmp_path / "gw.db").exists()


def test_sessions_show_rejects_a_malformed_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = cli("sessions", "show", "bad id!", "--config", str(config_with_store(tmp_path)))
    assert code == 1
    expected = "session id 'bad id!' may hold only letters, digits, '_' and '-'"
    assert capsys.readouterr().err == f"error: {expected}\n"


def test_purge_reports_how_many_rows_went(tmp_path: Path) -> None:
    create_store(tmp_path / "gw.db")
    code, out = cli("purge", "--config", str(config_with_store(tmp_path)))
    assert code == 0
    assert "purged 0 expired" in out


def test_purge_applies_store_retention_days_to_old_history(tmp_path: Path) -> None:
    """With store.retention_days set, `gateway purge` runs one retention pass too: a message
    written ten days ago goes, with its session (left empty); today's stays."""
    ten_days_ago = FakeClock(time.time() - 10 * 86400)

    async def write() -> None:
        async with SQLiteStore(tmp_path / "gw.db", clock=ten_days_ago) as store:
            old = await store.create_session("telegram", "support", "41", "triage")
            await store.append_message(old.session_id, "user", "old text")
        async with SQLiteStore(tmp_path / "gw.db") as store:
            new = await store.create_session("telegram", "support", "42", "triage")
            await store.append_message(new.session_id, "user", "new text")

    asyncio.run(write())
    code, out = cli("purge", "--config", str(config_with_store(tmp_path, "retention_days = 7\n")))
    assert code == 0, out
    assert "retention (7 days): " in out
    assert "messages 1" in out
    assert "sessions 1" in out
    with sqlite3.connect(tmp_path / "gw.db") as db:
        assert db.execute("SELECT text FROM messages").fetchall() == [("new text",)]


def test_purge_names_a_file_it_could_not_remove_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows go first; a file that then cannot go is named on stderr for an operator."""
    media = tmp_path / "media"

    async def write() -> Path:
        async with SQLiteStore(tmp_path / "gw.db", clock=FakeClock(time.time() - 10 * 86400)) as s:
            sid = (await s.create_session("telegram", "support", "41", "triage")).session_id
            made = await s.create_attachment(sid, name="a.pdf", content_type="x/y", source="upload")
        stuck = attachment_path(media, sid, made.id)
        (stuck / "inside").mkdir(parents=True)  # a folder in its place: unlink fails, root or not
        return stuck

    stuck = asyncio.run(write())
    extra = f'retention_days = 7\n[media]\nroot = "{media}"\n'
    code, out = cli("purge", "--config", str(config_with_store(tmp_path, extra)))
    assert code == 1
    assert "files 1" in out
    err = capsys.readouterr().err
    assert f"1 file(s) of deleted rows could not be removed: {stuck}; remove them by hand" in err


async def _session_with_a_file(tmp_path: Path, days_old: float = 0) -> Path:
    """Session telegram-support-41 with one stored file under ``tmp_path/data/media``, as
    ``gateway serve`` run in ``tmp_path`` with the default relative media.root leaves it."""
    clock = FakeClock(time.time() - days_old * 86400)
    async with SQLiteStore(tmp_path / "gw.db", clock=clock) as store:
        sid = (await store.create_session("telegram", "support", "41", "triage")).session_id
        made = await store.create_attachment(sid, name="a.pdf", content_type="x/y", source="upload")
    path = attachment_path(tmp_path / "data" / "media", sid, made.id)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"the file")
    return path


@pytest.mark.parametrize(
    "command",
    [["sessions", "delete", "telegram-support-41"], ["sessions", "export", "telegram-support-41"]],
)
def test_a_file_command_run_away_from_a_relative_media_root_refuses_and_changes_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
) -> None:
    """`cd / && gateway --config /abs/config.toml sessions delete ID`: the store is found by
    its absolute url, but data/media is read from / where there is none."""
    stored = asyncio.run(_session_with_a_file(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    if command[1] == "export":
        command = [*command, "--files", str(elsewhere / "out.zip")]
    code, out = cli(*command, "--config", str(config_with_store(tmp_path)))
    assert (code, out) == (1, "")
    err = capsys.readouterr().err
    assert f"error: media.root: no folder {elsewhere / 'data' / 'media'} " in err
    assert "give media.root as an absolute path" in err
    assert stored.read_bytes() == b"the file"
    assert list(elsewhere.iterdir()) == []  # no zip
    with sqlite3.connect(tmp_path / "gw.db") as db:
        assert db.execute("SELECT count(*) FROM attachments").fetchall() == [(1,)]


def test_purge_run_away_from_a_relative_media_root_says_the_files_stayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = asyncio.run(_session_with_a_file(tmp_path, days_old=10))
    monkeypatch.chdir(tmp_path / "data")  # data/media is not here
    code, out = cli("purge", "--config", str(config_with_store(tmp_path, "retention_days = 7\n")))
    assert code == 1
    assert "files 1" in out
    err = capsys.readouterr().err
    assert "error: 1 attachment row(s) deleted, but media.root is no folder here" in err
    assert stored.exists()


def test_telegram_set_webhook_names_an_unknown_bot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(config_with_store(tmp_path))
    code, _ = cli(
        "telegram", "set-webhook", "--bot", "nope", "--url", "https://x", "--config", config
    )
    assert code == 1
    assert "no bot named 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("postgresql://gw:pa#ss@db:5432/gw", "pa#ss"),
        ("postgresql://gw:a/b?c@db/gw", "a/b?c"),
        ("postgresql://gw@db/gw?password=hunter2&sslmode=require", "hunter2"),
    ],
)
def test_mask_url_hides_passwords_wherever_they_sit(url: str, secret: str) -> None:
    masked = mask_url(url)
    assert secret not in masked
    assert masked.startswith("postgresql://gw")


def test_check_config_names_an_undeclared_bot_starting_agent_of_module_agents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With agents.module the names are known only once the registry is built: check-config
    still refuses, naming the key."""
    bot = '[[telegram.bots]]\nname = "{}"\ntoken = "1:t"\nsecret_token = "s"\n'
    bot += 'starting_agent = "{}"\n'
    bots = bot.format("a", "coder") + bot.format("b", "nobody")
    agents = '[agents]\nstarting_agent = "coder"\nmodule = "tests.agents.sample_module"\n'
    path = config_with_store(tmp_path, bots + agents)
    code, _ = cli("check-config", "--config", str(path))
    assert code == 1
    err = capsys.readouterr().err
    assert "telegram.bots[1].starting_agent" in err
    assert "Traceback" not in err


def test_purge_without_retention_removes_old_files_no_row_names(tmp_path: Path) -> None:
    """An erasure cut by a crash after its rows' commit left the user's files: `gateway purge`
    removes those over an hour old, with or without store.retention_days; a named one stays."""
    media = tmp_path / "media"

    async def write() -> tuple[Path, Path]:
        async with SQLiteStore(tmp_path / "gw.db") as store:
            sid = (await store.create_session("telegram", "support", "41", "triage")).session_id
            made = await store.create_attachment(sid, name="a", content_type="x/y", source="upload")
        return attachment_path(media, sid, made.id), attachment_path(media, "web-gone", "f" * 32)

    named, orphan = asyncio.run(write())
    an_hour_ago = time.time() - 7200
    for path in (named, orphan):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
        os.utime(path, (an_hour_ago, an_hour_ago))
    code, out = cli(
        "purge", "--config", str(config_with_store(tmp_path, f'[media]\nroot = "{media}"\n'))
    )
    assert code == 0, out
    assert named.exists()
    assert not orphan.exists()
    assert not orphan.parent.exists()
