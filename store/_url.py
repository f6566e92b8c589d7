"""``open_store(url)``: pick and open a backend from the ``[store] url`` setting."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ._errors import UnusableSQLiteFile
from ._private import make_private_folders
from ._protocol import Store
from .postgres import DEFAULT_POOL_SIZE, PostgresStore
from .postgres import _probe as postgres_probe
from .postgres._store import CONNECT_TIMEOUT
from .postgres._url import check_postgres_url
from .sqlite import DEFAULT_DEDUP_TTL_HOURS, SQLiteStore
from .sqlite import _probe as sqlite_probe

_SQLITE = "sqlite:///"
_MEMORY = ":memory:"
POSTGRES_SCHEMES = ("postgresql", "postgres")
SUPPORTED = "sqlite:///path.db or postgresql://user@host:port/database"


def scheme_of(url: str) -> str:
    """The url's scheme ('' if none); error messages name only this: a url may carry a password."""
    if not isinstance(url, str):
        raise ValueError(f"store url must be a string, got {type(url).__name__}")
    return url.split(":", 1)[0].lower() if ":" in url else ""


def is_postgres(url: str) -> bool:
    """True for a ``postgresql://`` (or ``postgres://``) url."""
    return scheme_of(url) in POSTGRES_SCHEMES and url.split(":", 1)[1].startswith("//")


def sqlite_path(url: str) -> str:
    """The file path of a ``sqlite:///`` url (relative to the working directory) or :memory:."""
    scheme = scheme_of(url)
    if not url.startswith(_SQLITE):
        if scheme == "sqlite":
            raise ValueError("sqlite store url must look like sqlite:///relative/path.db")
        raise ValueError(f"unsupported store url scheme {scheme!r}; supported: {SUPPORTED}")
    path = url[len(_SQLITE) :]
    if not path or "?" in path or path.endswith("/"):
        raise ValueError("sqlite store url must name a file: sqlite:///path.db (no query)")
    return path


def check_url(url: str) -> str:
    """``url`` if a backend can open it; ValueError if not, naming the scheme or the part of
    the url at fault, never its text (a password may sit anywhere in a malformed url)."""
    if is_postgres(url):
        check_postgres_url(url)
        return url
    sqlite_path(url)
    return url


async def open_store(
    url: str,
    *,
    dedup_ttl_hours: float = DEFAULT_DEDUP_TTL_HOURS,
    clock: Callable[[], float] = time.time,
    pool_size: int = DEFAULT_POOL_SIZE,
) -> Store:
    """Open the store a url names (creating a SQLite file and its parent directories if
    needed, owner-only: mode 0600 and 0700).

    ``pool_size``: connections a PostgreSQL store keeps at most; SQLite has one connection.
    """
    if is_postgres(url):
        return await PostgresStore.open(
            url, dedup_ttl_hours=dedup_ttl_hours, clock=clock, pool_size=pool_size
        )
    path = sqlite_path(url)
    if path != _MEMORY:
        _make_folder(path)
    return await SQLiteStore.open(path, dedup_ttl_hours=dedup_ttl_hours, clock=clock)


def _make_folder(path: str) -> None:
    """The database's folder and its missing parents, owner-only (docs/security.md)."""
    try:
        make_private_folders(Path(path).parent)
    except OSError as exc:  # a file where a folder should be, no permission
        reason = f"cannot make its folder: {exc.strerror or type(exc).__name__}"
        raise UnusableSQLiteFile(path, reason) from exc


async def why_no_store(url: str) -> str:
    """Why the database ``url`` names holds no gateway store, "" when it holds one; nothing is
    created or written. A SQLite file must exist (the caller checks); UnusableSQLiteFile if
    it is no SQLite database."""
    if is_postgres(url):
        return await postgres_probe.why_no_store(url, CONNECT_TIMEOUT)
    return sqlite_probe.why_no_store(sqlite_path(url))
