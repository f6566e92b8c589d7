"""Whether two store urls name one store, however each is spelled.

``gateway migrate-store`` refuses to copy a store onto itself: with ``--replace`` it would empty
the target, which is then the source, and verify zero rows against zero rows. Comparing the urls'
text missed ``data/x.db`` against ``./data/x.db``, an absolute path, a symlink or ``..``.
"""

from __future__ import annotations

import getpass
import ipaddress
import os
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlparse

from webhook_bot_gateway.store import is_postgres, sqlite_path

MEMORY = ":memory:"
_LOCAL = "localhost"
_OPTION_SEARCH_PATH = re.compile(r"(?:-c\s*|--)search_path=(\S+)")


def same_store(first: str, second: str) -> bool:
    """True if both (checked) urls may name one database: then copying one onto the other
    would empty it."""
    if first == second:
        return True
    if is_postgres(first) != is_postgres(second):
        return False
    if is_postgres(first):
        return _same_postgres(first, second)
    return _same_sqlite_file(sqlite_path(first), sqlite_path(second))


def _same_sqlite_file(first: str, second: str) -> bool:
    if MEMORY in (first, second):
        return False  # every :memory: database is private to its connection
    if os.path.realpath(first) == os.path.realpath(second):  # ./, .., symlinks, absolute
        return True
    try:
        return os.path.samefile(first, second)  # hard links, case-insensitive file systems
    except OSError:  # one of them does not exist (yet): not the other one
        return False


@dataclass(frozen=True)
class _Place:
    """Where a PostgreSQL url's tables are, as far as the url tells."""

    servers: frozenset[tuple[str, int]]
    database: str
    schemas: frozenset[str]  # the schema its tables may be in: the search_path's first


def _same_postgres(first: str, second: str) -> bool:
    try:
        one, two = _place(first), _place(second)
    except ValueError:  # asyncpg refuses such a url too, before it writes anything
        return False
    return (
        bool(one.servers & two.servers)
        and one.database == two.database
        and bool(one.schemas & two.schemas)
    )


def _place(url: str) -> _Place:
    """Parsed as asyncpg does, with its defaults (which read the same environment for both)."""
    parsed = urlparse(url)
    query = dict(parse_qsl(parsed.query, keep_blank_values=True))
    auth, at, hosts = parsed.netloc.partition("@")
    if not at:
        auth, hosts = "", parsed.netloc
    user = (
        unquote(auth.partition(":")[0])
        or query.get("user")
        or os.environ.get("PGUSER")
        or getpass.getuser()
    )
    port = int((query.get("port") or os.environ.get("PGPORT") or "5432").split(",")[0])
    hosts = hosts or query.get("host") or os.environ.get("PGHOST", "")
    database = (
        unquote(parsed.path.removeprefix("/"))
        or query.get("dbname")
        or query.get("database")
        or os.environ.get("PGDATABASE")
        or user
    )
    return _Place(_servers(hosts, port), database, _schemas(query, user))


def _servers(hosts: str, default_port: int) -> frozenset[tuple[str, int]]:
    servers = set()
    for item in hosts.split(","):
        if item.startswith("["):  # [::1]:5432
            host, _, rest = item[1:].partition("]")
            port = rest.removeprefix(":")
        else:
            host, _, port = item.partition(":")
        servers.add((_host(unquote(host)), int(port) if port else default_port))
    return frozenset(servers)


def _host(host: str) -> str:
    """Every name of this machine's server is one: no host (asyncpg's default: the local socket,
    then localhost), a socket folder, localhost and every loopback address."""
    host = host.lower()
    if not host or host.startswith("/") or host == _LOCAL:
        return _LOCAL
    try:
        return _LOCAL if ipaddress.ip_address(host).is_loopback else host
    except ValueError:  # a name: compared as written (no DNS look-up)
        return host


def _schemas(query: dict[str, str], user: str) -> frozenset[str]:
    """Tables are made in, and read from, the search_path's first schema that exists. The
    default (``"$user", public``) may be either; an explicit path is taken at its first."""
    path = query.get("search_path")
    if path is None:
        found = _OPTION_SEARCH_PATH.findall(query.get("options", ""))
        path = found[-1] if found else None
    if path is None:
        return frozenset({user, "public"})
    first = path.split(",")[0].strip()
    if first in ("$user", '"$user"'):
        return frozenset({user})
    if first.startswith('"') and first.endswith('"'):
        return frozenset({first[1:-1]})
    return frozenset({first.lower()})
