"""What the sandbox remembers (in memory, for the life of the process): every call the gateway
made to the fake platforms, and the files the simulator handed out as platform media."""

from __future__ import annotations

import asyncio
import itertools
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

MAX_CALLS = 10_000  # the oldest calls are forgotten past this


@dataclass(frozen=True, slots=True)
class Call:
    """One request the gateway made to a fake platform."""

    id: int
    channel: str  # telegram / whatsapp
    account: str  # bot name or phone_number_id
    chat_id: str
    method: str  # sendMessage, sendChatAction, answerCallbackQuery, getFile, messages, read ...
    text: str | None
    buttons: tuple[dict[str, str], ...]
    platform_id: str | None  # the message id the fake answered with
    at: float

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "channel": self.channel,
            "account": self.account,
            "chat_id": self.chat_id,
            "method": self.method,
            "text": self.text,
            "buttons": list(self.buttons),
            "platform_id": self.platform_id,
            "at": self.at,
        }


@dataclass(frozen=True, slots=True)
class MediaFile:
    content_type: str
    data: bytes
    name: str
    account: str = ""  # the phone_number_id a simulated WhatsApp delivery handed it to


@dataclass
class SandboxState:
    calls: list[Call] = field(default_factory=list)
    media: dict[str, MediaFile] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    closing: bool = False  # shutdown: long polls answer at once
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _last_update_id: int = 0

    def record(
        self,
        channel: str,
        account: str,
        chat_id: str,
        method: str,
        *,
        text: str | None = None,
        buttons: tuple[dict[str, str], ...] = (),
        platform_id: str | None = None,
    ) -> Call:
        call = Call(
            next(self._ids),
            channel,
            account,
            chat_id,
            method,
            text,
            buttons,
            platform_id,
            time.time(),
        )
        self.calls.append(call)
        del self.calls[:-MAX_CALLS]
        self.changed.set()
        return call

    def sent(self, channel: str | None, chat_id: str | None, after: int) -> list[Call]:
        return [
            call
            for call in self.calls
            if call.id > after
            and (channel is None or call.channel == channel)
            and (chat_id is None or call.chat_id == chat_id)
        ]

    def next_update_id(self) -> int:
        """Unique across restarts too (milliseconds), since Telegram's dedup key is the id."""
        self._last_update_id = max(self._last_update_id + 1, int(time.time() * 1000) % 2**31)
        return self._last_update_id


def demo_png(seed: int = 0) -> bytes:
    """A small, valid 32x32 PNG in one colour, made here: the sandbox needs no files on disk."""
    width = height = 32
    colour = bytes([(seed * 67) % 256, (120 + seed * 31) % 256, 200])
    raw = b"".join(b"\x00" + colour * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + b"\x08\x02\x00\x00\x00"
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
