"""The embedded backend: one SQLite file (or ``:memory:``) through aiosqlite."""

from .._args import DEFAULT_DEDUP_TTL_HOURS
from ._store import SQLiteStore
from ._turn import CommitHook, SQLiteTurn

__all__ = ["DEFAULT_DEDUP_TTL_HOURS", "CommitHook", "SQLiteStore", "SQLiteTurn"]
