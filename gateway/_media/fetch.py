"""Download an inbound media file to disk, going nowhere a hostile URL or redirect points to.

The URL comes from a platform API but may redirect anywhere, so every hop is checked before a
byte is sent to it: either its origin is a configured platform API (``trusted_origins``), or it
is https, its host is on the allowlist and every address the host has is a public one.

DNS rebinding: a host checked once may resolve to 10.0.0.1 when aiohttp looks it up again. So
the request is not sent to the host name: it goes to the checked IP itself (the URL's host
swapped for the address), with the ``Host`` header and the TLS ``server_hostname`` set to the
real name, so the certificate is still verified against it. aiohttp never resolves an IP
literal, and it keys pooled connections by ``server_hostname`` too. This works with any
``ClientSession`` the caller owns, where a custom resolver would need a connector of our own.

The URL may hold a secret (Telegram puts the bot token in its path): no message or log record
names more than the host, and aiohttp exceptions are not chained, since theirs may quote it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import aiohttp
from yarl import URL

from webhook_bot_gateway.channels import MediaSource
from webhook_bot_gateway.store import open_private

log = logging.getLogger("gateway.media")

Resolver = Callable[[str], Awaitable[list[str]]]
CHUNK = 64 * 1024
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    """Where a download may go and how much it may take.

    ``allowed_hosts``: ``"graph.facebook.com"`` matches exactly, ``".fbsbx.com"`` that domain and
    every subdomain. ``trusted_origins`` (``scheme://host[:port]``, the configured platform APIs)
    skip the https, allowlist and public-address rules. ``timeout`` covers the whole download,
    redirects included.
    """

    allowed_hosts: tuple[str, ...]
    trusted_origins: frozenset[str]
    max_bytes: int
    timeout: float
    max_redirects: int = 3


@dataclass(frozen=True, slots=True)
class FetchResult:
    size: int
    content_type: str | None


class MediaRefused(Exception):
    """The download was refused or failed; ``code`` says why, the message names at most a host.

    Codes: not_https, host_not_allowed, private_address, bad_url, too_large, too_many_redirects,
    http_status, timeout, network. ``received`` is how many body bytes were read before it.
    """

    def __init__(self, code: str, message: str, *, received: int = 0) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.received = received


async def system_resolver(host: str) -> list[str]:
    """Every address the system resolver gives for ``host``."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def is_public_address(address: str) -> bool:
    """True only for a globally routable unicast address (IPv4 inside IPv6 judged as IPv4)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64:  # reserved as a whole; what matters is the IPv4 address it stands for
            return is_public_address(str(ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF)))
        inner = ip.ipv4_mapped or ip.sixtofour
        if inner is not None and not is_public_address(str(inner)):
            return False
    special = ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast
    special = special or ip.is_reserved or ip.is_unspecified or ip in _CGNAT
    return ip.is_global and not special


def host_allowed(host: str, allowed_hosts: tuple[str, ...]) -> bool:
    """``host`` equals an entry, or is (a subdomain of) an entry written with a leading dot."""
    host = host.lower().rstrip(".")
    for entry in allowed_hosts:
        entry = entry.lower().rstrip(".")
        if entry.startswith("."):
            if host == entry[1:] or host.endswith(entry):
                return True
        elif host == entry:
            return True
    return False


async def fetch_to_file(
    session: aiohttp.ClientSession,
    source: MediaSource,
    dest: Path,
    policy: FetchPolicy,
    *,
    resolver: Resolver = system_resolver,
) -> FetchResult:
    """Stream ``source`` into ``dest`` (complete or absent), following the policy's rules.

    Raises:
        MediaRefused: a rule refused a hop, or the download failed; nothing is left on disk.
        OSError: ``dest``'s folder cannot be written.
    """
    first = _parse(source.url)
    if source.size is not None and source.size > policy.max_bytes:
        raise MediaRefused("too_large", f"announced {source.size} bytes > {policy.max_bytes}")
    part = dest.with_name(f".{dest.name}.{secrets.token_hex(6)}.part")
    fetch = _Fetch(session, source, first, policy, resolver, part)
    try:
        try:
            async with asyncio.timeout(policy.timeout):
                result = await fetch.run()
        except TimeoutError:
            reason = f"no complete answer from {fetch.host} within {policy.timeout:g}s"
            raise MediaRefused("timeout", reason, received=fetch.received) from None
        except aiohttp.ClientError as exc:
            reason = f"{type(exc).__name__} talking to {fetch.host}"
            raise MediaRefused("network", reason, received=fetch.received) from None
        # Synchronous on purpose, like the unlink: quick metadata calls, and a cancellation
        # cannot land between a rename done in a thread and the caller hearing of it.
        os.replace(part, dest)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return result


@dataclass(frozen=True, slots=True)
class _Hop:
    url: URL  # as named by the platform or a Location: origins and redirects are judged on it
    targets: tuple[URL, ...]  # where to connect: the URL itself, or it on each checked address
    headers: Mapping[str, str]
    server_hostname: str | None


class _Fetch:
    """One download's state: the hop in flight (for messages) and the bytes read so far."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        source: MediaSource,
        first: URL,
        policy: FetchPolicy,
        resolver: Resolver,
        part: Path,
    ) -> None:
        self._session, self._source, self._first = session, source, first
        self._policy, self._resolver, self._part = policy, resolver, part
        self._trusted = frozenset(_origin(_parse(o)) for o in policy.trusted_origins)
        self.host = first.raw_host or "?"
        self.received = 0

    async def run(self) -> FetchResult:
        url = self._first
        for _ in range(self._policy.max_redirects + 1):
            self.host = url.raw_host or "?"
            hop = await self._plan(url)
            response = await self._open(hop)
            try:
                location = response.headers.get("Location")
                if response.status not in REDIRECT_STATUSES or location is None:
                    return await self._finish(response)
            finally:
                response.release()
            log.debug("media fetch: %s redirects (%s)", self.host, response.status)
            url = _follow(url, location)
        limit = self._policy.max_redirects
        raise MediaRefused("too_many_redirects", f"more than {limit} redirects")

    async def _plan(self, url: URL) -> _Hop:
        """Check one hop before anything is sent to it; say where to connect and what to send."""
        origin = _origin(url)
        headers = dict(self._source.headers) if origin == _origin(self._first) else {}
        if origin in self._trusted:
            return _Hop(url, (url,), headers, None)
        host = (url.raw_host or "").rstrip(".")
        if url.scheme != "https":
            raise MediaRefused("not_https", f"{url.scheme or 'no'} scheme for {host}")
        if not host_allowed(host, self._policy.allowed_hosts):
            raise MediaRefused("host_not_allowed", f"{host} is not on the allowlist")
        addresses = await self._addresses(host)
        if not all(is_public_address(a) for a in addresses):
            raise MediaRefused("private_address", f"{host} has a non-public address")
        headers["Host"] = url.host_port_subcomponent or host
        targets = tuple(url.with_host(a.split("%", 1)[0]) for a in addresses)
        return _Hop(url, targets, headers, host)

    async def _addresses(self, host: str) -> list[str]:
        if _is_ip(host):
            return [host]
        try:
            addresses = await self._resolver(host)
        except OSError:
            addresses = []
        if not addresses:
            raise MediaRefused("network", f"cannot resolve {host}")
        return addresses

    async def _open(self, hop: _Hop) -> aiohttp.ClientResponse:
        """Send the GET to the first target that accepts a connection."""
        timeout = aiohttp.ClientTimeout(total=self._policy.timeout)
        for target in hop.targets:
            try:
                return await self._session.get(
                    target,
                    headers=hop.headers,
                    allow_redirects=False,
                    server_hostname=hop.server_hostname,
                    timeout=timeout,
                )
            except aiohttp.ClientConnectorError:
                log.debug("media fetch: cannot connect to an address of %s", self.host)
        raise MediaRefused("network", f"cannot connect to {self.host}")

    async def _finish(self, response: aiohttp.ClientResponse) -> FetchResult:
        if not 200 <= response.status < 300:
            raise MediaRefused("http_status", f"{self.host} answered HTTP {response.status}")
        length = response.content_length
        if length is not None and length > self._policy.max_bytes:
            reason = f"{self.host} announced {length} bytes > {self._policy.max_bytes}"
            raise MediaRefused("too_large", reason)
        size = await self._stream(response)
        log.debug("media fetch: %d bytes from %s", size, self.host)
        return FetchResult(size, _content_type(response, self._source.content_type))

    async def _stream(self, response: aiohttp.ClientResponse) -> int:
        """Copy the body to the part file, never reading more than max_bytes + 1."""
        limit = self._policy.max_bytes
        file = await asyncio.to_thread(_open_new, self._part)
        try:
            while chunk := await response.content.read(min(CHUNK, limit + 1 - self.received)):
                self.received += len(chunk)
                if self.received > limit:
                    raise MediaRefused(
                        "too_large", f"body passed {limit} bytes", received=self.received
                    )
                await asyncio.to_thread(file.write, chunk)
            await asyncio.to_thread(_sync, file)
        finally:
            file.close()
        return self.received


def _parse(url: str) -> URL:
    try:
        parsed = URL(url)
    except (ValueError, TypeError):
        raise MediaRefused("bad_url", "a URL that cannot be parsed") from None
    if not parsed.absolute or not parsed.raw_host:
        raise MediaRefused("bad_url", "a URL without a host")
    return parsed


def _follow(current: URL, location: str) -> URL:
    try:
        target = current.join(URL(location))
    except (ValueError, TypeError):
        raise MediaRefused("bad_url", f"{current.raw_host} redirects to a bad URL") from None
    if not target.raw_host:
        raise MediaRefused("bad_url", f"{current.raw_host} redirects to a URL without a host")
    return target


def _origin(url: URL) -> str:
    """``scheme://host[:port]``: lower case (yarl's doing), no user info, no default port."""
    host = (url.raw_host or "").rstrip(".")
    if ":" in host:
        host = f"[{host}]"
    port = url.explicit_port
    if port is None or port == {"http": 80, "https": 443}.get(url.scheme):
        return f"{url.scheme}://{host}"
    return f"{url.scheme}://{host}:{port}"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _content_type(response: aiohttp.ClientResponse, announced: str | None) -> str | None:
    # A file server's generic answer says less than what the platform API announced, or than
    # the type the message itself named (None keeps that one: Telegram's getFile names none,
    # and its file server answers application/octet-stream for a PDF document).
    header = response.headers.get("Content-Type")
    served = header.split(";", 1)[0].strip().lower() if header else None
    if served and served != "application/octet-stream":
        return served
    return announced


def _open_new(path: Path) -> BinaryIO:
    return open_private(path)  # mode 0600: a user's file (docs/security.md)


def _sync(file: BinaryIO) -> None:
    file.flush()
    os.fsync(file.fileno())
