"""One turn's work: model -> tools -> model, with handoffs, up to a step limit."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from webhook_bot_gateway.store import NewMessage, Session, Turn, storable_text

from ._agent import Agent, handoff_target
from ._context import StoredMessage, assistant_data, build_context, tool_data, with_images
from ._errors import ContextTooLong, EmptyModelAnswer, StepLimitExceeded, ToolFailed
from ._model import ImagePart, ModelMessage, ModelResponse, ToolCall
from ._normalize import CheckedCall, check_calls
from ._observer import NO_OBSERVER, ModelOutcome, TurnObserver
from ._registry import Registry
from ._rules import RulesModel
from ._tools import ToolContext, ToolResult

logger = logging.getLogger("agents.runner")
T = TypeVar("T")

HANDOFF_EVENT = "agent_changed"
NOT_SENT = "not_sent"  # data of an assistant message whose text the reply guard refused

# Why the session cannot take a text reply now (e.g. WhatsApp's window closed), or None.
ReplyGuard = Callable[[Session], "str | None"]


@dataclass(frozen=True, slots=True)
class Reply:
    """A message for the user: text, optional buttons, and the agent that wrote it."""

    text: str
    agent: str
    buttons: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Limits:
    max_turns: int = 40
    max_steps: int = 8
    max_handoffs: int = 3
    refusal_reply: str | None = None  # sent instead of a model's refusal; None: the refusal


class TurnLoop:
    """Runs one turn inside an open store turn; everything it writes is buffered there."""

    def __init__(
        self,
        turn: Turn,
        registry: Registry,
        limits: Limits,
        agent: Agent,
        images: tuple[ImagePart, ...] = (),
        inbox_ids: Sequence[int] = (),
        observer: TurnObserver = NO_OBSERVER,
        reply_guard: ReplyGuard | None = None,
    ) -> None:
        self.turn = turn
        self.reply_guard = reply_guard
        self.notes: list[ModelMessage] = []  # told to the model in this turn only, not stored
        self.observer = observer
        self.images = images
        self.registry = registry
        self.limits = limits
        self.agent = agent
        self.replies: list[Reply] = []
        self.handoffs: list[tuple[str, str]] = []  # (from, to): reported once the turn commits
        self.inbox_ids = tuple(inbox_ids)
        self.turn_key = turn_key(turn.session, self.inbox_ids)
        self.tool_runs: dict[str, int] = {}  # calls of each tool that reached it, this turn
        # What the turn awaits now, for a timeout's message: "the model 'gpt'", "the tool
        # 'refund'" (a name, never arguments: they may hold personal data); None between.
        self.waiting_on: str | None = None
        self.turns_kept = limits.max_turns  # halved when the model's context cannot hold them

    async def run(self) -> list[Reply]:
        """Ask the model until it answers without tool calls (or a human takes over)."""
        if self.agent.kind == "human":
            return self.replies  # operators answer
        refused = 0
        for _ in range(self.limits.max_steps):
            try:
                response = await self._ask()
            except EmptyModelAnswer:
                if not self._has_replied():
                    raise  # the user would get no word: a failed call, retried
                logger.info(
                    "session %s: agent %s had nothing to add to its reply",
                    self.turn.session.session_id,
                    self.agent.name,
                )
                return self.replies
            calls, sent = self._record(response)
            if not sent:
                refused += 1
            if calls:
                if await self._run_calls(calls):
                    return self.replies
            elif sent or refused > 1:
                return self.replies  # answered, or refused twice: nothing more to try
            # else: told why its text was refused, the model answers once more (a template)
        raise StepLimitExceeded(self.turn.session.session_id, self.limits.max_steps)

    async def _ask(self) -> ModelResponse:
        """The model's answer to the context; a context the model's window cannot hold is sent
        again with half as many earlier turns (as often as that makes it shorter), down to the
        current turn alone, and the turn's later calls keep the cut. A window that cannot hold
        the current turn fails the call, as any refused call does."""
        context = self._model_context(self.turns_kept)
        while True:
            try:
                return await self._call(context)
            except ContextTooLong:
                shorter = self._shorter_context(len(context))
                if shorter is None:
                    raise
                context = shorter
                logger.info(
                    "session %s: the model's context cannot hold the history; asking again"
                    " with the last %d turn(s)",
                    self.turn.session.session_id,
                    self.turns_kept,
                )

    def _shorter_context(self, refused: int) -> list[ModelMessage] | None:
        """The context with half as many turns, again until it holds fewer than ``refused``
        messages; None when even the current turn alone does not."""
        while self.turns_kept > 1:
            self.turns_kept //= 2
            context = self._model_context(self.turns_kept)
            if len(context) < refused:
                return context
        return None

    def _model_context(self, max_turns: int) -> list[ModelMessage]:
        history: list[StoredMessage] = [*self.turn.history, *self.turn.pending]
        context = with_images(
            build_context(self.agent, history, max_turns, self._offered()), self.images
        )
        return context + self.notes

    async def _call(self, context: list[ModelMessage]) -> ModelResponse:
        model = self.registry.model_for(self.agent)
        specs = self.registry.tool_specs(self.agent, self._account)
        name = self.registry.model_name(self.agent)
        return await self._waiting(
            f"the model {name!r}", self._timed(model.complete(context, specs))
        )

    async def _waiting(self, what: str, work: Awaitable[T]) -> T:
        """Await ``work``, saying meanwhile what the turn waits on (``waiting_on``); a turn
        cut short while it waits (a timeout, a cancel) leaves it set."""
        self.waiting_on = what
        result = await work
        self.waiting_on = None
        return result

    async def _timed(self, call: Awaitable[ModelResponse]) -> ModelResponse:
        """Await a model call and tell the observer how long it took and how it ended."""
        started = time.perf_counter()
        outcome: ModelOutcome = "error"
        try:
            response = await call
            outcome = "ok"
            return response
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            name = self.registry.model_name(self.agent)
            self.observer.model_call(name, time.perf_counter() - started, outcome)

    def _record(self, response: ModelResponse) -> tuple[list[CheckedCall], bool]:
        """Store the answer, its calls made safe to replay (see ``check_calls``); False when
        its text was refused by the reply guard (the model is told why)."""
        calls = check_calls(response.tool_calls, self._offered(), self._call_ids())
        text = visible(response.text)  # blanks are no reply: the model must not think it said them
        refusal_text = visible(response.refusal)
        if not text and not calls and refusal_text:
            text = self.limits.refusal_reply or refusal_text
        if not (text or calls):
            logger.info(
                "session %s: agent %s gave no answer: no reply in this turn",
                self.turn.session.session_id,
                self.agent.name,
            )
            return [], True
        data = assistant_data(response, calls)
        refusal = self._refusal() if text else None
        if refusal is not None:
            data[NOT_SENT] = refusal
        self.turn.append(NewMessage("assistant", text, agent=self.agent.name, data=data))
        if refusal is not None:
            self.notes.append(ModelMessage("system", f"error: your reply was not sent: {refusal}"))
            return calls, False
        if text:
            self.replies.append(Reply(text, self.agent.name, response.buttons))
        return calls, True

    def _has_replied(self) -> bool:
        """The running agent has a reply to the user in this turn (another agent's, before a
        handoff, does not answer what the user asked of this one)."""
        return any(reply.agent == self.agent.name for reply in self.replies)

    def _refusal(self) -> str | None:
        return self.reply_guard(self.turn.session) if self.reply_guard else None

    def _offered(self) -> list[str]:
        return [spec.name for spec in self.registry.tool_specs(self.agent)]

    def _call_ids(self) -> set[str]:
        """The tool-call ids of the history the model may see again."""
        history: list[StoredMessage] = [*self.turn.history, *self.turn.pending]
        return {
            str(c.get("id"))
            for m in history
            for c in m.data.get("tool_calls") or ()
            if isinstance(c, dict)
        }

    async def _run_calls(self, calls: Sequence[CheckedCall]) -> bool:
        """Answer every call; take the first handoff. True when a human takes over."""
        target: Agent | None = None
        for checked in calls:
            call = checked.call
            if checked.problem is not None:
                result, wanted = ToolResult.error(checked.problem), None
            else:
                result, wanted = await self._answer(call, taken=target is not None)
            data = tool_data(call, result)
            self.turn.append(NewMessage("tool", result.text, agent=self.agent.name, data=data))
            target = target or wanted
        if target is None:
            return False
        self._switch(target)
        return target.kind == "human"

    async def _answer(self, call: ToolCall, *, taken: bool) -> tuple[ToolResult, Agent | None]:
        name = handoff_target(call.name)
        if name is not None and name in self.agent.handoffs:
            if not self.registry.allows(*self._account, name):
                return ToolResult.error(f"{name!r} does not serve this account"), None
            return self._handoff(name, taken=taken)
        tool = self.agent.tool_named(call.name)
        if tool is None:
            return ToolResult.error(f"unknown tool {call.name!r}"), None
        invoked = tool.invoke(call.arguments, partial(self._context, tool.name, call.id))
        result = await self._waiting(f"the tool {tool.name!r}", invoked)
        if result.is_error and isinstance(self.registry.model_for(self.agent), RulesModel):
            # No model reads the error, and a rule's reply would hand it to the user verbatim
            # (the tool's exception, secrets and all): the turn fails, to be retried and then
            # dead-lettered with the apology.
            raise ToolFailed(self.agent.name, tool.name, result.failure)
        return result, None

    @property
    def _account(self) -> tuple[str, str]:
        session = self.turn.session
        return session.channel, session.account

    def _context(self, tool: str, call_id: str) -> ToolContext:
        """The context of the next call of ``tool`` that reaches it (valid arguments).

        Its key is the turn's key, the tool and how many calls of that tool reached it before
        in this turn: the same on every run of the turn as long as the model asks the same
        tool in the same order, whatever it asks in between or with which call ids.
        """
        count = self.tool_runs.get(tool, 0)
        self.tool_runs[tool] = count + 1
        key = f"{self.turn_key}:{tool}:{count}"
        session_id = self.turn.session.session_id
        return ToolContext(session_id, self.agent.name, key, self.turn_key, self.inbox_ids, call_id)

    def _handoff(self, name: str, *, taken: bool) -> tuple[ToolResult, Agent | None]:
        if taken:
            return ToolResult.error("one handoff per answer; this one was ignored"), None
        if len(self.handoffs) >= self.limits.max_handoffs:
            return ToolResult.error("no more handoffs in this turn; answer the user"), None
        return ToolResult(f"Transferred to {name}."), self.registry.get(name)

    def _switch(self, target: Agent) -> None:
        self.handoffs.append((self.agent.name, target.name))
        logger.info(
            "session %s: handoff %s -> %s",
            self.turn.session.session_id,
            self.agent.name,
            target.name,
        )
        detail = {"from": self.agent.name, "to": target.name, "reason": "handoff"}
        self.turn.record_event(HANDOFF_EVENT, detail)
        self.turn.set_active_agent(target.name)
        self.agent = target
        if target.kind == "human" and target.handoff_reply:
            # Kept unsent where no text can go now (WhatsApp's window), as a refused reply is.
            refusal = self._refusal()
            data = {} if refusal is None else {NOT_SENT: refusal}
            notice = NewMessage("assistant", target.handoff_reply, agent=target.name, data=data)
            self.turn.append(notice)
            if refusal is None:
                self.replies.append(Reply(target.handoff_reply, target.name))


def visible(text: str | None) -> str | None:
    """``text`` as it can be stored (see ``storable_text``), or None when it is empty or only
    white space: such a text is no reply (the platforms refuse it, and a model that saw it in
    its history would think it had answered)."""
    return storable_text(text) if text and not text.isspace() else None


def turn_key(session: Session, inbox_ids: Sequence[int]) -> str:
    """A key that is the same on every run of one turn (retries, re-runs after a crash).

    A turn answers inbox rows: their smallest id names it (a retry may take more rows of the
    same session, never another first one). A turn started without rows (``run_turn`` called
    directly) is named by the session's head instead, the same until the head moves.
    The session's id and creation time make it unique beyond one database: ids start again
    in a new one, and a deleted session's id comes back.
    """
    anchor = f"inbox {min(inbox_ids)}" if inbox_ids else f"head {session.head_id or 0}"
    seed = f"{session.session_id}\n{session.created_at.isoformat()}\n{anchor}"
    return "turn-" + hashlib.sha256(seed.encode()).hexdigest()[:32]
