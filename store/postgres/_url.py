"""The form of a PostgreSQL store url, read as asyncpg (0.32) reads it, checked before any
connection; and the role and database it logs in as, for the errors of a refused login.

Every error names the part at fault and never quotes the url: in a url whose password holds an
unescaped ``@``, ``:``, ``/``, ``?`` or ``#``, any part (the host, the port, the query) may be
a piece of the password.
"""

from __future__ import annotations

import getpass
import os
import re
from urllib.parse import ParseResult, parse_qs, unquote, urlparse

# Query keys asyncpg reads itself, with the values it accepts (any other key is sent to the
# server as a setting, e.g. search_path). sslmode also takes verify_ca and verify_full.
CHOICES = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "target_session_attrs": (
        "any",
        "primary",
        "standby",
        "prefer-standby",
        "read-write",
        "read-only",
    ),
    "sslnegotiation": ("postgres", "direct"),
    "gsslib": ("gssapi", "sspi"),
}
_IPV6 = re.compile(r"\[[^\]]+\](?::(?P<port>.*))?")
_DIGITS = re.compile(r"[0-9]+")
MAX_PORT = 65535
_ENCODE = "percent-encode @ : / ? # [ ] in a user name or password"


def check_postgres_url(url: str) -> None:
    """ValueError naming what is wrong with the form of a ``postgresql://`` url (the scheme
    is known to be one); nothing is connected to."""
    parsed = _parsed(url)
    if parsed.fragment:
        raise ValueError(f"the PostgreSQL url has a '#' (no fragment is read); {_ENCODE}")
    auth, at, hosts = parsed.netloc.partition("@")  # asyncpg splits at the first @
    if not at:
        hosts = auth
    elif "@" in hosts:
        raise ValueError(f"the PostgreSQL url has more than one '@'; {_ENCODE}")
    for host in hosts.split(",") if hosts else []:
        _check_host(host, where="host", quoted=True)
    query = _query(parsed.query)
    for host in query["host"].split(",") if "host" in query else []:
        _check_host(host, where="query's host", quoted=False)
    for port in query["port"].split(",") if "port" in query else []:
        _check_port(port, where="query's port")
    for key, allowed in CHOICES.items():
        if key in query and query[key].replace("_", "-") not in allowed:
            raise ValueError(f"the PostgreSQL url's {key} must be one of: {', '.join(allowed)}")


def _parsed(url: str) -> ParseResult:
    try:
        return urlparse(url)
    except ValueError:  # "Invalid IPv6 URL": a [ or ] without its pair
        raise ValueError(
            "the PostgreSQL url has a '[' or ']' without its pair: an IPv6 host is written"
            f" [::1] or [::1]:5432; {_ENCODE}"
        ) from None


def _query(text: str) -> dict[str, str]:
    """The query's keys and values (the last of a repeated key), as asyncpg reads them."""
    if not text:
        return {}
    try:
        pairs = parse_qs(text, strict_parsing=True)
    except ValueError:  # a part without '='
        raise ValueError(
            f"the PostgreSQL url's query must be key=value pairs joined by '&'; {_ENCODE}"
        ) from None
    return {key: values[-1] for key, values in pairs.items()}


def _check_host(host: str, *, where: str, quoted: bool) -> None:
    """One host of a comma-separated list: ``name``, ``name:port``, ``[v6]``, ``[v6]:port``
    or (in the query) a socket folder ``/var/run/postgresql``."""
    if not host:
        raise ValueError(f"the PostgreSQL url's {where} list has an empty entry")
    if host.startswith("/"):  # a unix socket's folder; asyncpg takes no port there
        return
    if host.startswith("["):
        match = _IPV6.fullmatch(host)
        if match is None:
            raise ValueError(
                f"the PostgreSQL url's {where} has a malformed IPv6 address: write [::1]"
                " or [::1]:5432"
            )
        port = match["port"]
    else:
        name, _, port = host.partition(":")
        if not name:
            raise ValueError(f"the PostgreSQL url's {where} has a port but no name")
    if port:
        _check_port(unquote(port) if quoted else port, where=where)


def _check_port(port: str, *, where: str) -> None:
    if _DIGITS.fullmatch(port) is None or not 1 <= int(port) <= MAX_PORT:
        raise ValueError(
            f"the PostgreSQL url's {where} has a port that is not a number from 1 to"
            f" {MAX_PORT}; {_ENCODE}"
        )


SSL_FILES = ("sslrootcert", "sslcert", "sslkey", "sslcrl")  # files asyncpg opens to connect


def unreadable_file(url: str) -> str | None:
    """Which file the (checked) url names that cannot be read, as ``key: reason``; None if
    all can be. asyncpg's own error for one is a bare FileNotFoundError, like a refused socket."""
    query = _query(urlparse(url).query)
    for key in SSL_FILES:
        path = query.get(key)
        if not path or path == "system":  # libpq's "system": the system's certificates
            continue
        try:
            with open(os.path.expanduser(path), "rb"):
                pass
        except OSError as exc:  # the path itself is left out, as every part of the url is
            return f"{key}: {exc.strerror or type(exc).__name__}"
    return None


def login_of(url: str) -> tuple[str, str]:
    """The role and the database a (checked) url logs in as, asyncpg's defaults filled in:
    ``PGUSER`` or the login name, ``PGDATABASE`` or the role's name."""
    parsed = urlparse(url)
    auth, at, _hosts = parsed.netloc.partition("@")
    query = _query(parsed.query)
    user = (
        (unquote(auth.partition(":")[0]) if at else "")
        or query.get("user")
        or os.environ.get("PGUSER")
        or getpass.getuser()
    )
    named = unquote(parsed.path.removeprefix("/")) if parsed.path else None
    if named is None:
        named = query.get("dbname") or query.get("database") or os.environ.get("PGDATABASE")
    return user, named or user
