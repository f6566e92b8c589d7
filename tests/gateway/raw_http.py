"""HTTP/1.1 over a bare socket: the bytes no well-behaved client sends (an undecodable header,
a body that stops halfway, a header that trickles in), and when the server closes the socket."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # names lowercased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> dict[str, Any]:
        """The ``error`` object of a JSON refusal (fails on anything else)."""
        assert self.headers.get("content-type", "").startswith("application/json"), self
        error: dict[str, Any] = self.json()["error"]
        return error


def head(
    method: str,
    path: str,
    headers: Mapping[str, str | bytes] | None = None,
    *,
    length: int | None = None,
) -> bytes:
    """A request line and headers; a header value given as bytes is sent as it is."""
    lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: test"]
    for name, value in (headers or {}).items():
        lines.append(
            name.encode() + b": " + (value if isinstance(value, bytes) else value.encode())
        )
    if length is not None:
        lines.append(b"Content-Length: %d" % length)
    return b"\r\n".join(lines) + b"\r\n\r\n"


class Raw:
    """One client connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int, host: str = "127.0.0.1") -> Raw:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def response(self, seconds: float = 5.0) -> Answer:
        """The next response (its body by Content-Length); fails after ``seconds``."""
        async with asyncio.timeout(seconds):
            raw_head = await self.reader.readuntil(b"\r\n\r\n")
            status_line, *lines = raw_head.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return Answer(int(status_line.split()[1]), headers, body)

    async def closed_within(self, seconds: float) -> float:
        """Seconds until the server closes the connection (data before that is dropped);
        fails if it is still open after ``seconds``."""
        start = time.monotonic()
        try:
            async with asyncio.timeout(seconds):
                while await self.reader.read(65536):
                    pass
        except TimeoutError:
            raise AssertionError(
                f"the server kept the connection open over {seconds:g} s"
            ) from None
        except ConnectionResetError:
            pass
        return time.monotonic() - start

    def close(self) -> None:
        self.writer.close()
