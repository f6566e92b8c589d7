"""CONTRACT.md: tests never reach the internet. Installed by tests/conftest.py for the whole
test process: a name other than a loopback one does not resolve, and a socket does not connect
to an address outside loopback (or the PostgreSQL server ``GATEWAY_TEST_POSTGRES_URL`` names).
Both fail as an unreachable network does, with a message saying why. The gateways that
end-to-end tests start as subprocesses are configured with loopback addresses only."""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Any
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def _allowed_hosts() -> frozenset[str]:
    url = os.environ.get("GATEWAY_TEST_POSTGRES_URL", "")
    host = urlsplit(url).hostname if url else None
    return LOOPBACK_NAMES | ({host} if host else set())


def is_local(host: object) -> bool:
    """Loopback, unspecified (a listening socket's ``""``, ``0.0.0.0``) or allowed by name."""
    if host is None or host == "":
        return True
    text = host.decode() if isinstance(host, bytes) else str(host)
    text = text.split("%", 1)[0]  # an IPv6 scope
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return text.lower().rstrip(".") in _allowed_hosts() or text.endswith(".localhost")
    return address.is_loopback or address.is_unspecified or text in _allowed_hosts()


class InternetRefused(socket.gaierror):
    pass


def _refused(what: str) -> InternetRefused:
    return InternetRefused(socket.EAI_NONAME, f"tests never reach the internet: {what}")


def install() -> None:
    """Guard ``socket.getaddrinfo`` and ``socket.socket.connect``/``connect_ex``; idempotent."""
    if getattr(socket, "_gateway_offline", False):
        return
    resolve, connect, connect_ex = (
        socket.getaddrinfo,
        socket.socket.connect,
        socket.socket.connect_ex,
    )

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_local(host):
            raise _refused(f"resolving {host!r}")
        return resolve(host, *args, **kwargs)

    def check(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not is_local(address[0]):
            raise OSError(f"tests never reach the internet: connecting to {address[0]!r}")

    def guarded_connect(sock: socket.socket, address: Any) -> None:
        check(sock, address)
        connect(sock, address)

    def guarded_connect_ex(sock: socket.socket, address: Any) -> int:
        check(sock, address)
        return connect_ex(sock, address)

    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]
    socket.socket.connect = guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = guarded_connect_ex  # type: ignore[method-assign]
    socket._gateway_offline = True  # type: ignore[attr-defined]
