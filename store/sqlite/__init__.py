"""The embedded backend: one SQLite file (or ``:memory:``) through aiosqlite."""

from ._store import DEFAULT_DEDUP_TTL_HOURS, SQLiteStore
from ._turn import CommitHook, SQLiteTurn

__all__ = ["DEFAULT_DEDUP_TTL_HOURS", "CommitHook", "SQLiteStore", "SQLiteTurn"]
