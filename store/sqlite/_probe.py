"""Whether a SQLite file holds a gateway store, read without writing anything (``gateway
migrate-store`` asks before it opens a source, which would make one there)."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from urllib.parse import quote

from .._errors import UnusableSQLiteFile

# The tables every schema version has (_V1).
_FIRST_TABLES = frozenset({"sessions", "messages", "session_events", "processed_messages"})


def why_no_store(path: str) -> str:
    """Why the SQLite file holds no gateway store ("" if it holds one): its version is
    ``PRAGMA user_version``, 0 in a file the gateway never opened. UnusableSQLiteFile for a
    file SQLite cannot read as a database."""
    if os.path.getsize(path) == 0:
        return "an empty file"
    try:
        version, tables = _read(path)
    except sqlite3.DatabaseError as exc:  # "file is not a database", "unable to open ..."
        raise UnusableSQLiteFile(path, str(exc)) from exc
    if version > 0 and _FIRST_TABLES.issubset(tables):
        return ""
    if not tables:
        return "no tables"
    more = ", ..." if len(tables) > 5 else ""
    return f"user_version {version}, tables: {', '.join(tables[:5])}{more}"


def _read(path: str) -> tuple[int, list[str]]:
    """The file's ``user_version`` and its tables' names, sorted."""
    # mode=rw creates no file; query_only writes nothing. A read-only connection (mode=ro)
    # would leave a WAL database's -wal and -shm files behind; this one removes them on close.
    uri = f"file:{quote(os.path.abspath(path))}?mode=rw"
    with closing(sqlite3.connect(uri, uri=True)) as conn:
        conn.execute("PRAGMA query_only = ON")
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
        found = conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'").fetchall()
    return version, sorted(name for (name,) in found)
