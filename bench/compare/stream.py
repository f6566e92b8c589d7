"""One stream of realistic webhook deliveries: increasing ids, a share of them sent again.

A platform resends a delivery it thinks was lost (a timeout, a 5xx): the same bytes again,
soon after the first. The stream numbers its originals 0, 1, 2, ... in order; each duplicate
repeats one of the last ``RECENT`` originals. Every side of a comparison gets the same stream.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
from collections.abc import Iterable, Sequence

DUPLICATE_SHARE = 0.3
RECENT = 64  # a retry follows its original closely
CHATS = 1000  # users the stream's messages come from
TELEGRAM_PATH = "/webhooks/telegram/bench"
WHATSAPP_PATH = "/webhooks/whatsapp"
TELEGRAM_SECRET = "bench-telegram-secret"
WHATSAPP_SECRET = "bench-app-secret"
PHONE_NUMBER_ID = "100000000000001"
FIRST_UPDATE_ID = 700_000_000


def originals(count: int, seed: int, share: float = DUPLICATE_SHARE) -> list[int]:
    """The original each of ``count`` deliveries carries; exactly ``round(share * count)`` of
    them repeat an earlier one (never the first delivery)."""
    rng = random.Random(seed)
    repeats = set(rng.sample(range(1, count), round(share * count))) if count > 1 else set()
    stream: list[int] = []
    fresh = 0
    for position in range(count):
        if position in repeats:
            stream.append(rng.randrange(max(0, fresh - RECENT), fresh))
        else:
            stream.append(fresh)
            fresh += 1
    return stream


def duplicates(keys: Iterable[object]) -> int:
    """How many of ``keys`` repeat one seen before: what a handler got beyond one per key."""
    seen: set[object] = set()
    repeated = 0
    for key in keys:
        repeated += key in seen
        seen.add(key)
    return repeated


def text(number: int) -> str:
    """The message text; it names its original, so a handler can count what reached it."""
    return f"Hello, what is the status of my order {number}? (m{number})"


def number_of(message_text: str) -> int:
    """The original a message text names (``text``'s inverse)."""
    return int(message_text.rsplit("(m", 1)[1].rstrip(")"))


def telegram_update(number: int, first: int) -> bytes:
    """A private text message as Telegram posts it; update_id ``first + number``."""
    user = 100_000_000 + number % CHATS
    person = {"id": user, "is_bot": False, "first_name": "Alice", "language_code": "en"}
    update = {
        "update_id": FIRST_UPDATE_ID + first + number,
        "message": {
            "message_id": number + 1,
            "from": person,
            "chat": {"id": user, "first_name": "Alice", "type": "private"},
            "date": 1735689600,
            "text": text(first + number),
        },
    }
    return json.dumps(update, separators=(",", ":")).encode()


def whatsapp_delivery(number: int, first: int, timestamp: int = 1735689600) -> bytes:
    """One text message as Meta posts it (compact JSON); wamid from ``first + number``."""
    user = f"1555{number % CHATS:07d}"
    message = {
        "from": user,
        "id": f"wamid.bench{first + number:012d}",
        "timestamp": str(timestamp),
        "type": "text",
        "text": {"body": text(first + number)},
    }
    value = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550001111", "phone_number_id": PHONE_NUMBER_ID},
        "contacts": [{"profile": {"name": "Kerry"}, "wa_id": user}],
        "messages": [message],
    }
    change = {"field": "messages", "value": value}
    envelope = {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [change]}]}
    return json.dumps(envelope, separators=(",", ":")).encode()


def signature(body: bytes) -> str:
    return "sha256=" + hmac.new(WHATSAPP_SECRET.encode(), body, hashlib.sha256).hexdigest()


def raw_request(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """One HTTP/1.1 keep-alive POST, ready to write to a socket."""
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def requests(platform: str, stream: Sequence[int], first: int) -> list[bytes]:
    """The stream as raw requests; a duplicate is the very bytes of its original."""
    built: dict[int, bytes] = {}
    for number in stream:
        if number not in built:
            built[number] = _request(platform, number, first)
    return [built[number] for number in stream]


def _request(platform: str, number: int, first: int) -> bytes:
    if platform == "telegram":
        headers = {"X-Telegram-Bot-Api-Secret-Token": TELEGRAM_SECRET}
        return raw_request(TELEGRAM_PATH, telegram_update(number, first), headers)
    body = whatsapp_delivery(number, first)
    return raw_request(WHATSAPP_PATH, body, {"X-Hub-Signature-256": signature(body)})
