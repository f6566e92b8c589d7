"""``gateway migrate-store --from URL --to URL``: move a stopped deployment's store to another
backend (SQLite to PostgreSQL, or back), every row with its id, then check the counts."""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO, cast

from webhook_bot_gateway.store import (
    CountMismatch,
    Store,
    StoreError,
    TableAccess,
    TargetNotEmpty,
    UnusableSQLiteFile,
    check_url,
    copy_store,
    counts,
    is_postgres,
    lease_held_until,
    open_store,
    sqlite_path,
    why_no_store,
)

from .._summary import mask_url
from ._same_store import MEMORY, same_store

_SQLITE_FILES = ("", "-wal", "-shm", "-journal")  # a database and the files SQLite adds to it


async def migrate_store(args: argparse.Namespace, out: TextIO) -> int:
    """Copy ``args.source`` into ``args.target``; 0 when every table's count matches."""
    source_url, target_url = _checked("--from", args.source), _checked("--to", args.target)
    if same_store(source_url, target_url):  # before anything is opened: --replace empties
        raise ValueError("--from and --to name the same store")
    _check_source_exists(source_url)
    _check_target_path(target_url)
    await _check_source_holds_a_store(source_url)
    source = await _open("--from", source_url)
    try:
        await _refuse_if_in_use(source, "--from", source_url)
        if is_postgres(target_url):
            return await _copy_into(source, target_url, args, out)
        return await _copy_then_rename(source, sqlite_path(target_url), args, out)
    finally:
        await source.aclose()


async def _copy_into(source: Store, url: str, args: argparse.Namespace, out: TextIO) -> int:
    """Into a PostgreSQL target, the emptying (``--replace``), the copy and the count check are
    one transaction, committed once the counts are verified (store/postgres/_tables.py): a copy
    that fails leaves the target as it was."""
    target = await _open("--to", url)
    try:
        await _refuse_if_in_use(target, "--to", url)
        return await _copy(source, target, args, out)
    finally:
        await target.aclose()


async def _copy_then_rename(source: Store, path: str, args: argparse.Namespace, out: TextIO) -> int:
    """A SQLite target is written as a new file beside it, renamed over it once the counts
    are verified: a copy that fails leaves the target as it was (emptied by ``--replace`` and
    half filled, before), and a new one absent."""
    existing, temporary = _sqlite_url(path), _sqlite_url(f"{path}.migrating-{os.getpid()}")
    if _exists(path):
        await _refuse_if_not_empty(existing, replace=args.replace)
    with _removed_on_failure(temporary):
        code = await _copy_into(source, temporary, args, out)
        _swap_in(sqlite_path(temporary), path)
    return code


def _sqlite_url(path: str) -> str:
    return f"sqlite:///{os.path.abspath(path)}"


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _swap_in(new: str, path: str) -> None:
    """``new`` (closed, its log folded in) in the place of ``path`` with ``path``'s mode."""
    if os.path.exists(new + "-wal"):  # SQLite removes it when the last connection closes
        raise StoreError(f"--to {path}: the copy's write-ahead log was not folded in")
    if os.path.exists(path):
        shutil.copymode(path, new)
    for suffix in _SQLITE_FILES[1:]:  # the old file's log must not be applied to the new one
        Path(path + suffix).unlink(missing_ok=True)
    os.replace(new, path)


async def _refuse_if_not_empty(url: str, *, replace: bool) -> None:
    target = await _open("--to", url)
    try:
        await _refuse_if_in_use(target, "--to", url)
        existing = await counts(_tables(target))
    finally:
        await target.aclose()
    if any(existing.values()) and not replace:
        raise StoreError(f"{TargetNotEmpty(existing)}; pass --replace to empty it first")


async def _refuse_if_in_use(store: Store, flag: str, url: str) -> None:
    """A gateway still running on the store would change its rows during the copy (the counts
    then differ, or the target refuses a row: errors that read like bad data), and --replace
    would empty a live deployment. Its lease says so."""
    until = await lease_held_until(_tables(store), time.time())
    if until is not None:
        at = datetime.fromtimestamp(until, UTC).strftime("%H:%M:%S UTC")
        raise StoreError(
            f"{flag} {_shown(url)} is in use: a gateway process holds a lease on it until {at};"
            " stop it first (SIGTERM ends its lease at once; a killed process's runs out then)"
        )


def _checked(flag: str, url: str) -> str:
    """``check_url``, its error led by the option."""
    try:
        return check_url(url)
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None


def _check_source_exists(url: str) -> None:
    """Opening a SQLite url that names no file would create an empty store to copy from."""
    if not is_postgres(url) and not Path(sqlite_path(url)).is_file():
        raise ValueError(f"--from names no SQLite file: {sqlite_path(url)}")


def _check_target_path(url: str) -> None:
    """A SQLite target is a file, new or not, in a folder that exists. Unlike ``gateway serve``,
    this command makes no folder: a typo would put the copy where no ``store.url`` looks."""
    if is_postgres(url):
        return
    path = sqlite_path(url)
    if path == MEMORY:  # the copy would be verified, then gone with the command
        raise ValueError(
            "--to is sqlite:///:memory:, which holds nothing once the command ends;"
            " name a SQLite file or a PostgreSQL database"
        )
    if os.path.isdir(path):
        raise ValueError(f"--to names a folder, not a SQLite file: {path}")
    if not os.path.isdir(os.path.dirname(path) or "."):
        folder = os.path.dirname(path)
        raise ValueError(f"--to {path}: the folder {folder} does not exist; create it first")


async def _check_source_holds_a_store(url: str) -> None:
    """Opening a database that holds no gateway store would make one there (in another
    application's file too), copy its zero rows and, with ``--replace``, empty the target: a
    typo in --from emptied a deployment. So the source's schema version is read first, without
    writing. A version newer than this gateway's is refused by ``open_store`` before it writes;
    an older one is migrated there, as ``gateway serve`` would."""
    with _named("--from", url):
        why = await why_no_store(url)
    if why:
        raise StoreError(f"--from {_shown(url)} holds no gateway store ({why})")


async def _open(flag: str, url: str) -> Store:
    """``open_store``, its failures named by the option and the path (or the masked url)."""
    with _named(flag, url):
        return await open_store(url)


@contextmanager
def _named(flag: str, url: str) -> Iterator[None]:
    """Failures of opening or reading ``url`` as one StoreError naming the option and the store."""
    try:
        yield
    except UnusableSQLiteFile as exc:  # "PATH cannot be used as a SQLite store: ..."
        raise StoreError(f"{flag} {exc}") from exc
    except sqlite3.Error as exc:  # a file SQLite cannot open, ...
        path = sqlite_path(url)
        raise StoreError(f"{flag} {path} cannot be used as a SQLite store: {exc}") from exc
    except StoreError as exc:
        raise StoreError(f"{flag} {_shown(url)}: {exc}") from exc


def _shown(url: str) -> str:
    """The store as an error names it: a SQLite path, or the url with its password masked."""
    return mask_url(url) if is_postgres(url) else sqlite_path(url)


@contextmanager
def _removed_on_failure(url: str) -> Iterator[None]:
    """A SQLite target that did not exist is deleted again if the copy fails, so no half copy
    is left behind. A target that existed is left as it is."""
    path = "" if is_postgres(url) else sqlite_path(url)
    made = path not in ("", MEMORY) and not os.path.lexists(path)
    try:
        yield
    except BaseException:
        if made:
            for suffix in _SQLITE_FILES:
                Path(path + suffix).unlink(missing_ok=True)
        raise


async def _copy(source: Store, target: Store, args: argparse.Namespace, out: TextIO) -> int:
    print(f"copying {mask_url(args.source)} -> {mask_url(args.target)}", file=out)
    try:
        copied = await copy_store(_tables(source), _tables(target), replace=args.replace)
    except TargetNotEmpty as exc:
        raise StoreError(f"{exc}; pass --replace to empty it first") from None
    except CountMismatch as exc:
        raise StoreError(str(exc)) from None
    except (sqlite3.Error, StoreError) as exc:  # e.g. a source row the target refuses
        raise StoreError(f"the copy failed: {exc}") from exc
    for table, rows in copied.items():
        print(f"  {table}: {rows} rows", file=out)
    print("counts verified: the target holds every row of the source", file=out)
    return 0


def _tables(store: Store) -> TableAccess:
    # Both backends implement TableAccess; it is kept out of the Store protocol on purpose.
    return cast(TableAccess, store)
