"""``gateway migrate-store`` and the paths it is given: one store spelled two ways is refused
before anything is opened (``--replace`` emptied it: data loss), a folder or a file that is no
database is named in one ``error:`` line, a failed copy leaves no new file behind, and a
target's missing folder is refused, not made."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.gateway.test_migrate_store import populate, run
from tests.pg import fresh_schema_sync, server_url
from webhook_bot_gateway.store import open_store
from webhook_bot_gateway.store._copy import counts

SAME = "name the same store"


def make_store(url: str) -> dict[str, int]:
    """A populated store at ``url``; its row counts."""

    async def fill() -> dict[str, int]:
        store = await open_store(url)
        try:
            await populate(store)
            return await counts(store)  # type: ignore[arg-type]
        finally:
            await store.aclose()

    return asyncio.run(fill())


def rows(url: str) -> dict[str, int]:
    async def read() -> dict[str, int]:
        store = await open_store(url)
        try:
            return await counts(store)  # type: ignore[arg-type]
        finally:
            await store.aclose()

    return asyncio.run(read())


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the command; it must exit 1 with one ``error:`` line. Returns that line."""
    code, _ = run("migrate-store", *argv)
    err = capsys.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    return err


@pytest.fixture
def same_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A populated ``data/same.db`` under the working directory, with other names for it:
    ``link.db`` (symlink), ``hard.db`` (hard link), ``alias/`` (a symlinked folder)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "sub").mkdir(parents=True)
    assert sum(make_store("sqlite:///data/same.db").values()) > 0
    (tmp_path / "link.db").symlink_to(tmp_path / "data" / "same.db")
    os.link(tmp_path / "data" / "same.db", tmp_path / "hard.db")
    (tmp_path / "alias").symlink_to(tmp_path / "data", target_is_directory=True)
    return tmp_path / "data" / "same.db"


SPELLINGS = {
    "dot": "sqlite:///./data/same.db",
    "absolute": "sqlite:///{root}/data/same.db",
    "double slash": "sqlite:///data//same.db",
    "dot-dot": "sqlite:///data/sub/../same.db",
    "outside and back": "sqlite:///../{name}/data/same.db",
    "symlink": "sqlite:///link.db",
    "symlinked folder": "sqlite:///alias/same.db",
    "hard link": "sqlite:///hard.db",
}


@pytest.mark.parametrize("spelling", SPELLINGS.values(), ids=SPELLINGS.keys())
@pytest.mark.parametrize("direction", ["to", "from"])
def test_one_sqlite_file_spelled_two_ways_is_refused_and_left_untouched(
    same_db: Path, spelling: str, direction: str, capsys: pytest.CaptureFixture[str]
) -> None:
    other = spelling.format(root=same_db.parent.parent, name=same_db.parent.parent.name)
    plain = "sqlite:///data/same.db"
    before, files = digest(same_db), sorted(os.listdir(same_db.parent))
    source, target = (plain, other) if direction == "to" else (other, plain)
    assert SAME in refused(capsys, "--from", source, "--to", target, "--replace")
    # Nothing was opened: the file is byte for byte what it was, no -wal or -shm beside it.
    assert digest(same_db) == before
    assert sorted(os.listdir(same_db.parent)) == files
    assert rows(plain)["sessions"] == 2


def test_another_sqlite_file_is_still_a_target(
    same_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = "sqlite:///./data/sub/../copy.db"
    code, out = run("migrate-store", "--from", "sqlite:///link.db", "--to", copy)
    assert code == 0, capsys.readouterr().err
    assert rows(copy) == rows("sqlite:///data/same.db")
    assert SAME in refused(capsys, "--from", copy, "--to", "sqlite:///data/copy.db", "--replace")


def postgres_spellings(url: str, schema: str) -> list[str]:
    """Other urls of ``url``'s database with ``schema`` as its search_path."""
    parts = urlsplit(url)
    auth = parts.netloc.rpartition("@")[0]
    auth = f"{auth}@" if auth else ""
    host, port, path = parts.hostname or "", parts.port or 5432, parts.path
    alias = {"127.0.0.1": "localhost", "localhost": "127.0.0.1"}.get(host, host)
    other = "postgres" if parts.scheme == "postgresql" else "postgresql"
    short = "" if port == 5432 else f":{port}"
    return [
        f"{other}://{auth}{host}:{port}{path}?search_path={schema}",
        f"{parts.scheme}://{auth}{alias}{short}{path}?application_name=x&search_path={schema}",
        f"{parts.scheme}://{auth}{host}:{port}{path}?search_path={schema.upper()},public",
        f"{parts.scheme}://{auth}{host}:{port}{path}?options=-c%20search_path%3D{schema}",
    ]


def test_one_postgresql_store_spelled_two_ways_is_refused_and_left_untouched(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = server_url()
    with fresh_schema_sync() as url, fresh_schema_sync() as elsewhere:
        before = make_store(url)
        schema = url.rpartition("search_path=")[2]
        for spelling in postgres_spellings(base, schema):
            assert SAME in refused(capsys, "--from", url, "--to", spelling, "--replace")
            assert rows(url) == before
        # Another schema of the same database is another store.
        code, _ = run("migrate-store", "--from", url, "--to", elsewhere)
        assert code == 0, capsys.readouterr().err
        assert rows(elsewhere) == before


def test_a_folder_as_target_is_named_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_store(f"sqlite:///{tmp_path / 'a.db'}")
    (tmp_path / "data").mkdir()
    err = refused(
        capsys, "--from", f"sqlite:///{tmp_path / 'a.db'}", "--to", f"sqlite:///{tmp_path / 'data'}"
    )
    assert "--to" in err
    assert str(tmp_path / "data") in err
    assert os.listdir(tmp_path / "data") == []


def test_a_file_that_is_no_database_is_named_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml, store, copy = tmp_path / "some.toml", tmp_path / "a.db", tmp_path / "copy.db"
    toml.write_text('[store]\nurl = "sqlite:///data/gateway.db"\n' * 100)
    before = digest(toml)
    make_store(f"sqlite:///{store}")

    err = refused(capsys, "--from", f"sqlite:///{toml}", "--to", f"sqlite:///{copy}")
    assert f"--from {toml}" in err
    assert "not a database" in err
    assert not copy.exists()

    err = refused(capsys, "--from", f"sqlite:///{store}", "--to", f"sqlite:///{toml}")
    assert f"--to {toml}" in err
    assert "not a database" in err
    assert digest(toml) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.db", "some.toml"]


def test_a_copy_that_fails_leaves_no_new_target_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "a.db"
    make_store(f"sqlite:///{source}")
    with sqlite3.connect(source) as conn:  # a row the target's CHECK refuses (a damaged file)
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("UPDATE sessions SET status = 'bogus' WHERE chat_id = '42'")
    conn.close()

    err = refused(capsys, "--from", f"sqlite:///{source}", "--to", f"sqlite:///{tmp_path / 'b.db'}")
    assert "the copy failed" in err
    assert "CHECK constraint failed" in err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.db"]


def test_a_copy_that_fails_leaves_a_replaced_target_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --replace the target was emptied first and left half filled when a row failed;
    the copy is now written beside it and renamed over it only once verified."""
    source, target = tmp_path / "a.db", tmp_path / "b.db"
    make_store(f"sqlite:///{source}")
    with sqlite3.connect(source) as conn:  # a row the target's CHECK refuses (a damaged file)
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("UPDATE sessions SET status = 'bogus' WHERE chat_id = '42'")
    conn.close()
    before = make_store(f"sqlite:///{target}")
    target.chmod(0o600)
    image = digest(target)

    err = refused(
        capsys, "--from", f"sqlite:///{source}", "--to", f"sqlite:///{target}", "--replace"
    )
    assert "the copy failed" in err
    assert digest(target) == image  # not emptied, not half filled
    assert rows(f"sqlite:///{target}") == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.db", "b.db"]

    with sqlite3.connect(source) as conn:  # mended, the same command replaces it whole
        conn.execute("UPDATE sessions SET status = 'idle' WHERE chat_id = '42'")
    conn.close()
    code, _ = run(
        "migrate-store", "--from", f"sqlite:///{source}", "--to", f"sqlite:///{target}", "--replace"
    )
    assert code == 0, capsys.readouterr().err
    assert rows(f"sqlite:///{target}") == rows(f"sqlite:///{source}")
    assert target.stat().st_mode & 0o777 == 0o600  # the file keeps its mode
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.db", "b.db"]


def test_a_target_in_a_missing_folder_is_refused_not_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    make_store("sqlite:///a.db")
    err = refused(capsys, "--from", "sqlite:///a.db", "--to", "sqlite:///nodir/copy.db")
    assert "--to nodir/copy.db" in err
    assert "folder nodir does not exist" in err
    err = refused(capsys, "--from", "sqlite:///a.db", "--to", f"sqlite:///{tmp_path}/x/y/copy.db")
    assert f"folder {tmp_path}/x/y does not exist" in err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.db"]
    # The file itself is made, in a folder that exists.
    code, _ = run("migrate-store", "--from", "sqlite:///a.db", "--to", "sqlite:///copy.db")
    assert code == 0, capsys.readouterr().err
    assert rows("sqlite:///copy.db") == rows("sqlite:///a.db")
