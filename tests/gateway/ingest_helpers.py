"""What the HTTP-side tests share: settings on a tmp SQLite file, signing, table counts."""

from __future__ import annotations

import json
import sqlite3
import time
import tomllib
from pathlib import Path
from typing import Any

from tests.channels import telegram_fakes as tg
from tests.channels import whatsapp_fakes as wa
from webhook_bot_gateway.gateway.config import Settings, parse_settings

ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "admin-token-for-tests"
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
NUMBER = wa.NUMBER_A
TABLES = (
    "sessions",
    "messages",
    "session_events",
    "processed_messages",
    "deliveries",
    "quarantine",
    "inbox",
    "outbox",
    "outbox_platform_ids",
)


def settings(db_path: Path, **sections: dict[str, Any]) -> Settings:
    """The example config's agents, two Telegram bots, two WhatsApp numbers, a store file."""
    raw = tomllib.loads((ROOT / "config.example.toml").read_text(encoding="utf-8"))
    raw.update(
        {
            "store": {"url": f"sqlite:///{db_path}"},
            "admin": {"token": ADMIN_TOKEN},
            "sandbox": {"enabled": False},
            "telegram": {"api_base_url": "http://127.0.0.1:9", "bots": _bots()},
            "whatsapp": {
                "graph_base_url": "http://127.0.0.1:9",
                "app_secret": wa.APP_SECRET,
                "verify_token": wa.VERIFY_TOKEN,
                "numbers": _numbers(),
            },
        }
    )
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return parse_settings(raw, {})


def _bots() -> list[dict[str, str]]:
    return [
        {"name": "support", "token": tg.TOKEN, "secret_token": tg.SECRET},
        {"name": "sales", "token": tg.OTHER_TOKEN, "secret_token": tg.OTHER_SECRET},
    ]


def _numbers() -> list[dict[str, str]]:
    return [
        {"phone_number_id": wa.NUMBER_A, "access_token": wa.TOKEN_A},
        {"phone_number_id": wa.NUMBER_B, "access_token": wa.TOKEN_B},
    ]


def wa_headers(body: bytes) -> dict[str, str]:
    """A correctly signed WhatsApp delivery's headers."""
    return {"X-Hub-Signature-256": wa.sign(body), "Content-Type": "application/json"}


def tg_headers(secret: str = tg.SECRET) -> dict[str, str]:
    return {"X-Telegram-Bot-Api-Secret-Token": secret, "Content-Type": "application/json"}


def wa_text(wamid: str, text: str = "hello", sender: str = "972987654321") -> dict[str, Any]:
    return {
        "from": sender,
        "id": wamid,
        "timestamp": str(int(time.time())),  # within WhatsApp's 24-hour window
        "type": "text",
        "text": {"body": text},
    }


def wa_delivery(messages: list[dict[str, Any]], number: str = NUMBER) -> bytes:
    """A compact WhatsApp delivery with these messages for one number."""
    value = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550000000", "phone_number_id": number},
        "contacts": [{"profile": {"name": "Test"}, "wa_id": "972987654321"}],
        "messages": messages,
    }
    change = {"field": "messages", "value": value}
    body = {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [change]}]}
    return json.dumps(body, separators=(",", ":")).encode()


def tg_update(update_id: int, text: str = "hello") -> bytes:
    chat = {"id": 123456789, "type": "private", "first_name": "Alice"}
    message = {"message_id": update_id, "date": 1735689600, "chat": chat, "text": text}
    message["from"] = {"id": 123456789, "is_bot": False, "first_name": "Alice"}
    return json.dumps({"update_id": update_id, "message": message}).encode()


def counts(db_path: Path) -> dict[str, int]:
    """Rows per table, read with the stdlib sqlite3 module (not through the store)."""
    conn = sqlite3.connect(db_path)
    try:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    finally:
        conn.close()


def rows(db_path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def grown(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The tables whose row count changed, with the change."""
    return {t: after[t] - before[t] for t in TABLES if after[t] != before[t]}
