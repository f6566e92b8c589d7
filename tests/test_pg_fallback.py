"""CONTRACT.md: PostgreSQL tests read GATEWAY_TEST_POSTGRES_URL; where it is unset and no server
answers on 127.0.0.1:5432 they skip with that reason (and run against it where one answers)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests import pg


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def unset(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    monkeypatch.delenv(pg.URL_VARIABLE, raising=False)
    pg.local_server.cache_clear()
    yield monkeypatch
    pg.local_server.cache_clear()


def test_unset_and_no_server_answering_skips_saying_why(unset: pytest.MonkeyPatch) -> None:
    unset.setattr(pg, "LOCAL_URL", f"postgresql://127.0.0.1:{closed_port()}/postgres")
    with pytest.raises(pytest.skip.Exception, match="no PostgreSQL answers on 127.0.0.1:5432"):
        pg.server_url()


def test_the_variable_wins_over_the_local_server(unset: pytest.MonkeyPatch) -> None:
    unset.setenv(pg.URL_VARIABLE, "postgresql://db.example/x")
    assert pg.server_url() == "postgresql://db.example/x"


def test_unset_with_a_server_answering_uses_it(unset: pytest.MonkeyPatch) -> None:
    if not pg.local_server():
        pytest.skip("no PostgreSQL answers on 127.0.0.1:5432 here")
    assert pg.server_url() == pg.LOCAL_URL
