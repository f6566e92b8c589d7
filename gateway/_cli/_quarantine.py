"""``gateway quarantine list / replay [ID] / delete``: show unparseable deliveries, re-read them
offline, erase them.

A replay runs the current parser. A delivery it now accepts is recorded like a fresh one (its
keys claimed, a delivery row stored); the running server's intake picks that row up on its next
poll. When its keys were claimed before (the intake quarantined it after the ack), the parsed
messages are recorded directly instead; the inbox's unique dedup key keeps anything from being
recorded twice, and the running server's dispatcher finds them on its next poll. A delivery
that still fails stays in quarantine, untouched.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import replace
from typing import TextIO

from webhook_bot_gateway.channels import ChannelAdapter, ChannelError
from webhook_bot_gateway.store import (
    Delivery,
    DeliveryIn,
    QuarantineItem,
    QuarantineNotFound,
    Store,
)

from .._accounts import account_agents
from .._admin._api_models import QuarantineList, QuarantineOut
from .._channels_ctx import open_adapters
from .._pipeline._intake import AccountAgents, to_parsed
from ..config import Settings
from ._commands import dump, opened_store

PAGE = 500


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


async def pending_quarantined(store: Store) -> list[QuarantineItem]:
    """Every row not replayed yet, oldest first (read before any is changed, so paging is
    stable)."""
    items: list[QuarantineItem] = []
    while page := await store.list_quarantine(PAGE, len(items), pending_only=True):
        items += page
    unique = {item.id: item for item in items}  # a row arriving meanwhile shifts the pages
    return sorted(unique.values(), key=lambda item: item.id)


async def replay_one(
    store: Store,
    adapters: Mapping[str, ChannelAdapter],
    item: QuarantineItem,
    starting_agent: str,
    agents: AccountAgents | None = None,
) -> str:
    """Try one row; return what happened, in words."""
    if item.replayed_at is not None:
        return f"already replayed at {item.replayed_at.isoformat()}; left as it is"
    adapter = adapters.get(item.channel)
    if adapter is None:
        return f"the {item.channel} channel is not configured; left in quarantine"
    try:
        keys = adapter.delivery_keys(item.body, item.account)
        adapter.parse(item.body, item.account)
    except ChannelError as exc:
        return f"still fails: {exc.reason}; left in quarantine"
    if not keys:
        await store.mark_replayed(item.id)
        return "parses now, but holds nothing to record (no configured account); marked replayed"
    result = (await store.ingest([DeliveryIn(item.channel, item.account, item.body, tuple(keys))]))[
        0
    ]
    if result.delivery_id is None:
        return await _record_directly(store, adapter, item, len(keys), starting_agent, agents)
    await store.mark_replayed(item.id)
    return (
        f"recorded as delivery {result.delivery_id} with {len(result.new_keys)} new key(s); "
        "marked replayed"
    )


async def _record_directly(
    store: Store,
    adapter: ChannelAdapter,
    item: QuarantineItem,
    key_count: int,
    agent: str,
    agents: AccountAgents | None,
) -> str:
    """Record the parsed events that have no inbox row yet, without claiming keys again."""
    result = adapter.parse(item.body, item.account)
    if not result.events and not result.failures:  # e.g. a group message not for the bot
        await store.mark_replayed(item.id)
        ignored = ", ".join(result.ignored)
        return f"parses now, as nothing to answer (ignored: {ignored}); marked replayed"
    keys = frozenset(event.dedup_key for event in result.events)
    whole = Delivery(0, item.channel, item.account, item.body, keys, item.received_at)
    parsed = to_parsed(whole, result, agents)
    sessions = await store.record_parsed(None, replace(parsed, failure=None), starting_agent=agent)
    if not sessions:
        return f"nothing new: all {key_count} key(s) were recorded before; left in quarantine"
    await store.mark_replayed(item.id)
    return f"recorded directly for {len(sessions)} session(s); marked replayed"
