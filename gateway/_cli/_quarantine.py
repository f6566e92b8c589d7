"""``gateway quarantine list / replay [ID] / delete``: show unparseable deliveries, re-read them
offline, erase them. A replay runs the current parser (``_pipeline/_replay.py`` says what it
records, and what it leaves in quarantine).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TextIO

from webhook_bot_gateway.channels import ChannelAdapter
from webhook_bot_gateway.store import QuarantineNotFound, Store

from .._accounts import account_agents
from .._admin._api_models import QuarantineList, QuarantineOut
from .._channels_ctx import open_adapters
from .._pipeline._intake import AccountAgents
from .._pipeline._replay import pending_quarantined, replay_one
from ..config import Settings
from ._commands import dump, opened_store


async def command(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    """The CLI entry: ``list``, ``delete`` or ``replay``."""
    if args.action == "delete":
        check_delete_args(args)  # before the store is opened (or created)
    async with opened_store(settings) as store:
        if args.action == "list":
            items = await store.list_quarantine(args.limit, args.offset, pending_only=args.pending)
            dump(QuarantineList(quarantine=[QuarantineOut.of(item) for item in items]), out)
            return 0
        if args.action == "delete":
            return await delete(store, args, out)
        async with open_adapters(settings) as adapters:
            agents = account_agents(settings)
            starting = settings.agents.starting_agent
            return await replay(store, adapters, args.id, out, starting, agents)


def check_delete_args(args: argparse.Namespace) -> None:
    """ValueError (``error: ...``, exit 1) for a ``--chat`` without its channel or id."""
    if args.chat is None:
        if args.channel is not None:
            raise ValueError("--channel goes with --chat CHAT_ID")
        return
    if args.channel is None:
        raise ValueError("--chat needs --channel (telegram, whatsapp or web)")
    if not args.chat:
        raise ValueError("--chat must not be empty")


async def delete(store: Store, args: argparse.Namespace, out: TextIO) -> int:
    """Erase row ``args.id`` (QuarantineNotFound if there is none), or the rows naming
    ``args.chat``; say what went."""
    if args.chat is None:
        if not await store.delete_quarantine(args.id):
            raise QuarantineNotFound(args.id)  # `error: no quarantined delivery N`, on stderr
        print(f"deleted quarantined delivery {args.id}", file=out)
        return 0
    count = await store.delete_chat_quarantine(args.channel, args.chat)
    noun = "delivery" if count == 1 else "deliveries"
    print(f"deleted {count} quarantined {noun} naming {args.channel} chat {args.chat}", file=out)
    return 0


async def replay(
    store: Store,
    adapters: Mapping[str, ChannelAdapter],
    only: int | None,
    out: TextIO,
    starting_agent: str,
    agents: AccountAgents | None = None,
) -> int:
    """Replay row ``only``, or every row not replayed yet (oldest first); print each outcome.
    QuarantineNotFound when there is no row ``only``."""
    if only is not None:
        item = await store.get_quarantine(only)
        if item is None:
            raise QuarantineNotFound(only)  # `error: no quarantined delivery N`, on stderr
        items = [item]
    else:
        items = await pending_quarantined(store)
    for item in items:
        outcome = await replay_one(store, adapters, item, starting_agent, agents)
        print(f"quarantine {item.id} ({item.channel}): {outcome}", file=out)
    if not items:
        print("nothing to replay", file=out)
    return 0
