"""open_store(url): sqlite urls, relative and absolute, memory; other schemes refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import SQLiteStore, open_store
from store._url import sqlite_path


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
        await open_store("postgresql://gw:s3cret-pw@db.example/gateway")
    message = "unsupported store url scheme 'postgresql'; supported: sqlite:///path.db"
    assert str(caught.value) == message


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
