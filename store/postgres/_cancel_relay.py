"""Cancelling a turn that runs in another process (docs/deployment.md).

A web user's socket, or the operator's console behind a load balancer, may reach a process
other than the one running the session's turn. That process's dispatcher alone can stop the
turn (its cancel event, refused once the turn commits), so the request travels to it: the
asker reads the turn's owner (``sessions.owner``, whose lease must be live), sends a
notification addressed to it, and waits for the answer the owner sends back after asking its
own dispatcher. No answer in time (the owner lost its listening connection, or is stuck) is
reported as such, not as a refusal: the turn may still be running.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from functools import partial

from . import _work as work
from ._db import Database

log = logging.getLogger("store.postgres")

CancelHandler = Callable[[str], Awaitable[bool]]  # the session id -> whether the cancel took


async def refuse_all(_session_id: str) -> bool:
    """The handler of a store that runs no turns (a CLI): every cancel is refused."""
    return False


class CancelRelay:
    """The asks this store waits for, and the answers it is sending."""

    def __init__(self, db: Callable[[], Database], owner: str) -> None:
        self._db = db
        self._owner = owner
        self._waiting: dict[str, asyncio.Future[bool]] = {}
        self._answering: set[asyncio.Task[None]] = set()
        self.handler: CancelHandler | None = None  # set while the store watches

    async def ask(self, session_id: str, now: float, wait_seconds: float) -> bool | None:
        """Ask the owner of the session's running turn to cancel it: its answer, False when
        no other live process runs a turn of the session, None when none came in time."""
        if self.handler is None:
            return False  # not listening: an answer could not be heard
        owner = await self._db().query(partial(work.running_owner, session_id=session_id, now=now))
        if owner is None or owner == self._owner:
            return False
        request_id = uuid.uuid4().hex
        answered = self._waiting[request_id] = asyncio.get_running_loop().create_future()
        try:
            payload = f"{owner} {self._owner} {request_id} {session_id}"
            send = partial(work.notify, channel=work.CANCEL_CHANNEL, payload=payload)
            await self._db().call(send)
            async with asyncio.timeout(wait_seconds):
                accepted: bool = await answered
        except TimeoutError:
            log.warning("the process running session %s did not answer its cancel", session_id)
            return None
        finally:
            self._waiting.pop(request_id, None)
        log.info("cancel of session %s relayed: %s", session_id, "taken" if accepted else "refused")
        return accepted

    def heard_request(self, asker: str, request_id: str, session_id: str) -> None:
        """Another process asks: this process's dispatcher decides, the answer goes back."""
        self._keep(self._answer(asker, request_id, session_id))

    async def _answer(self, asker: str, request_id: str, session_id: str) -> None:
        accepted = self.handler is not None and await self.handler(session_id)
        payload = f"{asker} {request_id} {'1' if accepted else '0'}"
        await self._db().call(partial(work.notify, channel=work.ANSWER_CHANNEL, payload=payload))

    def heard_answer(self, request_id: str, accepted: bool) -> None:
        waiting = self._waiting.get(request_id)
        if waiting is not None and not waiting.done():
            waiting.set_result(accepted)

    async def drained(self) -> None:
        """Until the answers being sent are out (or failed)."""
        if self._answering:
            await asyncio.gather(*self._answering, return_exceptions=True)

    def _keep(self, send: Awaitable[None]) -> None:
        task = asyncio.ensure_future(send)
        self._answering.add(task)
        task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._answering.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("answering another process's cancel failed: %s", task.exception())
