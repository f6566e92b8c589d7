"""The event loop and the listening socket of ``gateway serve``, made before anything starts.

``server.event_loop``: ``auto`` (the default) runs on uvloop where it is installed (it is a
dependency everywhere but Windows) and on asyncio's own loop otherwise; ``uvloop`` requires it;
``asyncio`` never uses it. uvloop answered about 12% more messages per second with 12% less
CPU per message in bench/e2e.py (docs/benchmarks.md, "uvloop").
"""

from __future__ import annotations

import asyncio
import errno
import importlib
import socket
from types import ModuleType

from .config import ServerConfig
from .errors import ConfigError


def uvloop_module() -> ModuleType | None:
    """uvloop, or None where it is not installed."""
    try:
        return importlib.import_module("uvloop")
    except ImportError:
        return None


def new_event_loop(choice: str) -> asyncio.AbstractEventLoop:
    """A new loop of the kind ``server.event_loop`` asks for."""
    uvloop = uvloop_module() if choice != "asyncio" else None
    if uvloop is not None:
        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        return loop
    if choice == "uvloop":
        raise ConfigError("server.event_loop", '"uvloop" is not installed (pip install uvloop)')
    return asyncio.new_event_loop()


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``, for the start line."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def listening_sockets(server: ServerConfig) -> list[socket.socket]:
    """The bound sockets ``serve`` listens on (one per address ``server.host`` resolves to, as
    aiohttp would bind); a port taken or an address not allowed is a ConfigError naming
    ``server.port`` (or ``server.host``), raised before the store or a platform is touched."""
    where = f"{server.host}:{server.port}"
    try:
        infos = socket.getaddrinfo(
            server.host, server.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise ConfigError("server.host", f"cannot listen on {where}: {exc.strerror}") from None
    bound: list[socket.socket] = []
    port = server.port  # 0: the system picks one for the first address; the others take it
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            if port and family in (socket.AF_INET, socket.AF_INET6):
                address = (str(address[0]), port, *address[2:])
            bound.append(_bound(family, kind, proto, address, where))
            port = port or int(bound[-1].getsockname()[1])
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return bound


def _bound(
    family: socket.AddressFamily,
    kind: socket.SocketKind,
    proto: int,
    address: tuple[str, int] | tuple[str, int, int, int] | tuple[int, bytes],
    where: str,
) -> socket.socket:
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's servers do
        if family == socket.AF_INET6:  # so that "::" and "0.0.0.0" can both be bound
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        key = "server.host" if exc.errno == errno.EADDRNOTAVAIL else "server.port"
        raise ConfigError(key, f"cannot listen on {where}: {exc.strerror}") from None
    return sock
