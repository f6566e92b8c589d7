"""open_store(url): sqlite urls, relative and absolute, memory; postgresql urls; others refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pg import fresh_schema
from webhook_bot_gateway.store import SQLiteStore, check_url, open_store
from webhook_bot_gateway.store._url import sqlite_path
from webhook_bot_gateway.store.postgres import PostgresStore


async def test_open_store_relative_path_creates_parent_dirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = await open_store("sqlite:///data/sub/gateway.db")
    try:
        assert isinstance(store, SQLiteStore)
        await store.ping()
    finally:
        await store.aclose()
    assert (tmp_path / "data" / "sub" / "gateway.db").is_file()


async def test_open_store_absolute_path(tmp_path: Path) -> None:
    path = tmp_path / "abs" / "gateway.db"
    store = await open_store(f"sqlite:///{path}")  # four slashes: sqlite:////tmp/...
    await store.aclose()
    assert path.is_file()


async def test_open_store_memory_passes_ttl_and_clock() -> None:
    now = [1000.0]
    store = await open_store("sqlite:///:memory:", dedup_ttl_hours=1, clock=lambda: now[0])
    try:
        assert await store.claim(["k"]) == {"k"}
        now[0] += 3601
        assert await store.claim(["k"]) == {"k"}
    finally:
        await store.aclose()


def test_sqlite_path_forms() -> None:
    assert sqlite_path("sqlite:///data/gateway.db") == "data/gateway.db"
    assert sqlite_path("sqlite:////var/lib/gw.db") == "/var/lib/gw.db"
    assert sqlite_path("sqlite:///:memory:") == ":memory:"


async def test_open_store_refuses_other_schemes_without_leaking_secrets() -> None:
    with pytest.raises(ValueError) as caught:
        await open_store("mysql://gw:s3cret-pw@db.example/gateway")
    message = (
        "unsupported store url scheme 'mysql';"
        " supported: sqlite:///path.db or postgresql://user@host:port/database"
    )
    assert str(caught.value) == message


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
async def test_open_store_opens_postgresql_urls(scheme: str) -> None:
    async with fresh_schema() as url:
        store = await open_store(url.replace("postgresql", scheme, 1), pool_size=2)
        try:
            assert isinstance(store, PostgresStore)
            assert await store.claim(["k"]) == {"k"}
            assert await store.claim(["k"]) == set()
        finally:
            await store.aclose()


def test_check_url_accepts_both_backends_and_refuses_the_rest() -> None:
    assert check_url("postgresql://gw@db:5432/gw") == "postgresql://gw@db:5432/gw"
    assert check_url("sqlite:///data/gw.db") == "sqlite:///data/gw.db"
    with pytest.raises(ValueError, match=r"unsupported store url scheme 'postgresql\+asyncpg'"):
        check_url("postgresql+asyncpg://gw:pw@db/gw")


@pytest.mark.parametrize(
    "url",
    ["sqlite://host/x.db", "sqlite:///", "sqlite:///dir/", "sqlite:///x.db?mode=ro", "x.db", ""],
)
def test_sqlite_path_refuses_malformed(url: str) -> None:
    with pytest.raises(ValueError, match="url"):
        sqlite_path(url)


def test_sqlite_path_message_omits_credentials() -> None:
    with pytest.raises(ValueError) as caught:
        sqlite_path("sqlite://user:hunter2@host/x.db")
    assert "hunter2" not in str(caught.value)
