"""``gateway migrate-store`` and a ``--from`` that holds no gateway store (an empty file,
another application's SQLite file, an empty PostgreSQL schema): refused in one ``error:`` line
before either store is opened. Opening it made a store there, copied its zero rows and, with
``--replace``, emptied the target. The source is only read: its bytes, its files and its
schema stay as they were."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import asyncpg
import pytest

from tests.gateway.test_migrate_store_paths import digest, make_store, refused, rows
from tests.pg import fresh_schema_sync, new_schema_name, server_url, with_search_path
from webhook_bot_gateway.gateway._summary import mask_url

NO_STORE = "holds no gateway store"


def empty_file(path: Path) -> None:
    path.write_bytes(b"")


def another_application(path: Path, journal: str = "DELETE") -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA journal_mode = {journal}")
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
        conn.commit()


SOURCES: dict[str, tuple[Callable[[Path], None], str]] = {
    "empty file": (empty_file, "(an empty file)"),
    "another application's file": (another_application, "(user_version 0, tables: users)"),
    "another application's WAL file": (
        lambda path: another_application(path, "WAL"),
        "(user_version 0, tables: users)",
    ),
}


@pytest.mark.parametrize(("make", "why"), SOURCES.values(), ids=SOURCES.keys())
def test_a_sqlite_source_without_a_store_is_refused_and_nothing_changes(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make: Callable[[Path], None],
    why: str,
) -> None:
    source, target, new = tmp_path / "typo.db", tmp_path / "live.db", tmp_path / "new.db"
    make(source)
    live = make_store(f"sqlite:///{target}")
    assert live["sessions"] == 2
    files = {name: digest(tmp_path / name) for name in os.listdir(tmp_path)}
    assert sorted(files) == ["live.db", "typo.db"]

    for to in (target, new):
        err = refused(
            capsys, "--from", f"sqlite:///{source}", "--to", f"sqlite:///{to}", "--replace"
        )
        assert err == f"error: --from {source} {NO_STORE} {why}\n"
        # Nothing opened: no file made, none written, no -wal or -shm left beside either.
        assert {name: digest(tmp_path / name) for name in os.listdir(tmp_path)} == files
    assert rows(f"sqlite:///{target}") == live


def schema_objects(url: str) -> list[str]:
    """The schema ``url``'s search_path names (if it exists), its relations and functions."""
    schema = url.rpartition("search_path=")[2]

    async def read() -> list[str]:
        conn = await asyncpg.connect(server_url())
        try:
            found = await conn.fetch(
                "SELECT nspname AS name FROM pg_namespace WHERE nspname = $1 UNION ALL"
                " SELECT relname FROM pg_class JOIN pg_namespace n ON relnamespace = n.oid"
                " WHERE nspname = $1 UNION ALL"
                " SELECT proname FROM pg_proc JOIN pg_namespace n ON pronamespace = n.oid"
                " WHERE nspname = $1",
                schema,
            )
        finally:
            await conn.close()
        return sorted(row["name"] for row in found)

    return asyncio.run(read())


def execute(url: str, statement: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())


def test_a_postgresql_source_without_a_store_is_refused_and_nothing_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = tmp_path / "new.db"
    with fresh_schema_sync() as source, fresh_schema_sync() as target:
        live = make_store(target)
        schema = source.rpartition("search_path=")[2]
        missing = with_search_path(server_url(), new_schema_name())  # a schema never made
        cases = {
            source: f"(no gateway_schema table in schema {schema})",
            missing: "(no schema of its search_path exists)",
        }
        for url, why in cases.items():
            for to in (target, f"sqlite:///{new}"):
                err = refused(capsys, "--from", url, "--to", to, "--replace")
                assert err == f"error: --from {mask_url(url)} {NO_STORE} {why}\n"
                assert schema_objects(source) == [schema]  # the schema, empty
                assert schema_objects(missing) == []  # not even made
            assert rows(target) == live
            assert not os.listdir(tmp_path)

        # Another application's table in the schema is no store either, and stays as it was.
        execute(source, "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
        execute(source, "INSERT INTO users VALUES (1, 'ada')")
        objects = schema_objects(source)
        err = refused(capsys, "--from", source, "--to", target, "--replace")
        assert err == f"error: --from {mask_url(source)} {NO_STORE} {cases[source]}\n"
        assert schema_objects(source) == objects
        assert rows(target) == live
