"""PostgreSQL store urls: their form is checked before any connection (``check_url``, which the
config's ``store.url`` and migrate-store's options go through), accepting every form asyncpg
connects with; a server's refusal of the login is said in words. No message holds the url or
its password."""

from __future__ import annotations

import asyncio
import traceback
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from asyncpg import connect_utils

from tests.pg import fresh_schema, server_url
from webhook_bot_gateway.store import StoreError, check_url, open_store
from webhook_bot_gateway.store.postgres._db import _refused
from webhook_bot_gateway.store.postgres._url import login_of

PASSWORD = "s3cret-pw"

VALID = [
    "postgresql://gw@db:5432/gw",
    "postgres://gw@db/gw",  # the alias; no port: 5432
    f"postgresql://gw:{PASSWORD}@db.internal:6432/gw?sslmode=require",
    "postgresql://gw@h1,h2:5433,[::1]:5434/gw",  # several hosts, each its own port or none
    "postgresql://gw@[2001:db8::1]/gw",
    "postgresql:///gw?host=/var/run/postgresql",  # a unix socket's folder
    "postgresql://gw@%2Fvar%2Frun%2Fpostgresql/gw",  # the same, in the host part
    "postgresql:///gw?host=db1,db2&port=5432,5433&user=gw",
    "postgresql://gw@db",  # no database: the role's name
    "postgresql://gw@db/",
    "postgresql://",  # every part from asyncpg's defaults (PGHOST, PGUSER, ...)
    f"postgresql://gw:p%40ss%3A%2F{PASSWORD}@db/gw",  # a password with @ : / encoded
    "postgresql://gw@db/gw?sslmode=allow&target_session_attrs=read-write",
    "postgresql://gw@db/gw?search_path=gateway&application_name=gw",  # server settings
    "postgresql://gw@db:/gw",  # an empty port: the default
]

# (url, what the message says): the part at fault, never the url's text.
INVALID = [
    ("postgresql://root@127.0.0.1:99999/x", "host has a port that is not a number from 1"),
    ("postgresql://root@127.0.0.1:0/x", "host has a port that is not a number from 1"),
    (f"postgresql://root:{PASSWORD}@db:notaport/x", "host has a port that is not a number"),
    ("postgresql://root@[::1/x", "has a '[' or ']' without its pair"),
    ("postgresql://root@[::1]x/x", "malformed IPv6 address"),
    ("postgresql://root@[::1]:54x/x", "host has a port that is not a number"),
    (f"postgresql://root:p@{PASSWORD}@db/x", "more than one '@'"),
    (f"postgresql://root:p#{PASSWORD}@db/x", "has a '#'"),
    (f"postgresql://root:p/{PASSWORD}@db/x", "host has a port that is not a number"),
    (f"postgresql://root:p?{PASSWORD}@db/x", "host has a port that is not a number"),
    ("postgresql://root@db/x?sslmode", "query must be key=value pairs"),
    ("postgresql://root@h1,,h2/x", "host list has an empty entry"),
    ("postgresql://root@:5432/x", "host has a port but no name"),
    ("postgresql://root@db/x?sslmode=requir", "sslmode must be one of: disable, allow"),
    ("postgresql://root@db/x?gsslib=kerberos", "gsslib must be one of: gssapi, sspi"),
    ("postgresql://root@db/x?target_session_attrs=master", "target_session_attrs must be"),
    ("postgresql://root@db/x?sslnegotiation=tls", "sslnegotiation must be one of"),
    ("postgresql://root@db/x?port=70000", "query's port has a port that is not a number"),
    ("postgresql:///x?host=h1,,h2", "query's host list has an empty entry"),
]


def asyncpg_reads(url: str) -> None:
    """asyncpg's own reading of a url, with no connection (raises what it refuses)."""
    params: dict[str, Any] = dict.fromkeys(
        [
            "host",
            "port",
            "user",
            "password",
            "passfile",
            "database",
            "ssl",
            "service",
            "servicefile",
            "direct_tls",
            "server_settings",
            "target_session_attrs",
            "krbsrvname",
            "gsslib",
        ]
    )
    connect_utils._parse_connect_dsn_and_args(dsn=url, **params)


@pytest.mark.parametrize("url", VALID)
def test_every_form_asyncpg_reads_is_accepted(url: str) -> None:
    asyncpg_reads(url)  # the premise: asyncpg takes it
    assert check_url(url) == url


@pytest.mark.parametrize(("url", "problem"), INVALID)
def test_a_malformed_url_is_refused_naming_the_part_and_not_the_password(
    url: str, problem: str
) -> None:
    """Before, check_url took any postgresql:// url: ``check-config`` said OK, then the
    commands failed with OverflowError, "invalid literal for int()" or "Invalid IPv6 URL"."""
    with pytest.raises(ValueError) as caught:
        check_url(url)
    message = str(caught.value)
    assert problem in message
    assert message.startswith("the PostgreSQL url")
    assert PASSWORD not in message
    assert "db:" not in message  # no piece of the url
    assert "127.0.0.1" not in message


def with_login(user: str, password: str, database: str) -> str:
    """The test server's url with another role, password and database."""
    parts = urlsplit(server_url())
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"{user}:{password}@{host}", f"/{database}", "", ""))


def shown(exc: BaseException) -> str:
    """What a log of the error would show: its text, repr and traceback (with the chain)."""
    return "\n".join([str(exc), repr(exc), *traceback.format_exception(exc)])


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
async def test_a_missing_database_is_named_in_words(scheme: str) -> None:
    """Before: "PostgreSQL refused the connection: 3D000 InvalidCatalogNameError"."""
    user = login_of(server_url())[0]
    name = f"no_such_db_{uuid.uuid4().hex[:8]}"
    url = with_login(user, PASSWORD, name).replace("postgresql", scheme, 1)
    with pytest.raises(StoreError) as caught:
        await open_store(check_url(url))
    assert str(caught.value) == (
        f"database '{name}' does not exist on the PostgreSQL server (3D000 InvalidCatalogNameError)"
    )
    assert PASSWORD not in shown(caught.value)
    assert url not in shown(caught.value)


async def test_a_refused_login_names_the_role() -> None:
    """A role the server does not know: refused as "no such role" (trust) or as a wrong
    password (md5, scram), either way in words naming the role."""
    role = f"no_such_role_{uuid.uuid4().hex[:8]}"
    url = with_login(role, PASSWORD, "postgres")
    with pytest.raises(StoreError) as caught:
        await open_store(url)
    assert str(caught.value).startswith(
        f"the PostgreSQL server refused the login for role '{role}': "
    )
    assert PASSWORD not in shown(caught.value)


async def test_settings_asyncpg_cannot_use_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sslmode=verify-full needs a root certificate: asyncpg's refusal, without its HINT line.
    Before, it was "the PostgreSQL database did not answer (ClientConfigurationError)"."""
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.postgresql/root.crt
    monkeypatch.delenv("PGSSLROOTCERT", raising=False)
    url = f"{with_login(login_of(server_url())[0], PASSWORD, 'postgres')}?sslmode=verify-full"
    with pytest.raises(StoreError) as caught:
        await open_store(check_url(url))
    assert str(caught.value).splitlines() == [
        "asyncpg cannot use the PostgreSQL url's settings: root certificate file"
        f' "{tmp_path}/.postgresql/root.crt" does not exist or cannot be accessed'
    ]


@pytest.mark.parametrize("key", ["sslrootcert", "sslcert", "sslkey"])
async def test_a_certificate_file_that_cannot_be_read_is_named_by_its_key(
    tmp_path: Path, key: str
) -> None:
    """Before: "the PostgreSQL database did not answer (FileNotFoundError)", as for a server
    that is down; asyncpg raises the same bare error for both."""
    missing = tmp_path / "certs" / "missing.pem"
    base = with_login(login_of(server_url())[0], PASSWORD, "postgres")
    mode = "verify-full" if key == "sslrootcert" else "require"  # no root certificate asked
    url = f"{base}?sslmode={mode}&{key}={missing}"
    with pytest.raises(StoreError) as caught:
        await open_store(check_url(url))
    assert str(caught.value) == (
        f"the PostgreSQL url names a file that cannot be read: {key}: No such file or directory"
    )
    assert PASSWORD not in shown(caught.value)


def test_a_wrong_password_is_said_so() -> None:
    """The test server trusts every local login, so it cannot refuse a password: the server's
    error (28P01) as asyncpg raises it, read as the store reads it."""
    exc = asyncpg.InvalidPasswordError('password authentication failed for user "gw"')
    error = _refused(exc, f"postgresql://gw:{PASSWORD}@db/gw")
    assert str(error) == (
        "the PostgreSQL server refused the login for role 'gw': wrong or no password"
        " (28P01 InvalidPasswordError)"
    )


async def _refuse_the_origin_setting(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """PgBouncer's answer to a startup packet with a setting it does not pass on."""
    while True:
        length = int.from_bytes(await reader.readexactly(4), "big")
        body = await reader.readexactly(length - 4)
        if body[:4] != SSL_REQUEST:
            break
        writer.write(b"N")  # no TLS here; the startup packet follows in the clear
    fields = b"SFATAL\0VFATAL\0C08P01\0Munsupported startup parameter: gateway.origin\0\0"
    writer.write(b"E" + (len(fields) + 4).to_bytes(4, "big") + fields)
    await writer.drain()
    writer.close()


SSL_REQUEST = (80877103).to_bytes(4, "big")


async def test_a_pooler_refusing_the_origin_setting_is_named() -> None:
    """PgBouncer (any pool mode) refuses the ``gateway.origin`` startup setting every pooled
    connection carries. Before: "the PostgreSQL database did not answer
    (ProtocolViolationError)", although it had answered, with the reason."""
    server = await asyncio.start_server(_refuse_the_origin_setting, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"postgresql://gw:{PASSWORD}@127.0.0.1:{port}/gw"
    try:
        with pytest.raises(StoreError) as caught:
            await open_store(check_url(url))
    finally:
        server.close()
        await server.wait_closed()
    assert str(caught.value) == (
        "the server refused the gateway.origin startup setting (08P01"
        " ProtocolViolationError): a connection pooler such as PgBouncer is in front of"
        " PostgreSQL; the url must reach PostgreSQL itself (docs/deployment.md#pool-sizes)"
    )
    assert PASSWORD not in shown(caught.value)


async def test_a_read_only_server_that_must_make_the_store_is_a_store_error() -> None:
    """``gateway serve`` on a standby: the migrations at open raised asyncpg's own error."""
    async with fresh_schema() as url:
        with pytest.raises(StoreError, match=r"it is read-only: .* \(25006 "):
            await open_store(f"{url}&default_transaction_read_only=on")
