"""Re-reading a quarantined delivery with the current parser: ``gateway quarantine replay``
and the replay of messages quarantined while a bot's username was unknown.

A delivery the parser now accepts is recorded like a fresh one (its keys claimed, a delivery row
stored); the running server's intake picks that row up on its next poll. When its keys were
claimed before (the intake quarantined it after the ack), the parsed messages are recorded
directly instead; the inbox's unique dedup key keeps anything from being recorded twice, and the
running server's dispatcher finds them on its next poll. A delivery that still fails stays in
quarantine, untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from webhook_bot_gateway.channels import ChannelAdapter, ChannelError
from webhook_bot_gateway.store import Delivery, DeliveryIn, QuarantineItem, Store

from ._intake import AccountAgents, to_parsed

PAGE = 500


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
