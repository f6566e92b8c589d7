"""The offline commands work on an existing store only: a SQLite url that names no file is one
``error:`` line naming ``store.url``, exit 1, and nothing is created (no folder, no database,
no admin token file). ``gateway serve`` still creates its store at its first start."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from tests.pg import fresh_schema, server_url
from webhook_bot_gateway.store import open_store

from .test_cli import EXAMPLE, cli, run_cli

OFFLINE_COMMANDS = [
    ["sessions", "list"],
    ["sessions", "show", "telegram-support-42"],
    ["sessions", "delete", "telegram-support-42"],
    ["sessions", "export", "telegram-support-42"],
    ["sessions", "export", "telegram-support-42", "--files", "out.zip"],
    ["purge"],
    ["quarantine", "list"],
    ["quarantine", "replay"],
    ["quarantine", "replay", "1"],
]
IDS = [" ".join(command) for command in OFFLINE_COMMANDS]


def write_config(folder: Path, url: str) -> Path:
    """A config outside ``folder`` (so that ``folder`` holds only what a command creates)."""
    path = folder.parent / f"{folder.name}.toml"
    agents = '[agents]\nstarting_agent = "a"\n[[agents.list]]\nname = "a"\nkind = "human"\n'
    admin = '[admin]\ntoken_file = "data/admin-token"\n'
    path.write_text(f'[store]\nurl = "{url}"\n{admin}{agents}', encoding="utf-8")
    return path


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory: relative store urls and token files land in it."""
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


@pytest.mark.parametrize("command", OFFLINE_COMMANDS, ids=IDS)
def test_an_offline_command_refuses_a_missing_sqlite_store_and_creates_nothing(
    workdir: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    config = write_config(workdir, "sqlite:///typo/gateway.db")
    code, out = cli(*command, "--config", str(config))
    err = capsys.readouterr().err
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "error: no SQLite store at typo/gateway.db (store.url): check the url and the working"
        " directory; `gateway serve` creates the store at its first start"
    ]
    assert list(workdir.iterdir()) == []  # no typo/, no database, no data/admin-token


def test_an_absolute_url_to_a_missing_file_is_refused_too(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = workdir / "missing" / "gw.db"
    code, _ = cli("purge", "--config", str(write_config(workdir, f"sqlite:///{db}")))
    assert code == 1
    assert f"error: no SQLite store at {db} (store.url)" in capsys.readouterr().err
    assert list(workdir.iterdir()) == []


def test_an_offline_command_refuses_an_in_memory_store(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = cli(
        "sessions", "list", "--config", str(write_config(workdir, "sqlite:///:memory:"))
    )
    assert (code, out) == (1, "")
    assert "error: store.url is sqlite:///:memory:" in capsys.readouterr().err


def test_a_mistyped_store_url_through_the_console_script(tmp_path: Path) -> None:
    """The user's report: the example config with ``GATEWAY_STORE_URL`` mistyped, as a real
    process. Before, it printed an empty list, exit 0, and left typo/gateway.db and
    data/admin-token behind."""
    typo = {"GATEWAY_STORE_URL": "sqlite:///typo/gateway.db"}
    result = run_cli("sessions", "list", "--config", str(EXAMPLE), env=typo, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith("error: no SQLite store at typo/gateway.db (store.url)")
    assert list(tmp_path.iterdir()) == []


def test_an_offline_command_refuses_an_empty_sqlite_file_and_leaves_it_empty(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "gw.db").touch()
    code, out = cli("sessions", "list", "--config", str(write_config(workdir, "sqlite:///gw.db")))
    assert (code, out) == (1, "")
    assert capsys.readouterr().err.startswith(
        "error: store.url names no gateway store (an empty file)"
    )
    assert [p.name for p in workdir.iterdir()] == ["gw.db"]
    assert (workdir / "gw.db").stat().st_size == 0


async def test_an_offline_command_refuses_an_empty_postgresql_schema_and_creates_nothing(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, the command migrated the empty schema (made the gateway's tables there) and
    answered with an empty store."""
    async with fresh_schema() as url:
        config = write_config(workdir, url)
        code, out = await asyncio.to_thread(cli, "purge", "--config", str(config))
        conn = await asyncpg.connect(url)
        try:
            tables = await conn.fetch(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = current_schema()"
            )
        finally:
            await conn.close()
    assert (code, out) == (1, "")
    assert "error: store.url names no gateway store (no gateway_schema table in schema" in (
        capsys.readouterr().err
    )
    assert tables == []


# A store.url that names something SQLite cannot use, or a malformed PostgreSQL url: one line
# naming store.url, exit 1, never a traceback, and the file left as it was.

NOT_A_DATABASE = b"x\n"


@pytest.mark.parametrize("command", OFFLINE_COMMANDS, ids=IDS)
def test_an_offline_command_refuses_a_file_that_is_not_a_database(
    workdir: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """Before: a traceback ending in ``sqlite3.DatabaseError: file is not a database``."""
    (workdir / "gw.db").write_bytes(NOT_A_DATABASE)
    code, out = cli(*command, "--config", str(write_config(workdir, "sqlite:///gw.db")))
    assert (code, out) == (1, "")
    assert capsys.readouterr().err.splitlines() == [
        "error: store.url: gw.db cannot be used as a SQLite store: file is not a database"
    ]
    assert [p.name for p in workdir.iterdir()] == ["gw.db"]
    assert (workdir / "gw.db").read_bytes() == NOT_A_DATABASE


def test_an_offline_command_refuses_a_folder_as_the_store(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "gw.db").mkdir()
    code, _ = cli("sessions", "list", "--config", str(write_config(workdir, "sqlite:///gw.db")))
    assert code == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: store.url: gw.db cannot be used as a SQLite store: it is a folder"  # as serve
    ]


def serve_config(folder: Path, url: str) -> Path:
    """A config for ``gateway serve`` on a free port, its admin token given."""
    path = folder.parent / f"{folder.name}-serve.toml"
    text = write_config(folder, url).read_text(encoding="utf-8")
    text = text.replace('token_file = "data/admin-token"', 'token = "a-long-enough-admin-token"')
    path.write_text(f"[server]\nport = 0\n{text}", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: p.write_bytes(NOT_A_DATABASE), "file is not a database"),
        (lambda p: p.mkdir(), "it is a folder"),
    ],
    ids=["not-a-database", "folder"],
)
def test_serve_refuses_a_store_sqlite_cannot_use_in_one_line(
    workdir: Path, make: Callable[[Path], object], reason: str
) -> None:
    """As a real process. Before: a traceback through aiohttp's start-up, ending in
    ``sqlite3.DatabaseError`` or ``sqlite3.OperationalError: unable to open database file``."""
    make(workdir / "gw.db")
    config = serve_config(workdir, "sqlite:///gw.db")
    result = run_cli("serve", "--config", str(config), cwd=workdir)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"error: store.url: gw.db cannot be used as a SQLite store: {reason}"
    )
    assert [p.name for p in workdir.iterdir()] == ["gw.db"]


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("postgresql://root@127.0.0.1:99999/x", "host has a port that is not a number from 1"),
        ("postgresql://root:s3cret@127.0.0.1:notaport/x", "host has a port that is not a number"),
        ("postgresql://root:s3cret@[::1/x", "has a '[' or ']' without its pair"),
    ],
)
def test_check_config_refuses_a_malformed_postgresql_url_naming_store_url(
    workdir: Path, capsys: pytest.CaptureFixture[str], url: str, problem: str
) -> None:
    """Before: ``config ...: OK``; then the commands failed with OverflowError (a traceback),
    "invalid literal for int() with base 10: 'notaport'" or "Invalid IPv6 URL"."""
    config = write_config(workdir, url)
    for command in (["check-config"], ["sessions", "list"]):
        code, out = cli(*command, "--config", str(config))
        err = capsys.readouterr().err
        assert (code, out) == (1, "")
        assert err.startswith(f"error: {config}: store.url: the PostgreSQL url")
        assert problem in err
        assert "s3cret" not in err
        assert len(err.splitlines()) == 1


@pytest.mark.parametrize("flag", ["--from", "--to"])
def test_migrate_store_refuses_a_malformed_postgresql_url_naming_the_option(
    workdir: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    bad, good = "postgresql://root:s3cret@127.0.0.1:99999/x", f"sqlite:///{workdir}/gw.db"
    urls = {"--from": bad, "--to": good} if flag == "--from" else {"--from": good, "--to": bad}
    code, out = cli("migrate-store", "--from", urls["--from"], "--to", urls["--to"])
    err = capsys.readouterr().err
    assert (code, out) == (1, "")
    assert err.startswith(f"error: {flag}: the PostgreSQL url's host has a port that is not")
    assert "s3cret" not in err
    assert list(workdir.iterdir()) == []


async def test_an_offline_command_says_which_postgresql_database_does_not_exist(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: "PostgreSQL refused the connection: 3D000 InvalidCatalogNameError"."""
    parts = urlsplit(server_url())
    name = f"no_such_db_{uuid.uuid4().hex[:8]}"
    url = urlunsplit((parts.scheme, parts.netloc, f"/{name}", "", ""))
    code, out = await asyncio.to_thread(
        cli, "sessions", "list", "--config", str(write_config(workdir, url))
    )
    assert (code, out) == (1, "")
    assert capsys.readouterr().err.splitlines() == [
        f"error: store.url: database '{name}' does not exist on the PostgreSQL server"
        " (3D000 InvalidCatalogNameError)"
    ]


async def test_a_read_only_postgresql_target_is_one_error_line_not_a_traceback(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A url naming a standby (or a server in read-only mode): the migrations that make the
    store at open raised asyncpg's ReadOnlySQLTransactionError, a traceback."""
    await (await open_store(f"sqlite:///{workdir}/gw.db")).aclose()
    async with fresh_schema() as url:
        read_only = f"{url}&default_transaction_read_only=on"
        code, out = await asyncio.to_thread(
            cli, "migrate-store", "--from", "sqlite:///gw.db", "--to", read_only
        )
    err = capsys.readouterr().err
    assert (code, out) == (1, "")
    assert err.startswith("error: --to ")
    assert err.rstrip().endswith(
        ": the PostgreSQL server cannot do the work now: it is read-only: a standby, or a"
        " failover under way (25006 ReadOnlySQLTransactionError)"
    )
    assert len(err.splitlines()) == 1
