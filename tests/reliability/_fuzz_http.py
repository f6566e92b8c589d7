"""One fuzz request (a ``Probe``) and how it is sent: through the test's aiohttp session, or, when
a header holds bytes that are not UTF-8 (which aiohttp's client cannot send), over a raw socket.

Both ways send the target exactly as given (already percent-encoded) and return the status and
the body of the answer.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from yarl import URL

RAW_READ_LIMIT = 1 << 20  # an error answer is a few hundred bytes; more is a failure anyway


@dataclass(frozen=True)
class Expect:
    """What a probe must get: a status and the error code its body names ("" for any body)."""

    status: int
    code: str = ""


@dataclass(frozen=True)
class Probe:
    """One request: route and mutation names (for the tallies), what is sent, what must come."""

    route: str
    kind: str
    method: str
    target: str  # path and query, percent-encoded as sent
    headers: tuple[tuple[str, bytes], ...]
    body: bytes
    expect: Expect
    secret_marker: str = ""  # text the answer must not contain (the handshake's challenge)
    mutated: bool = True

    @property
    def raw_only(self) -> bool:
        """Whether a header value is not UTF-8, so only a raw socket can send it."""
        try:
            for _, value in self.headers:
                value.decode("utf-8")
        except UnicodeDecodeError:
            return True
        return False


@dataclass
class Answer:
    """What came back."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


async def send(http: aiohttp.ClientSession, base_url: str, probe: Probe) -> Answer:
    """Send ``probe`` to the server at ``base_url`` (``http://127.0.0.1:PORT``)."""
    if probe.raw_only:
        return await send_raw(URL(base_url), probe)
    headers = [(name, value.decode("utf-8")) for name, value in probe.headers]
    url = URL(base_url + probe.target, encoded=True)
    async with http.request(
        probe.method,
        url,
        headers=headers,
        data=probe.body or None,
        skip_auto_headers=("Content-Type",),
        allow_redirects=False,
    ) as response:
        return Answer(response.status, await response.read(), dict(response.headers))


async def send_raw(base: URL, probe: Probe, seconds: float = 10.0) -> Answer:
    """One HTTP/1.1 request on its own connection, its bytes written as they are."""
    assert base.host is not None
    assert base.port is not None
    head = [f"{probe.method} {probe.target} HTTP/1.1".encode(), f"Host: {base.host}".encode()]
    head += [name.encode() + b": " + value for name, value in probe.headers]
    head += [f"Content-Length: {len(probe.body)}".encode(), b"Connection: close"]
    async with asyncio.timeout(seconds):
        reader, writer = await asyncio.open_connection(base.host, base.port)
        try:
            writer.write(b"\r\n".join(head) + b"\r\n\r\n" + probe.body)
            await writer.drain()
            data = await reader.read(RAW_READ_LIMIT)
            while chunk := await reader.read(RAW_READ_LIMIT):
                data += chunk
        finally:
            writer.close()
    return parse_response(data)


def parse_response(data: bytes) -> Answer:
    """Status, headers and body of an HTTP/1.1 answer with a Content-Length (or to EOF)."""
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length")
    return Answer(int(status_line.split()[1]), body[: int(length)] if length else body, headers)
