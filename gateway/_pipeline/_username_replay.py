"""Telegram deliveries quarantined while a bot's username was unknown, replayed once it is.

Before a bot's ``getMe`` has answered, a group message that mentions someone, or a command
with a bot's name, cannot be told to be the bot's or not: the parser refuses it with
``USERNAME_UNKNOWN`` and the intake quarantines it (acknowledged, kept whole) instead of
dropping it. Once every bot is known, this replays those rows through the current parser as
``gateway quarantine replay`` would (and again each time the intake keeps one more for that
reason): what is for the bot is recorded and answered, the rest is marked replayed. Another
process may replay the same rows: the inbox's unique dedup key records each message once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

from webhook_bot_gateway.channels import ChannelAdapter, TelegramAdapter
from webhook_bot_gateway.channels.telegram import USERNAME_UNKNOWN
from webhook_bot_gateway.store import QuarantineItem, Store, StoreError

from ._intake import AccountAgents
from ._replay import pending_quarantined, replay_one

log = logging.getLogger("gateway.quarantine")


class UsernameReplay:
    """Replays the rows that waited for the bots' usernames once all are known, and again
    whenever the intake quarantines one more for that reason (a delivery parsed just before
    the last ``getMe`` answered)."""

    def __init__(
        self,
        store: Store,
        adapters: Mapping[str, ChannelAdapter],
        starting_agent: str,
        agents: AccountAgents,
    ) -> None:
        self._store, self._adapters = store, adapters
        self._starting_agent, self._agents = starting_agent, agents
        self._more = asyncio.Event()

    def quarantined(self, channel: str, reason: str) -> None:
        """The intake's listener: a delivery went to quarantine for ``reason``."""
        if channel == "telegram" and USERNAME_UNKNOWN in reason:
            self._more.set()

    @asynccontextmanager
    async def running(self, recorded: Callable[[], object]) -> AsyncIterator[None]:
        """While entered, replay as the class says; ``recorded()`` (a dispatcher poll) after
        each pass that replayed something."""
        telegram = self._adapters.get("telegram")
        if not isinstance(telegram, TelegramAdapter):
            yield
            return
        task = asyncio.create_task(self._passes(telegram, recorded), name="username-replay")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _passes(self, telegram: TelegramAdapter, recorded: Callable[[], object]) -> None:
        await telegram.identified()
        while True:
            self._more.clear()  # before the pass: a row quarantined during it calls another
            if await replay_waiting(
                self._store, self._adapters, self._starting_agent, self._agents
            ):
                recorded()
            await self._more.wait()


async def replay_waiting(
    store: Store,
    adapters: Mapping[str, ChannelAdapter],
    starting_agent: str,
    agents: AccountAgents,
) -> int:
    """Replay the rows quarantined for an unknown username; how many there were."""
    try:
        waiting = [item for item in await pending_quarantined(store) if _waits(item)]
        for item in waiting:
            outcome = await replay_one(store, adapters, item, starting_agent, agents)
            log.info("quarantined delivery %d, kept until the bot was known: %s", item.id, outcome)
    except StoreError as exc:  # the rows stay; `gateway quarantine replay` takes them later
        log.warning("replaying the deliveries kept until the bot was known failed: %s", exc)
        return 0
    return len(waiting)


def _waits(item: QuarantineItem) -> bool:
    return item.channel == "telegram" and USERNAME_UNKNOWN in item.reason
