"""SQLite backend: what the store's path names on disk. A path SQLite cannot use (a file that is
not a database, a folder, a folder that cannot be made) is a StoreError naming the path, with
the file left as it was; a database the store creates, and its folders, are owner-only."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from webhook_bot_gateway.store import (
    SQLiteStore,
    StoreError,
    UnusableSQLiteFile,
    make_private_folders,
    open_store,
    why_no_store,
)

NOT_A_DATABASE = b"x\n"


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that leaves what is made readable by everyone unless the code says otherwise."""
    before = os.umask(0)
    yield
    os.umask(before)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def sqlite_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def test_a_file_that_is_not_a_database_is_refused_and_left_as_it_was(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gw.db"
    path.write_bytes(NOT_A_DATABASE)
    with pytest.raises(UnusableSQLiteFile) as caught:
        await open_store(f"sqlite:///{path}")
    assert str(caught.value) == f"{path} cannot be used as a SQLite store: file is not a database"
    assert isinstance(caught.value, StoreError)
    assert path.read_bytes() == NOT_A_DATABASE
    assert sqlite_files(tmp_path) == ["gw.db"]  # no -wal, -shm or -journal left


async def test_a_folder_as_the_database_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "gw.db"
    folder.mkdir()
    with pytest.raises(UnusableSQLiteFile) as caught:
        await SQLiteStore.open(folder)
    assert str(caught.value) == f"{folder} cannot be used as a SQLite store: it is a folder"
    assert list(folder.iterdir()) == []


async def test_a_file_where_the_folder_should_be_is_refused(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("not a folder")
    path = tmp_path / "data" / "gw.db"
    with pytest.raises(UnusableSQLiteFile) as caught:
        await open_store(f"sqlite:///{path}")
    assert str(caught.value).startswith(
        f"{path} cannot be used as a SQLite store: cannot make its folder: "
    )


async def test_a_missing_folder_of_a_store_opened_directly_is_refused(tmp_path: Path) -> None:
    """``SQLiteStore.open`` makes no folder (``open_store`` does)."""
    path = tmp_path / "missing" / "gw.db"
    with pytest.raises(UnusableSQLiteFile, match="No such file or directory"):
        await SQLiteStore.open(path)
    assert not (tmp_path / "missing").exists()


async def test_the_probe_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    """The offline commands and migrate-store ask it first: it raised sqlite3's own error."""
    path = tmp_path / "gw.db"
    path.write_bytes(NOT_A_DATABASE)
    with pytest.raises(UnusableSQLiteFile) as caught:
        await why_no_store(f"sqlite:///{path}")
    assert str(caught.value) == f"{path} cannot be used as a SQLite store: file is not a database"
    assert path.read_bytes() == NOT_A_DATABASE


async def test_a_new_database_and_its_new_folders_are_owner_only(
    tmp_path: Path, open_umask: None
) -> None:
    path = tmp_path / "data" / "sub" / "gw.db"
    store = await open_store(f"sqlite:///{path}")
    try:
        await store.claim(["k"])  # a write: the -wal and -shm files exist while it is open
        names = sqlite_files(path.parent)
        assert names == ["gw.db", "gw.db-shm", "gw.db-wal"]
        assert {name: mode(path.parent / name) for name in names} == dict.fromkeys(names, 0o600)
    finally:
        await store.aclose()
    assert mode(path) == 0o600
    assert mode(tmp_path / "data") == mode(tmp_path / "data" / "sub") == 0o700


async def test_an_existing_database_and_folder_keep_their_modes(
    tmp_path: Path, open_umask: None
) -> None:
    """An operator's choice (a group that reads the backups) is not undone at each start."""
    folder = tmp_path / "data"
    folder.mkdir(mode=0o750)
    path = folder / "gw.db"
    store = await open_store(f"sqlite:///{path}")
    await store.aclose()
    path.chmod(0o640)
    store = await open_store(f"sqlite:///{path}")
    await store.aclose()
    assert (mode(folder), mode(path)) == (0o750, 0o640)


def test_make_private_folders_makes_each_missing_one_0700_and_leaves_the_rest(
    tmp_path: Path, open_umask: None
) -> None:
    (tmp_path / "media").mkdir(mode=0o755)
    make_private_folders(tmp_path / "media" / "s1" / "inner")
    assert mode(tmp_path / "media") == 0o755
    assert mode(tmp_path / "media" / "s1") == mode(tmp_path / "media" / "s1" / "inner") == 0o700
    make_private_folders(tmp_path / "media" / "s1")  # there already: nothing happens
