"""The offline commands: each opens what it needs, does one thing and closes it."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

from webhook_bot_gateway.store import Message, Session, Store, open_store, validate_session_id

from ._accounts import gateway_registry
from ._export import export_command
from ._logging import configured_secrets
from ._media.files import erase_session
from ._purge import DAY, Purger, retention_of
from ._sandbox import sandbox_warnings
from ._summary import summarize
from .config import Settings


@asynccontextmanager
async def opened_store(settings: Settings) -> AsyncIterator[Store]:
    store = await open_store(
        settings.store.url,
        dedup_ttl_hours=settings.dedup.ttl_hours,
        pool_size=settings.store.pool_size,
    )
    try:
        yield store
    finally:
        await store.aclose()


def dump(value: object, out: TextIO) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False, default=str), file=out)


def session_json(session: Session) -> dict[str, Any]:
    return dataclasses.asdict(session)


def message_json(message: Message) -> dict[str, Any]:
    return dataclasses.asdict(message)


async def check_config(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    registry = await gateway_registry(settings)  # imports tools, checks handoffs and keys
    try:
        for line in summarize(settings):
            print(f"  {line}", file=out)
        print(f"  agents declared: {', '.join(registry.names)}", file=out)
        for warning in sandbox_warnings(settings):
            print(f"  warning: {warning}", file=out)
        handoff = settings.dispatcher.dead_letter_handoff
        if handoff and registry.get(handoff) is None:
            print(
                f"  warning: dispatcher.dead_letter_handoff {handoff!r} is not a declared agent;"
                " dead-lettered sessions will stay with their agent",
                file=out,
            )
    finally:
        await registry.aclose()
    return 0


async def purge(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    """Expired dedup rows now; with ``store.retention_days``, one retention pass too."""
    retention = retention_of(settings)
    async with opened_store(settings) as store:
        removed = await store.purge()
        purger = Purger(store, interval=DAY, keep_seconds=DAY, retention=retention)
        history = await purger.retain_once()
    print(f"purged {removed} expired processed-message row(s)", file=out)
    if history is not None:
        counts = ", ".join(f"{table} {n}" for table, n in history.counts.items())
        days = settings.store.retention_days
        print(f"retention ({days} days): {counts}, files {len(history.attachments)}", file=out)
    return 0


async def sessions(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    if args.action != "list":
        validate_session_id(args.session_id)  # before the store is opened (or created)
    async with opened_store(settings) as store:
        if args.action == "list":
            return await _list_sessions(store, args, out)
        if args.action == "show":
            return await _show_session(store, args.session_id, out)
        if args.action == "export":
            return await export_command(store, Path(settings.media.root), args, out)
        return await _delete_session(store, Path(settings.media.root), args.session_id, out)


async def _list_sessions(store: Store, args: argparse.Namespace, out: TextIO) -> int:
    filters = {"channel": args.channel, "status": args.status, "agent": args.agent}
    found = await store.list_sessions(args.limit, args.offset, **filters)
    total = await store.count_sessions(**filters)
    dump({"sessions": [session_json(s) for s in found], "total": total}, out)
    return 0


async def _show_session(store: Store, session_id: str, out: TextIO) -> int:
    session = await store.get_session(session_id)
    if session is None:
        print(f"no session {session_id!r}", file=out)
        return 1
    branch = await store.get_branch(session_id)
    dump({**session_json(session), "messages": [message_json(m) for m in branch]}, out)
    return 0


async def _delete_session(store: Store, root: Path, session_id: str, out: TextIO) -> int:
    if not await erase_session(store, root, session_id):
        print(f"no session {session_id!r}", file=out)
        return 1
    print(f"deleted session {session_id}", file=out)
    return 0


async def telegram_command(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    from webhook_bot_gateway.channels.telegram import set_webhook

    bots = {bot.name: bot for bot in settings.telegram.bots}
    if args.bot not in bots:
        known = ", ".join(sorted(bots)) or "none configured"
        raise ValueError(f"telegram.bots: no bot named {args.bot!r} (known: {known})")
    telegram = settings.telegram
    await set_webhook(
        bots[args.bot],
        args.url,
        telegram.api_base_url,
        request_timeout=telegram.request_timeout,
        redact=configured_secrets(settings),  # its error is printed: none of them may be in it
    )
    print(f"webhook of bot {args.bot} set to {args.url}", file=out)
    return 0
