"""One turn of a session: its inbox rows to the runner, and how it ended (committed, refused,
taken over, failed) for the lane that ran it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial

from webhook_bot_gateway.agents import Runner
from webhook_bot_gateway.channels import ChannelAdapter
from webhook_bot_gateway.store import (
    InboxItem,
    InboxNotFound,
    InboxNotPending,
    RunActive,
    Session,
    SessionDeletedError,
    SessionNotFound,
    Store,
    StoreError,
    TurnActive,
    TurnTakenOver,
)

from .. import _convert as convert
from .. import _log_context as log_context
from .._media.wait import MediaWait
from .._metrics import STORE_ERRORS, TURN_SECONDS, Metrics
from .._templates import TEMPLATE_TOOL
from .._window import free_text_refusal
from ..config import DispatcherConfig
from ._cancels import Cancels
from ._dead_letter import DeadLetterRoute
from ._turn_commit import before_commit, queue_answers
from ._turn_failures import OWN_ERRORS, TurnFailures, failure_text
from ._turn_log import Refusals, ended, log_turn_end, say_taken_over
from ._typing import Typing

log = logging.getLogger("gateway.dispatcher")

BUSY_RETRY_SECONDS = 0.5  # a session whose turn runs elsewhere is tried again this soon


class TurnRunner:
    """Runs the turns of the lanes, one batch of inbox rows each, in one of its ``slots``."""

    def __init__(
        self,
        store: Store,
        runner: Runner,
        config: DispatcherConfig,
        *,
        metrics: Metrics,
        cancels: Cancels,
        media: MediaWait,
        adapters: Mapping[str, ChannelAdapter],
        on_outbox: Callable[[], None],
        dead_letters: DeadLetterRoute,
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._runner = runner
        self._config = config
        self._metrics = metrics
        self._cancels = cancels
        self._media = media
        self._adapters = adapters
        self._on_outbox = on_outbox
        self._clock = clock
        self._failures = TurnFailures(
            store,
            config,
            metrics=metrics,
            dead_letters=dead_letters,
            reply_guard=self._window_guard,
            on_outbox=on_outbox,
            clock=clock,
        )
        self.slots = asyncio.Semaphore(config.max_concurrent_turns)  # shared by every lane
        self.refusals = Refusals(clock)
        self.running_turns = 0

    async def run(self, sid: str, batch: Sequence[InboxItem]) -> float | None:
        """``_turn``, every line logged meanwhile tagged with the session and its inbox rows, and
        one line at its end naming its outcome (docs/logging.md)."""
        ids, keys = [row.id for row in batch], [row.dedup_key for row in batch]
        started = time.monotonic()
        with log_context.turn(sid, ids, keys):
            try:
                return await self._turn(sid, batch)
            finally:
                log_turn_end(log_context.outcome(), time.monotonic() - started)

    async def _turn(self, sid: str, batch: Sequence[InboxItem]) -> float | None:
        """Run one turn of ``batch``; None once it committed, else seconds until a new look."""
        typing = self._typing(batch[-1])
        events = [row.event for row in batch]
        reactions = convert.asks_nothing(events)  # recorded by no agent: nothing to stop
        ids = [row.id for row in batch]
        running = self._cancels.begin(sid, ids, committing=reactions)
        returned: list[str] = []  # the session, if the turn released its parked replies
        started = time.perf_counter()
        self.running_turns += 1
        try:
            typing.start()
            with_files = [row.dedup_key for row in batch if convert.has_files(row.event)]
            files = await self._media.settle(with_files) if with_files else []
            inbound = convert.user_input(events, files)
            commit = partial(before_commit, batch, typing, returned, running)
            if reactions:
                result = await self._runner.record_turn(
                    sid, inbound, before_commit=commit, inbox_ids=ids
                )
            else:
                result = await self._runner.run_turn(
                    sid,
                    replace(inbound, images=await self._media.images(files)),
                    cancel=running.cancel,
                    before_commit=commit,
                    inbox_ids=ids,
                    reply_guard=self._window_guard,
                )
        except (SessionDeletedError, SessionNotFound):
            log.info("session %s was deleted during its turn; nothing written", sid)
            self._cancels.accepted.pop(sid, None)
            ended(self._metrics, "deleted")
            return 0.0
        except TurnTakenOver:
            say_taken_over(sid, time.perf_counter() - started)
            ended(self._metrics, "taken_over")
            return max(BUSY_RETRY_SECONDS, self._config.retry_base_seconds)
        except (RunActive, TurnActive):
            self.refusals.refused(sid)
            return max(BUSY_RETRY_SECONDS, self._config.retry_base_seconds)
        except (InboxNotPending, InboxNotFound):
            # Another process answered these rows (or they were deleted) since they were read.
            log.info("inbox rows of session %s were no longer pending; looking again", sid)
            return 0.0
        except asyncio.CancelledError:
            ended(self._metrics, "cancelled")  # shutdown: rolled back, runs again
            raise
        except Exception as exc:
            return await self._failures.failed(sid, batch, exc)
        else:
            # Forgotten before the wait below: the rows a cancel was accepted for are done, and
            # a cancel now must be refused, not accepted again for a turn that has committed.
            self._cancels.accepted.pop(sid, None)
        finally:
            self.running_turns -= 1
            self._cancels.running.pop(sid, None)
            await typing.aclose()  # before the sender may send the reply
        ended(self._metrics, "cancelled_by_user" if result.cancelled else "committed")
        self._metrics.observe(
            TURN_SECONDS, time.perf_counter() - started, agent=result.agent_before
        )
        self.refusals.forget(sid)
        if returned:
            await self._release(sid)
        self._on_outbox()
        return None

    async def answer_waiting(self, sid: str) -> bool:
        """``Runner.answer_waiting`` for ``sid`` in a turn slot; whether it committed (see
        ``Dispatcher.answer_waiting``)."""
        async with self.slots:
            self.running_turns += 1
            try:
                result = await self._runner.answer_waiting(
                    sid, before_commit=queue_answers, reply_guard=self._window_guard
                )
            except TurnTakenOver:  # before TurnActive, which it is: no turn of it runs now
                log.warning(
                    "session %s: its waiting messages were answered here, but another process"
                    " took the session over meanwhile (this process's lease ran out): nothing"
                    " was written; the user's next message's turn answers them",
                    sid,
                )
                return False
            except (SessionDeletedError, SessionNotFound, RunActive, TurnActive):
                return False  # erased, or a turn of the session runs: that one answers
            except Exception as exc:
                error = failure_text(exc)
                log.warning(
                    "session %s: its waiting messages could not be answered: %s", sid, error
                )
                if not isinstance(exc, OWN_ERRORS):
                    log.debug("answering the waiting messages of %s raised", sid, exc_info=exc)
                return False
            finally:
                self.running_turns -= 1
        if result is None:
            return False
        ended(self._metrics, "committed")
        self._on_outbox()
        return True

    def _window_guard(self, session: Session) -> str | None:
        """Why an agent's text cannot go now: WhatsApp's window closed (error 131047)."""
        closed = free_text_refusal(session, self._clock())
        if closed is None:
            return None
        return f"{closed.describe()}; send one with the {TEMPLATE_TOOL} tool, if you have it"

    async def _release(self, sid: str) -> None:
        """The parked replies of a user who is back: due now, before this turn's own."""
        try:
            await self._store.unpark_outbox(sid)
        except StoreError as exc:  # they stay parked, and this turn's replies behind them
            self._metrics.inc(STORE_ERRORS, component="dispatcher")
            log.warning("parked replies of session %s not released: %s", sid, exc)

    def _typing(self, row: InboxItem) -> Typing:
        event = row.event
        channel, account, chat_id = (
            str(event.get(k, "")) for k in ("channel", "account", "chat_id")
        )
        message_id = event.get("message_id")
        return Typing(
            self._adapters.get(channel),
            account,
            chat_id,
            message_id if isinstance(message_id, str) else None,
            convert.thread_of([row]),
            after=self._config.typing_after_seconds,
            interval=self._config.typing_interval_seconds,
        )
