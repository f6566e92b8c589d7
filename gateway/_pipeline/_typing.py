"""The "typing…" indicator while a turn runs: shown after a delay, stopped before the commit."""

from __future__ import annotations

import asyncio
import logging

from webhook_bot_gateway.channels import ChannelAdapter, ChannelError

log = logging.getLogger("gateway.typing")

# Telegram's chat action fades after about 5 s and must be renewed; WhatsApp's indicator lasts
# until the reply (or 25 s) and is sent with the mark-as-read of the user's message, once.
RENEWED = frozenset({"telegram"})


class Typing:
    """One turn's indicator; ``start()`` when the turn begins, ``stop()`` before it commits."""

    def __init__(
        self,
        adapter: ChannelAdapter | None,
        account: str,
        chat_id: str,
        message_id: str | None,
        thread_id: str | None = None,
        *,
        after: float,
        interval: float,
    ) -> None:
        self._adapter = adapter
        self._target = (account, chat_id, message_id, thread_id)
        self._after = after
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        self.shown = 0  # indicators sent, for tests and logs

    def start(self) -> None:
        """Begin the countdown; does nothing without an adapter."""
        if self._adapter is not None and self._task is None:
            self._task = asyncio.create_task(self._run(self._adapter), name="typing")

    def stop(self) -> None:
        """Stop at once (sync: callable from the turn's before_commit hook)."""
        if self._task is not None:
            self._task.cancel()

    async def aclose(self) -> None:
        """Stop and wait until no indicator request is in flight."""
        self.stop()
        if self._task is not None:
            await asyncio.wait({self._task})  # never raises the task's CancelledError

    async def _run(self, adapter: ChannelAdapter) -> None:
        await asyncio.sleep(self._after)
        while True:
            try:
                await adapter.send_typing(*self._target)
            except ChannelError as exc:
                log.debug("typing indicator not shown: %s", exc.reason)
                return
            self.shown += 1
            if adapter.name not in RENEWED:
                return
            await asyncio.sleep(self._interval)
