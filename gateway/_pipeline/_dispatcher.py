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
from typing import Any

from webhook_bot_gateway.agents import Runner
from webhook_bot_gateway.channels import ChannelAdapter
from webhook_bot_gateway.store import InboxItem, SessionInbox, Store, StoreError

from .._media.wait import MediaWait, StoredFiles
from .._metrics import CANCELS, STORE_ERRORS, Metrics
from .._wait import OTHERS_GRACE, Later, wait_event
from ..config import DispatcherConfig
from . import _turns as turns
from ._cancels import Cancels
from ._dead_letter import DeadLetterRoute
from ._lanes import DRAINED, PENDING_PAGE, Known, next_batch
from ._pacer import AckPacer

log = logging.getLogger("gateway.dispatcher")

TAKEN_SHOWN = 10  # sessions named in the line of a takeover

# A cancel of a turn another process runs waits this long for that process's answer.
CANCEL_RELAY_SECONDS = 2.0
CANCEL_UNANSWERED = "cancel_unanswered"  # the error code when it did not come
UNANSWERED_TEXT = (
    f"the process running this session's turn did not answer the cancel within"
    f" {CANCEL_RELAY_SECONDS:g} s; the turn may still be running: try again"
)

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
        self._config = config
        self._metrics = metrics
        self._clock = clock
        self._cancels = Cancels()  # the turns running here, and the rows of accepted cancels
        self._turns = turns.TurnRunner(
            store,
            runner,
            config,
            metrics=metrics,
            cancels=self._cancels,
            media=media or StoredFiles(store),
            adapters=dict(adapters or {}),
            on_outbox=on_outbox,
            dead_letters=DeadLetterRoute.of(runner.registry, config, handoff_agent),
            clock=clock,
        )
        self._max_lanes = max_lanes or 8 * config.max_concurrent_turns
        self._lanes: dict[str, asyncio.Task[None]] = {}
        self._answering: set[asyncio.Task[bool]] = set()  # answer_waiting_soon's turns
        self._again: set[str] = set()  # woken while running: look for rows once more
        # Lanes that hold every pending row of their session (the intake hands them over):
        # their turns start without a read. A lane with no entry reads the store.
        self._known: dict[str, Known] = {}
        self._heard: set[str] = set()  # another process's sessions, looked at after the grace
        self._albums: dict[str, tuple[int, float]] = {}  # album part last seen, and when
        self._wake_heard_later = Later(self._wake_heard, others_grace)
        # Sessions with rows and no lane while every lane was taken, in order: each gets a
        # lane when one ends. Past max_lanes of them, a poll finds the rest (``_overflow``) once
        # those all have lanes.
        # A left-out session's handed rows are kept as a lane would hold them (bounded alike).
        self._left_out: dict[str, Known | None] = {}
        self._overflow = False
        self._poll_now = asyncio.Event()
        self._stop = asyncio.Event()

    @property
    def running_turns(self) -> int:
        """Turns running now (their slots taken)."""
        return self._turns.running_turns

    @property
    def lanes(self) -> frozenset[str]:
        """Sessions that have a lane now."""
        return frozenset(self._lanes)

    async def start(self) -> None:
        """Reconcile interrupted runs, then give every session with pending rows a lane. The
        cancels kept with pending rows (a process stopped before their turns committed) stick
        to those rows here too."""
        self._cancels.accepted.update(await self._store.cancelled_inbox())
        await self.poll()

    async def poll(self) -> None:
        """Take over the turns of processes whose lease ran out, then look for sessions with
        pending rows (rows from another process, taken over, or left out)."""
        self._overflow = False
        # Live view: a turn is registered in _cancels.running before it begins, and leaves after
        # it ended.
        taken = await self._store.interrupt_running(running_here=self._cancels.running.keys())
        if taken:
            shown = ", ".join(taken[:TAKEN_SHOWN]) + (", ..." if len(taken) > TAKEN_SHOWN else "")
            log.warning(
                "took over %d running session(s) with no turn under way (a process stopped"
                " before their turns ended, its lease run out): %s",
                len(taken),
                shown,
            )
            kept = await self._store.cancelled_inbox(taken)  # cancels their old owner accepted
            accepted = self._cancels.accepted
            accepted.update(kept.items() - accepted.items())
        # Cancelled rows no lane reads (its read failed): forgotten if they are no longer pending.
        unread = {sid for sid in self._cancels.accepted if sid not in self._lanes}
        pending = await self._store.pending_sessions()
        for sid in unread.difference(pending):  # say, the session was deleted
            if sid not in self._lanes:
                self._cancels.accepted.pop(sid, None)
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
                self._start_lane(sid, Known(list(new.new)) if whole else None)
            elif (known := self._known.get(sid)) is None:
                self._again.add(sid)  # the lane reads the store: these rows are there
            elif not known.learn(new.new):
                del self._known[sid]  # more than a page waits: read them
                self._again.add(sid)

    def _start_lane(self, sid: str, known: Known | None) -> None:
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
        ids = self._cancels.accept(session_id)
        if ids is None:
            return False
        await self._store.cancel_inbox(sorted(ids))
        return True

    def session_erased(self, session_id: str) -> None:
        """The session was deleted: its turn running here (if any) stops now instead of asking
        its model, and showing "typing…" to the erased user, until it ends. It writes
        nothing, as any turn of a deleted session (the store refuses its commit)."""
        self._cancels.stop(session_id)

    async def cancel(self, session_id: str) -> bool | None:
        """``cancel_turn`` here, else in the process whose lease holds the session's running
        turn (the store relays it, PostgreSQL only): None when that process did not answer
        within ``CANCEL_RELAY_SECONDS``."""
        if self._cancels.here(session_id):
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
                    await asyncio.sleep(min(wait, turns.BUSY_RETRY_SECONDS))
                elif wait > 0:
                    await wait_event(self._stop, wait)
        except StoreError as exc:  # its rows could not be read: a poll finds them again
            self._metrics.inc(STORE_ERRORS, component="dispatcher")
            log.warning("lane of session %s stopped: the store failed: %s", sid, exc)
        except Exception:
            log.exception("lane of session %s stopped", sid)
        finally:
            self._turns.refusals.forget(sid)
            if self._lanes.get(sid) is asyncio.current_task():
                del self._lanes[sid]
                self._known.pop(sid, None)
                self._albums.pop(sid, None)
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
        async with self._turns.slots:
            if self._stopping(sid):
                return 0.0
            rows = await self._pending(sid)
            cancelled = self._cancels.rows(sid, rows)
            if not rows:
                return None
            wait = rows[0].next_attempt_at - self._clock()
            if wait > 0:
                return wait  # a retry in backoff; later rows wait behind it
            wait = 0.0 if cancelled else self._album_wait(sid, rows)
            if wait > 0:
                return wait
            batch = cancelled or next_batch(rows, self._config.double_texting)
            retry = await self._turns.run(sid, batch)
            known = self._known.get(sid)
            if retry is not None:
                self._known.pop(sid, None)  # failed, refused, taken elsewhere: read again
                return retry
            if known is not None:
                return known.took(batch)
            return DRAINED if len(batch) == len(rows) < PENDING_PAGE else 0.0

    def _album_wait(self, sid: str, rows: Sequence[InboxItem]) -> float:
        """Seconds to wait before the turn when its last row is part of a Telegram album: until
        no new part has come for ``album_wait_seconds`` (each new part starts the wait again,
        on this dispatcher's clock), so the album is answered in one turn, not one per part."""
        last, limit = rows[-1], self._config.album_wait_seconds
        merging = self._config.double_texting == "merge" and not rows[0].attempts
        if not (merging and limit > 0 and last.event.get("media_group")):
            self._albums.pop(sid, None)
            return 0.0
        now = self._clock()
        seen_id, seen_at = self._albums.setdefault(sid, (last.id, now))
        if seen_id != last.id:
            seen_at = now
            self._albums[sid] = (last.id, now)
        wait = seen_at + limit - now
        if wait <= 0:
            del self._albums[sid]
        return max(wait, 0.0)

    def _stopping(self, sid: str) -> bool:
        """The lane ends: the gateway stops, and the lane holds no rows of an accepted cancel.
        Those rows get their turn (the user's message alone, no model asked) during the drain,
        at once, so the cancel is not lost with the process."""
        return self._stop.is_set() and sid not in self._cancels.accepted

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
            self._known[sid] = Known(list(rows))
        return rows

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
        return await self._turns.answer_waiting(sid)
