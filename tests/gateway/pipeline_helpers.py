"""Shared pieces of the pipeline tests: inbound events, a typing recorder, a fake clock."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from webhook_bot_gateway.agents import Agent, ModelBackend, Registry, Tool
from webhook_bot_gateway.channels import InboundMessage, OutboundMessage, SendResult
from webhook_bot_gateway.store import InboxIn, ParsedDelivery, Store

# Messages are stamped at the start of the run: WhatsApp's 24-hour window is open for them.
T0 = datetime.now(UTC).replace(microsecond=0)


class FakeClock:
    """Wall-clock seconds that only move when a test moves them."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def inbound(
    text: str,
    *,
    n: int,
    chat_id: str = "42",
    channel: str = "telegram",
    account: str = "support",
    **fields: Any,
) -> InboxIn:
    """An inbox row for a text message numbered ``n`` (its dedup key and platform id)."""
    event = InboundMessage(
        channel=channel,
        account=account,
        chat_id=chat_id,
        sender_id=chat_id,
        message_id=f"m{n}",
        dedup_key=f"{channel}:{account}:{chat_id}:{n}",
        timestamp=T0,
        kind=fields.pop("kind", "text"),
        text=text,
        **fields,
    )
    return InboxIn(channel, account, chat_id, event.dedup_key, event.model_dump(mode="json"))


async def add_inbox(store: Store, *items: InboxIn) -> list[str]:
    """Store inbox rows as the intake would; returns the sessions that got rows."""
    return await store.record_parsed(None, ParsedDelivery(inbox=items), starting_agent="triage")


def registry(triage: ModelBackend, *, human: bool = True, tools: Sequence[Tool] = ()) -> Registry:
    """``triage`` answering with ``triage``'s script (and ``tools``); ``human`` the handoff
    target."""
    handoffs = ["human"] if human else []
    agents = [Agent("triage", "You route.", tools, handoffs=handoffs, model=triage)]
    if human:
        agents.append(Agent("human", kind="human", handoff_reply="A person will answer."))
    return Registry(agents, "triage")


def rows(path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Read the database with the stdlib module, bypassing the store."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


@dataclass
class RecordingAdapter:
    """A channel whose sends and typing indicators are recorded; ``gate`` can hold typing."""

    name: str = "telegram"
    typing: list[tuple[str, str, str | None]] = field(default_factory=list)
    threads: list[str | None] = field(default_factory=list)
    sent: list[OutboundMessage] = field(default_factory=list)
    typed: asyncio.Event = field(default_factory=asyncio.Event)
    db: Path | None = None  # when set, each indicator checks whether a reply is stored yet
    after_reply: int = 0

    async def send_typing(
        self,
        account: str,
        chat_id: str,
        message_id: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        self.typing.append((account, chat_id, message_id))
        self.threads.append(thread_id)
        self.typed.set()
        if self.db is not None and rows(self.db, "SELECT count(*) FROM outbox") != [(0,)]:
            self.after_reply += 1

    async def send(self, message: OutboundMessage) -> SendResult:
        self.sent.append(message)
        return SendResult(message_ids=(f"out{len(self.sent)}",))
