"""``server.event_loop`` and the listening sockets of ``gateway serve`` (gateway/_loop.py)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
import uvloop

from webhook_bot_gateway.gateway import _loop
from webhook_bot_gateway.gateway.app import serve
from webhook_bot_gateway.gateway.config import ServerConfig
from webhook_bot_gateway.gateway.errors import ConfigError

from .ingest_helpers import settings


@pytest.mark.parametrize(
    ("choice", "kind", "name"),
    [
        ("auto", uvloop.Loop, "uvloop"),
        ("uvloop", uvloop.Loop, "uvloop"),
        ("asyncio", asyncio.BaseEventLoop, "asyncio"),
    ],
)
def test_each_choice_gives_its_loop(choice: str, kind: type, name: str) -> None:
    loop = _loop.new_event_loop(choice)
    try:
        assert isinstance(loop, kind)
        assert _loop.loop_name(loop) == name
    finally:
        loop.close()


def test_without_uvloop_auto_falls_back_and_uvloop_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_loop, "uvloop_module", lambda: None)
    loop = _loop.new_event_loop("auto")
    try:
        assert _loop.loop_name(loop) == "asyncio"
    finally:
        loop.close()
    with pytest.raises(ConfigError) as caught:
        _loop.new_event_loop("uvloop")
    assert caught.value.key == "server.event_loop"


def test_an_unknown_event_loop_is_refused_by_the_config() -> None:
    with pytest.raises(ValueError, match="event_loop"):
        ServerConfig.model_validate({"event_loop": "trio"})


def test_a_taken_port_is_a_config_error_naming_server_port() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ConfigError) as caught:
            _loop.listening_sockets(ServerConfig(host="127.0.0.1", port=port))
    assert caught.value.key == "server.port"
    assert f"127.0.0.1:{port}" in str(caught.value)


def test_a_free_port_gives_bound_sockets_not_yet_listening() -> None:
    sockets = _loop.listening_sockets(ServerConfig(host="127.0.0.1", port=0))
    try:
        assert [s.getsockname()[0] for s in sockets] == ["127.0.0.1"]
        with socket.socket() as client:  # bound, not listening: a connection is refused
            assert client.connect_ex(sockets[0].getsockname()) != 0
    finally:
        for sock in sockets:
            sock.close()


def test_an_address_of_no_interface_is_a_config_error_naming_server_host() -> None:
    with pytest.raises(ConfigError) as caught:
        _loop.listening_sockets(ServerConfig(host="192.0.2.1", port=0))  # TEST-NET-1
    assert caught.value.key == "server.host"


def test_serve_that_fails_before_it_starts_lets_go_of_its_port(tmp_path: Path) -> None:
    """A tool that cannot be imported ends ``serve`` after it bound its port: the socket is
    closed then, not left to the garbage collector, and nothing is stored."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    broken = {
        "starting_agent": "a",
        "list": [{"name": "a", "model": "rules", "tools": ["nope.x.f"]}],
    }
    config = settings(tmp_path / "gw.db", server={"host": "127.0.0.1", "port": port}, agents=broken)
    with pytest.raises(ConfigError) as caught:
        serve(config)
    assert caught.value.key == "agents.list[0].tools[0]"
    with socket.socket() as again:  # the port is free while the failed call's frame lives on
        again.bind(("127.0.0.1", port))
    assert not (tmp_path / "gw.db").exists()
