"""The dispatcher: one lane per session, its inbox rows in order, one turn at a time.

A lane is a task that lives while its session has pending inbox rows. Turns of all lanes share
a semaphore (``max_concurrent_turns``); a lane waiting for a slot holds nothing but its task.
Every inbox row ends in exactly one committed turn (the turn's commit marks it done) or, after
``max_attempts`` failed turns, in the dead state with an apology to the user.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from itertools import takewhile
from typing import Any

from webhook_bot_gateway.agents import DEAD_LETTER, AgentError, ModelBackendError, Reply, Runner
from webhook_bot_gateway.channels import ChannelAdapter, ChannelError
from webhook_bot_gateway.channels.web import CHANNEL as WEB
from webhook_bot_gateway.store import (
    InboxItem,
    InboxNotFound,
    InboxNotPending,
    RunActive,
    Session,
    SessionDeletedError,
    SessionInbox,
    SessionNotFound,
    Store,
    StoreError,
    Turn,
    TurnActive,
    TurnTakenOver,
)

from . import _convert as convert
from . import _log_context as log_context
from . import _reachability as reachability
from ._dead_letter import DeadLetterRoute, record_dead_letter
from ._media.wait import MediaWait, StoredFiles
from ._metrics import CANCELS, HANDOFFS, STORE_ERRORS, TURN_SECONDS, TURNS, Metrics
from ._pacer import AckPacer
from ._templates import TEMPLATE_TOOL, queued_templates, template_outbox
from ._typing import Typing
from ._wait import OTHERS_GRACE, Later, wait_event
from ._window import free_text_refusal
from .config import DispatcherConfig
from .errors import GatewayError

log = logging.getLogger("gateway.dispatcher")

MAX_ASKED_WAIT = 3600.0  # a model server's Retry-After is honoured up to an hour
BUSY_RETRY_SECONDS = 0.5  # a session whose turn runs elsewhere is tried again this soon
BUSY_WARN_SECONDS = 30.0  # a session refused this long is logged (and again each such period)
TAKEN_SHOWN = 10  # sessions named in the line of a takeover

# A cancel of a turn another process runs waits this long for that process's answer.
CANCEL_RELAY_SECONDS = 2.0
CANCEL_UNANSWERED = "cancel_unanswered"  # the error code when it did not come
UNANSWERED_TEXT = (
    f"the process running this session's turn did not answer the cancel within"
    f" {CANCEL_RELAY_SECONDS:g} s; the turn may still be running: try again"
)
PENDING_PAGE = 100  # pending rows read per turn, or held in memory per lane
# A committed turn took every pending row it read: new rows wake the lane (the intake's wake,
# or the poll for rows another process wrote), so it ends without reading the store again.
DRAINED = -1.0
MAX_ERROR = 500
# The errors our packages raise on purpose: their messages are written to be shown, with no
# secret in them (a model backend's takes its key out, a channel's its token). Any other
# exception is kept by its type only (see ``failure_text``).
OWN_ERRORS = (AgentError, StoreError, ChannelError, GatewayError)

Clock = Callable[[], float]


class Dispatcher:
    """Runs the turns of every session with pending inbox rows."""

    def __init__(
        self,
        store: Store,
        runner: Runner,
        config: DispatcherConfig,
        *,
        metrics: Metrics,
        adapters: Mapping[str, ChannelAdapter] | None = None,
        on_outbox: Callable[[], None] = lambda: None,
        handoff_agent: str | None = None,
        clock: Clock = time.time,
        max_lanes: int | None = None,
        media: MediaWait | None = None,
        pacer: AckPacer | None = None,
        others_grace: float = OTHERS_GRACE,
    ) -> None:
        self._store = store
        self._pacer = pacer  # acks first: a turn may wait to start while acks are pressed
        self._runner = runner
        self._config = config
        self._metrics = metrics
        self._adapters = dict(adapters or {})
        self._on_outbox = on_outbox
        # Where a dead-lettered session goes, and its apology (a person promised only if one
        # holds the session afterwards).
        self._dead_letters = DeadLetterRoute.of(runner.registry, config, handoff_agent)
        self._media = media or StoredFiles(store)
        self._clock = clock
        self._max_lanes = max_lanes or 8 * config.max_concurrent_turns
        self._slots = asyncio.Semaphore(config.max_concurrent_turns)
        self._lanes: dict[str, asyncio.Task[None]] = {}
        self._answering: set[asyncio.Task[bool]] = set()  # answer_waiting_soon's turns
        self._again: set[str] = set()  # woken while running: look for rows once more
        # Lanes that hold every pending row of their session (the intake hands them over):
        # their turns start without a read. A lane with no entry reads the store.
        self._known: dict[str, _Known] = {}
        self._heard: set[str] = set()  # another process's sessions, looked at after the grace
        self._wake_heard_later = Later(self._wake_heard, others_grace)
        # Sessions with rows and no lane while every lane was taken, in order: each gets a
        # lane when one ends. Past max_lanes of them, a poll finds the rest (``_overflow``) once
        # those all have lanes.
        # A left-out session's handed rows are kept as a lane would hold them (bounded alike).
        self._left_out: dict[str, _Known | None] = {}
        self._overflow = False
        self._poll_now = asyncio.Event()
        self._stop = asyncio.Event()
        self._cancels: dict[str, _Running] = {}  # running turns, by session
        # The inbox rows of an accepted cancel whose turn did not commit (its begin was refused,
        # or failed), by session: their next turn starts cancelled. Forgotten once such a turn
        # commits, or when the rows are no longer pending (see ``_cancelled_rows``, ``poll``).
        self._cancelled: dict[str, frozenset[int]] = {}
        self._busy: dict[str, tuple[float, int, float]] = {}  # refused: since, tries, warned at
        self.running_turns = 0

    @property
    def lanes(self) -> frozenset[str]:
        """Sessions that have a lane now."""
        return frozenset(self._lanes)

    async def start(self) -> None:
        """Reconcile interrupted runs, then give every session with pending rows a lane. The
        cancels kept with pending rows (a process stopped before their turns committed) stick
        to those rows here too."""
        self._cancelled.update(await self._store.cancelled_inbox())
        await self.poll()

    async def poll(self) -> None:
        """Take over the turns of processes whose lease ran out, then look for sessions with
        pending rows (rows from another process, taken over, or left out)."""
        self._overflow = False
        # Live view: a turn is registered in _cancels before it begins, and leaves after it ended.
        taken = await self._store.interrupt_running(running_here=self._cancels.keys())
        if taken:
            shown = ", ".join(taken[:TAKEN_SHOWN]) + (", ..." if len(taken) > TAKEN_SHOWN else "")
            log.warning(
                "took over %d running session(s) with no turn under way (a process stopped"
                " before their turns ended, its lease run out): %s",
                len(taken),
                shown,
            )
            kept = await self._store.cancelled_inbox(taken)  # cancels their old owner accepted
            self._cancelled.update(kept.items() - self._cancelled.items())
        # Cancelled rows no lane reads (its read failed): forgotten if they are no longer pending.
        unread = {sid for sid in self._cancelled if sid not in self._lanes}
        pending = await self._store.pending_sessions()
        for sid in unread.difference(pending):  # say, the session was deleted
            if sid not in self._lanes:
                self._cancelled.pop(sid, None)
        for sid in pending:  # rows a lane does not hold may be among them (a CLI wrote them)
            if (known := self._known.get(sid)) is not None:
                known.recheck = True
        self.wake(sid for sid in pending if sid not in self._known)

    def wake(self, session_ids: Iterable[str]) -> None:
        """These sessions got inbox rows: start their lanes, or tell running ones to look again
        (in the store: what they hold in memory may no longer be all)."""
        for sid in session_ids:
            if self._stop.is_set():
                return
            if sid in self._lanes:
                self._known.pop(sid, None)
                self._again.add(sid)
            else:
                self._start_lane(sid, None)

    def offer(self, news: Iterable[SessionInbox]) -> None:
        """The intake recorded rows for these sessions and hands them over: a lane holding its
        session's rows adds them; a new lane starts from them if they are all that wait
        (else it reads the store, as a lane that holds no rows does); a session waiting for a
        lane keeps them likewise. A session whose rows were not handed over (recorded one
        delivery at a time) is woken instead."""
        for new in news:
            sid = new.session_id
            if self._stop.is_set():
                return
            if not new.new:
                self.wake([sid])
            elif sid in self._left_out:
                held = self._left_out[sid]
                if held is not None and not held.learn(new.new):
                    self._left_out[sid] = None  # more than a page waits: its lane reads them
            elif sid not in self._lanes:
                whole = new.complete and len(new.new) <= PENDING_PAGE
                self._start_lane(sid, _Known(list(new.new)) if whole else None)
            elif (known := self._known.get(sid)) is None:
                self._again.add(sid)  # the lane reads the store: these rows are there
            elif not known.learn(new.new):
                del self._known[sid]  # more than a page waits: read them
                self._again.add(sid)

    def _start_lane(self, sid: str, known: _Known | None) -> None:
        if len(self._lanes) >= self._max_lanes:
            if sid in self._left_out:
                self._left_out[sid] = None  # woken: its lane reads the store
            elif len(self._left_out) < self._max_lanes:
                self._left_out[sid] = known
            else:
                self._overflow = True  # picked up by poll() when lanes free up
            return
        if known is not None:
            self._known[sid] = known
        self._lanes[sid] = asyncio.create_task(self._lane(sid), name=f"lane {sid}")

    def heard(self, session_ids: Iterable[str]) -> None:
        """Another process wrote inbox rows for these sessions. A lane here looks again (a turn
        of the session runs here, and the rows follow it in order); the others are the writer's
        to answer, and get a lane here ``others_grace`` seconds later, whose one read finds
        nothing unless the writer died or could not take them (a CLI command wrote them)."""
        for sid in session_ids:
            if sid in self._lanes:
                self._known.pop(sid, None)
                self._again.add(sid)
            elif len(self._heard) < self._max_lanes:  # beyond: the periodic poll finds them
                self._heard.add(sid)
        if self._heard:
            self._wake_heard_later()

    def poll_soon(self) -> None:
        """Look for sessions with pending rows now (rows written without a wake-up: a replay),
        not at the next periodic poll."""
        self._poll_now.set()

    def _wake_heard(self) -> None:
        heard, self._heard = self._heard, set()
        self.wake(heard)

    async def run(self, poll_seconds: float = 5.0) -> None:
        """Poll now and then until ``drain`` (call ``start()`` first)."""
        while not self._stop.is_set():
            await wait_event(self._poll_now, poll_seconds)
            self._poll_now.clear()
            if self._stop.is_set():
                break
            try:
                await self.poll()
            except StoreError as exc:
                self._metrics.inc(STORE_ERRORS, component="dispatcher")
                log.warning("dispatcher poll failed: %s", exc)

    async def cancel_turn(self, session_id: str) -> bool:
        """Stop the session's running turn: it commits only the user's message (see the runner).

        True once the cancel is kept with the turn's inbox rows (``Store.cancel_inbox``): a
        process killed before the cancelled turn commits leaves the cancel to the process that
        runs the rows next. True too when a cancel was accepted already for rows whose turn
        has not committed (they end cancelled). False when no turn of the session runs in this
        process, or when the one running can no longer be stopped: it has its answer and
        commits it (or runs no agent: reactions). A StoreError leaves the turn stopped here,
        the cancel not kept; asked again, the cancel is kept then.
        """
        ids = self._accept_cancel(session_id)
        if ids is None:
            return False
        await self._store.cancel_inbox(sorted(ids))
        return True

    def _accept_cancel(self, session_id: str) -> frozenset[int] | None:
        """The inbox rows of the session's turn that this cancel stops (or that an earlier
        accepted cancel stopped), else None."""
        running = self._cancels.get(session_id)
        if running is not None and running.stop():
            self._cancelled[session_id] = running.inbox_ids  # until a turn of them commits
            return running.inbox_ids
        return self._cancelled.get(session_id)

    def session_erased(self, session_id: str) -> None:
        """The session was deleted: its turn running here (if any) stops now instead of asking
        its model, and showing "typing…" to the erased user, until it ends. It writes
        nothing, as any turn of a deleted session (the store refuses its commit)."""
        running = self._cancels.get(session_id)
        if running is not None:
            running.stop()

    async def cancel(self, session_id: str) -> bool | None:
        """``cancel_turn`` here, else in the process whose lease holds the session's running
        turn (the store relays it, PostgreSQL only): None when that process did not answer
        within ``CANCEL_RELAY_SECONDS``."""
        if session_id in self._cancels or session_id in self._cancelled:
            taken: bool | None = await self.cancel_turn(session_id)  # here: this process decides
            outcome = "taken" if taken else "refused"
        else:
            taken = await self._store.relay_cancel(session_id, wait_seconds=CANCEL_RELAY_SECONDS)
            outcome = {True: "relayed", False: "refused", None: "unanswered"}[taken]
        self._metrics.inc(CANCELS, outcome=outcome)
        return taken

    async def wait_session(self, session_id: str) -> None:
        """Until the session's lane (if any) has ended (tests)."""
        lane = self._lanes.get(session_id)
        if lane is not None:
            await asyncio.wait({lane})

    async def wait_idle(self) -> None:
        """Until no lane (nor ``answer_waiting_soon`` turn) is left (tests, benchmarks)."""
        while self._lanes or self._answering:
            await asyncio.wait([*self._lanes.values(), *self._answering])

    async def drain(self, grace: float) -> None:
        """Start no more turns; give running ones ``grace`` seconds, then roll them back."""
        self._stop.set()
        self._poll_now.set()
        lanes: list[asyncio.Task[Any]] = [*self._lanes.values(), *self._answering]
        if not lanes:
            return
        _, late = await asyncio.wait(lanes, timeout=grace)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
        if late:
            log.warning("rolled back %d turn(s) still running at shutdown", len(late))

    # one lane

    async def _lane(self, sid: str) -> None:
        try:
            while not self._stopping(sid):
                self._again.discard(sid)
                wait = await self._next_turn(sid)
                if wait is None or wait == DRAINED:
                    if sid in self._again:  # the intake recorded more rows meanwhile
                        continue
                    return
                if wait > 0 and self._stop.is_set():  # a cancel's rows: tried within the grace
                    await asyncio.sleep(min(wait, BUSY_RETRY_SECONDS))
                elif wait > 0:
                    await wait_event(self._stop, wait)
        except StoreError as exc:  # its rows could not be read: a poll finds them again
            self._metrics.inc(STORE_ERRORS, component="dispatcher")
            log.warning("lane of session %s stopped: the store failed: %s", sid, exc)
        except Exception:
            log.exception("lane of session %s stopped", sid)
        finally:
            self._busy.pop(sid, None)
            if self._lanes.get(sid) is asyncio.current_task():
                del self._lanes[sid]
                self._known.pop(sid, None)
            self._start_left_out()
            if self._overflow and not self._left_out:
                # Each poll reads every pending session: one per bound's worth of lane ends,
                # once the left-out sessions all have lanes, not one per lane end.
                self._poll_now.set()

    def _start_left_out(self) -> None:
        """Give lanes that are free to the sessions left out, oldest first."""
        while self._left_out and len(self._lanes) < self._max_lanes and not self._stop.is_set():
            sid = next(iter(self._left_out))
            known = self._left_out.pop(sid)
            if sid not in self._lanes:
                self._start_lane(sid, known)

    async def _next_turn(self, sid: str) -> float | None:
        """Run the next turn; return None when nothing is pending, DRAINED when the turn took
        every pending row (no need to read again unless woken), else seconds to wait first."""
        if self._pacer is not None:
            await self._pacer.admit(1)  # before the slot: a paced lane holds none
        async with self._slots:
            if self._stopping(sid):
                return 0.0
            rows = await self._pending(sid)
            cancelled = self._cancelled_rows(sid, rows)
            if not rows:
                return None
            wait = rows[0].next_attempt_at - self._clock()
            if wait > 0:
                return wait  # a retry in backoff; later rows wait behind it
            batch = cancelled or _next_batch(rows, self._config.double_texting)
            retry = await self._logged_turn(sid, batch)
            known = self._known.get(sid)
            if retry is not None:
                self._known.pop(sid, None)  # failed, refused, taken elsewhere: read again
                return retry
            if known is not None:
                return known.took(batch)
            return DRAINED if len(batch) == len(rows) < PENDING_PAGE else 0.0

    def _stopping(self, sid: str) -> bool:
        """The lane ends: the gateway stops, and the lane holds no rows of an accepted cancel.
        Those rows get their turn (the user's message alone, no model asked) during the drain,
        at once, so the cancel is not lost with the process."""
        return self._stop.is_set() and sid not in self._cancelled

    def _cancelled_rows(self, sid: str, rows: Sequence[InboxItem]) -> Sequence[InboxItem]:
        """The first pending rows when a cancel was accepted for them: the batch of their turn
        that did not commit, alone (a message written since is not cancelled). The rows that
        are no longer pending ended otherwise (answered elsewhere, deleted, dead): forgotten."""
        ids = self._cancelled.pop(sid, None)
        if ids is None:
            return ()
        held = list(takewhile(lambda row: row.id in ids, rows))
        if held:
            self._cancelled[sid] = frozenset(row.id for row in held)
        return held

    async def _pending(self, sid: str) -> Sequence[InboxItem]:
        """The session's pending rows: those the lane holds, else read. A read that found
        fewer than a page, with no wake-up since the lane looked, is every pending row: the
        lane holds them from there (the intake's later rows are handed over)."""
        known = self._known.get(sid)
        if known is not None and (known.rows or not known.recheck):
            return known.rows[:PENDING_PAGE]
        self._known.pop(sid, None)  # or held none, and a poll saw rows: read once
        rows = await self._store.pending_inbox(sid, PENDING_PAGE)
        if len(rows) < PENDING_PAGE and sid not in self._again and sid in self._lanes:
            self._known[sid] = _Known(list(rows))
        return rows

    async def _logged_turn(self, sid: str, batch: Sequence[InboxItem]) -> float | None:
        """``_turn``, every line logged meanwhile tagged with the session and its inbox rows, and
        one line at its end naming its outcome (docs/logging.md)."""
        ids, keys = [row.id for row in batch], [row.dedup_key for row in batch]
        started = time.monotonic()
        with log_context.turn(sid, ids, keys):
            try:
                return await self._turn(sid, batch)
            finally:
                _log_turn_end(log_context.outcome(), time.monotonic() - started)

    def _ended(self, outcome: str) -> None:
        """Count how the turn ended; its last log line says it too."""
        self._metrics.inc(TURNS, outcome=outcome)
        log_context.record_outcome(outcome)

    async def _turn(self, sid: str, batch: Sequence[InboxItem]) -> float | None:
        """Run one turn of ``batch``; None once it committed, else seconds until a new look."""
        typing = self._typing(batch[-1])
        events = [row.event for row in batch]
        reactions = convert.asks_nothing(events)  # recorded by no agent: nothing to stop
        ids = [row.id for row in batch]
        running = self._cancels[sid] = _Running(ids, committing=reactions)
        if not reactions and not self._cancelled.get(sid, frozenset()).isdisjoint(ids):
            running.cancel.set()  # cancelled while an earlier turn of these rows ran
        returned: list[str] = []  # the session, if the turn released its parked replies
        started = time.perf_counter()
        self.running_turns += 1
        try:
            typing.start()
            with_files = [row.dedup_key for row in batch if convert.has_files(row.event)]
            files = await self._media.settle(with_files) if with_files else []
            inbound = convert.user_input(events, files)
            commit = partial(_before_commit, batch, typing, returned, running)
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
            self._cancelled.pop(sid, None)
            self._ended("deleted")
            return 0.0
        except TurnTakenOver:
            _say_taken_over(sid, time.perf_counter() - started)
            self._ended("taken_over")
            return max(BUSY_RETRY_SECONDS, self._config.retry_base_seconds)
        except (RunActive, TurnActive):
            self._refused(sid)
            return max(BUSY_RETRY_SECONDS, self._config.retry_base_seconds)
        except (InboxNotPending, InboxNotFound):
            # Another process answered these rows (or they were deleted) since they were read.
            log.info("inbox rows of session %s were no longer pending; looking again", sid)
            return 0.0
        except asyncio.CancelledError:
            self._ended("cancelled")  # shutdown: rolled back, runs again
            raise
        except Exception as exc:
            return await self._failed(sid, batch, exc)
        finally:
            self.running_turns -= 1
            self._cancels.pop(sid, None)
            await typing.aclose()  # before the sender may send the reply
        self._cancelled.pop(sid, None)  # the rows a cancel was accepted for are done
        self._ended("cancelled_by_user" if result.cancelled else "committed")
        self._metrics.observe(
            TURN_SECONDS, time.perf_counter() - started, agent=result.agent_before
        )
        self._busy.pop(sid, None)
        if returned:
            await self._release(sid)
        self._on_outbox()
        return None

    def answer_waiting_soon(self, sid: str) -> None:
        """``answer_waiting`` in a task of its own (an operator handed the session back to a
        bot: its answer must not hold the API's answer); awaited by ``drain``."""
        if self._stop.is_set():
            return  # the user's next message's turn sees the messages
        task = asyncio.create_task(self.answer_waiting(sid), name=f"answer waiting {sid}")
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def answer_waiting(self, sid: str) -> bool:
        """Run ``Runner.answer_waiting`` for ``sid`` in a turn slot (the start does, for the
        sessions whose user wrote to a person whose agent is no longer declared; an operator's
        handoff back to a bot does too); whether it committed. A failure is logged: the
        messages wait for the next start (a gone agent's) or the user's next message, whose
        turn sees them."""
        async with self._slots:
            self.running_turns += 1
            try:
                result = await self._runner.answer_waiting(
                    sid, before_commit=_queue_answers, reply_guard=self._window_guard
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
        self._ended("committed")
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

    def _refused(self, sid: str) -> None:
        """Count a turn refused because one of the session runs; say so when it lasts."""
        now = self._clock()
        since, tries, warned = self._busy.get(sid, (now, 0, now))
        tries += 1
        if now - warned >= BUSY_WARN_SECONDS:
            log.warning(
                "session %s: its turns have been refused for %.0f s (%d tries): a turn of it is"
                " marked running (here or in another process)",
                sid,
                now - since,
                tries,
            )
            warned = now
        self._busy[sid] = (since, tries, warned)

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

    # failures

    async def _failed(self, sid: str, batch: Sequence[InboxItem], exc: Exception) -> float:
        """Record the failed try; the seconds the lane waits before it reads the rows again: 0
        once recorded (the rows' retry time says how long), else the backoff itself (the
        store failed too, say a full disk: the rows were readable, and were tried in a loop)."""
        error = failure_text(exc)
        if not isinstance(exc, OWN_ERRORS):
            log.debug("turn of session %s raised", sid, exc_info=exc)
        ids = [row.id for row in batch]
        attempts = max(row.attempts for row in batch) + 1
        hopeless = isinstance(exc, ModelBackendError) and exc.permanent
        dead = hopeless or attempts >= self._config.max_attempts
        delay: float = max(self._config.retry_base_seconds * 2 ** (attempts - 1), _asked_wait(exc))
        log.warning(
            "turn of session %s failed (try %d): %s%s",
            sid,
            attempts,
            error,
            _next_try(dead, hopeless, delay),
        )
        try:
            await self._store.fail_inbox(
                ids, error, next_attempt_at=self._clock() + (0 if dead else delay), dead=dead
            )
            self._ended("dead" if dead else "failed")
            if dead:
                await self._dead_letter(sid, batch)
        except StoreError as store_exc:
            # The rows stay pending and the lane tries again after the backoff; the attempt
            # is not counted.
            self._metrics.inc(STORE_ERRORS, component="dispatcher")
            log.error("could not record the failed turn of %s: %s", sid, store_exc)
            return delay
        return 0.0

    async def _dead_letter(self, sid: str, batch: Sequence[InboxItem]) -> None:
        """Apologise to the user and, if configured, hand the session to a person; the
        message, the apology and the handoff go in the history (see ``record_dead_letter``)."""
        events = [row.event for row in batch]
        try:
            handoff = await record_dead_letter(
                self._store, sid, events, self._dead_letters, self._window_guard
            )
        except (SessionDeletedError, SessionNotFound):
            return
        except (RunActive, TurnActive):  # a new turn of the session started meanwhile
            log.warning("session %s: the dead letter could not be recorded (a turn runs)", sid)
            return
        if self._dead_letters.apology or self._dead_letters.apology_no_person:
            self._on_outbox()
        if handoff is not None:
            source, target = handoff
            self._metrics.inc(HANDOFFS, from_agent=source, to_agent=target, reason=DEAD_LETTER)


class _Running:
    """A turn running here: its cancel event, honoured until the turn reaches its commit."""

    __slots__ = ("cancel", "committing", "inbox_ids")

    def __init__(self, inbox_ids: Iterable[int], *, committing: bool = False) -> None:
        self.cancel = asyncio.Event()
        self.inbox_ids = frozenset(inbox_ids)  # the batch: a cancel accepted sticks to them
        # Past the point of no return (``_before_commit``): the turn commits what it has.
        self.committing = committing

    def stop(self) -> bool:
        """Set the cancel event; False if it was set already or the turn is committing."""
        if self.committing or self.cancel.is_set():
            return False
        self.cancel.set()
        return True


class _Known:
    """The pending rows of a session, oldest first, as its lane knows them."""

    __slots__ = ("rows", "last_id", "recheck")

    def __init__(self, rows: list[InboxItem]) -> None:
        self.rows = rows
        self.last_id = rows[-1].id if rows else 0  # the newest row this lane has seen
        self.recheck = False  # a poll saw the session's rows: read once these are done

    def learn(self, handed: Sequence[InboxItem]) -> bool:
        """Add the rows newer than any seen (older ones were taken); False past a page."""
        new = [row for row in handed if row.id > self.last_id]
        if new:
            self.rows += new
            self.last_id = new[-1].id
        return len(self.rows) <= PENDING_PAGE

    def took(self, batch: Sequence[InboxItem]) -> float:
        """A turn committed ``batch`` (the first rows): DRAINED when none is left (and no
        read is due), else 0."""
        del self.rows[: len(batch)]
        return 0.0 if self.rows or self.recheck else DRAINED


def _say_taken_over(sid: str, seconds: float) -> None:
    """The turn ran to its end here, but another process took its session over meanwhile
    (TurnTakenOver), so nothing of it was written: its model calls and tools ran for nothing."""
    log.warning(
        "session %s: its turn ran %.1f s here and was dropped: another process took the session"
        " over meanwhile, as this process's lease ran out (it, or its database link, stalled"
        " longer than store.lease_seconds); nothing of the turn was written, and its messages"
        " are answered anew (its tools may run again)",
        sid,
        seconds,
    )


def _log_turn_end(outcome: str | None, seconds: float) -> None:
    """The line that ends a turn. None: no outcome was recorded (another process runs the
    session's turn, answered its rows, or the failure could not be written): the rows are looked
    at again, at DEBUG, as it can repeat every half second."""
    extra = {"outcome": outcome or "retry", "duration_ms": round(seconds * 1000, 1)}
    if outcome is None:
        log.debug("turn ended with no outcome recorded; its rows are looked at again", extra=extra)
    else:
        log.info("turn ended: %s", outcome, extra=extra)


def _next_batch(rows: Sequence[InboxItem], double_texting: str) -> Sequence[InboxItem]:
    """The rows of the next turn: one with "enqueue"; with "merge" every pending row, but a
    retry takes only the rows of the turn that failed (those with attempts), so a message sent
    during the backoff is not tried, or dead-lettered, with them."""
    if double_texting == "enqueue":
        return rows[:1]
    if rows[0].attempts:
        return list(takewhile(lambda row: row.attempts > 0, rows))
    return rows


def _before_commit(
    batch: Sequence[InboxItem],
    typing: Typing,
    returned: list[str],
    running: _Running,
    turn: Turn,
    replies: Sequence[Reply],
) -> None:
    """Inside the turn's transaction: finish the inbox rows, keep a deep link's payload in the
    session's metadata, queue one outbox row per reply (parked while the user is blocked; a
    WhatsApp user who writes again is back: ``returned`` gets the session).

    The runner calls it at the turn's point of no return, once it has looked at the cancel
    event for the last time: from here a cancel is refused, as the turn commits what it has."""
    running.committing = True
    typing.stop()
    turn.complete_inbox([row.id for row in batch])
    payload = convert.last_start_payload([row.event for row in batch])
    if payload is not None:
        turn.update_metadata({convert.START_PAYLOAD: payload})
    _follow_number_change(turn, [row.event for row in batch])
    thread = convert.thread_of(batch)
    session = turn.session
    parked = reachability.is_blocked(session.metadata)
    if reachability.released_by_message(session.channel, session.metadata):
        turn.update_metadata({reachability.BLOCKED: False})
        turn.record_event("user_unblocked", {"reason": "the user wrote again"})
        returned.append(session.session_id)
        parked = False
    _queue_replies(turn, replies, thread, parked=parked)


def _follow_number_change(turn: Turn, events: Sequence[Mapping[str, Any]]) -> None:
    """A WhatsApp user who changed their number: the session's replies (agents', operators')
    go to the new number from now on, as a migrated Telegram group's do."""
    new_chat = convert.changed_number(events)
    session = turn.session
    if new_chat is None or new_chat == convert.reply_target(session.chat_id, session.metadata):
        return
    turn.update_metadata({convert.MIGRATED_CHAT: new_chat})
    turn.record_event("chat_migrated", {"from": session.chat_id, "to": new_chat})


def _queue_replies(
    turn: Turn, replies: Sequence[Reply], thread: str | None = None, *, parked: bool
) -> None:
    """One outbox row per reply and per template a tool queued (none for a web session)."""
    session = turn.session
    if session.channel == WEB:
        return  # the commit writes the replies to the session's event log: that is the send
    for template in queued_templates(turn):
        turn.add_outbox(template_outbox(session, template))
    chat = convert.reply_target(session.chat_id, session.metadata)
    for reply in replies:
        message = convert.outbound(session.channel, session.account, chat, reply, thread)
        turn.add_outbox(convert.outbox_row(session, message, parked=parked))


def _queue_answers(turn: Turn, replies: Sequence[Reply]) -> None:
    """``answer_waiting``'s commit hook: the replies, parked while the user is blocked."""
    _queue_replies(turn, replies, parked=reachability.is_blocked(turn.session.metadata))


def failure_text(exc: Exception) -> str:
    """A failed turn's error, as its log line and its inbox rows (``inbox.error``, which the
    dead letters API shows) keep it: one of our own errors (``OWN_ERRORS``) with its message; any
    other by its type only, as a tool's (docs/agents.md): its message is whatever the code that
    raised it wrote (the model backend of an agent declared in Python, a library below it),
    which may hold a password. The traceback, message included, is logged at DEBUG only."""
    if isinstance(exc, OWN_ERRORS):
        return f"{type(exc).__name__}: {exc}"[:MAX_ERROR]
    return f"{type(exc).__name__} (its message is not kept: it is logged at DEBUG only)"


def _next_try(dead: bool, hopeless: bool, delay: float) -> str:
    """The end of a failed turn's log line: when it is tried again, or why it is not."""
    if hopeless:
        return "; not tried again: the model's server refuses such a request"
    return "" if dead else f"; next try in {delay:g}s"


def _asked_wait(exc: Exception) -> float:
    """How long the model's server asked to be left alone (its Retry-After), at most an hour:
    a turn tried sooner would only be refused again and use up its attempts."""
    if isinstance(exc, ModelBackendError) and exc.retry_after is not None:
        return min(exc.retry_after, MAX_ASKED_WAIT)
    return 0.0
