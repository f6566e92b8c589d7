"""``gateway migrate-store --from URL --to URL``: move a stopped deployment's store to another
backend (SQLite to PostgreSQL, or back), every row with its id, then check the counts."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO, cast

from webhook_bot_gateway.store import (
    CountMismatch,
    Store,
    StoreError,
    TableAccess,
    TargetNotEmpty,
    check_url,
    copy_store,
    is_postgres,
    open_store,
    sqlite_path,
)

from ._summary import mask_url


async def migrate_store(args: argparse.Namespace, out: TextIO) -> int:
    """Copy ``args.source`` into ``args.target``; 0 when every table's count matches."""
    source_url, target_url = check_url(args.source), check_url(args.target)
    if source_url == target_url:
        raise ValueError("--from and --to name the same store")
    _check_source_exists(source_url)
    source = await open_store(source_url)
    try:
        target = await open_store(target_url)
        try:
            return await _copy(source, target, args, out)
        finally:
            await target.aclose()
    finally:
        await source.aclose()


def _check_source_exists(url: str) -> None:
    """Opening a SQLite url that names no file would create an empty store to copy from."""
    if not is_postgres(url) and not Path(sqlite_path(url)).is_file():
        raise ValueError(f"--from names no SQLite file: {sqlite_path(url)}")


async def _copy(source: Store, target: Store, args: argparse.Namespace, out: TextIO) -> int:
    print(f"copying {mask_url(args.source)} -> {mask_url(args.target)}", file=out)
    try:
        copied = await copy_store(_tables(source), _tables(target), replace=args.replace)
    except TargetNotEmpty as exc:
        raise StoreError(f"{exc}; pass --replace to empty it first") from None
    except CountMismatch as exc:
        raise StoreError(str(exc)) from None
    for table, rows in copied.items():
        print(f"  {table}: {rows} rows", file=out)
    print("counts verified: the target holds every row of the source", file=out)
    return 0


def _tables(store: Store) -> TableAccess:
    # Both backends implement TableAccess; it is kept out of the Store protocol on purpose.
    return cast(TableAccess, store)
