"""Agents exception hierarchy.

* AgentError
  + AgentConfigError(ValueError)   a declaration that cannot run; names the agent (and the
                                   config key, where it comes from one)
  + ModelBackendError              a model server refused or failed (status when known)
    - EmptyModelAnswer             it answered nothing: no text, no tool call, no refusal
  + StepLimitExceeded              a turn needed more model calls than allowed; rolled back
  + ToolFailed                     a rules agent's tool call ended in an error; rolled back
  + TurnCancelled                  the turn's cancel event was set; rolled back
  + TurnTimeout(TimeoutError)      the turn ran longer than allowed; rolled back
"""

from __future__ import annotations


class AgentError(Exception):
    """Base of every error agents/ raises on purpose."""

    code = "agent_error"


class AgentConfigError(AgentError, ValueError):
    code = "agent_config"

    def __init__(
        self, agent: str | None, message: str, *, key: str | None = None, problem: str = ""
    ) -> None:
        super().__init__(f"agent {agent!r}: {message}" if agent else message)
        self.agent = agent
        # Where the declaration came from the config: the key at fault
        # (agents.list[0].tools[1]) and the problem as it reads after that key.
        self.key = key
        self.problem = problem or str(self)


class ModelBackendError(AgentError):
    code = "model_backend"

    def __init__(
        self,
        backend: str,
        message: str,
        status: int | None = None,
        *,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"model backend {backend!r}: {message}")
        self.backend = backend
        self.status = status
        # The server's own wait (Retry-After, seconds) when it was the reason to give up: the
        # turn is not tried again sooner than that.
        self.retry_after = retry_after

    @property
    def permanent(self) -> bool:
        """Whether the same request can only be refused again: a 4xx (a bad key, a model that
        does not exist, a request it refuses, a prompt its window cannot hold) but those that
        say "later" (408, 409, 425, 429). A turn failing so is not tried again."""
        status = self.status
        return status is not None and 400 <= status < 500 and status not in _LATER


_LATER = frozenset({408, 409, 425, 429})


class EmptyModelAnswer(ModelBackendError):
    """The model answered nothing: a failed call, unless its agent has replied in the turn
    already (after its tool calls it has nothing to add; the turn ends with that reply)."""


class ContextTooLong(ModelBackendError):
    """The server refused the request as longer than the model's context window: the turn asks
    again with fewer earlier turns of the history (see ``TurnLoop``)."""


class StepLimitExceeded(AgentError):
    code = "step_limit"

    def __init__(self, session_id: str, steps: int) -> None:
        super().__init__(f"session {session_id!r}: no final answer after {steps} model calls")
        self.session_id = session_id
        self.steps = steps


class ToolFailed(AgentError):
    """A tool of an agent without a model to tell (the rules backend) ended in an error: the
    turn fails rather than answer the user with the error. ``failure`` is safe to log."""

    code = "tool_failed"

    def __init__(self, agent: str, tool: str, failure: str) -> None:
        super().__init__(
            f"agent {agent!r}: tool {tool!r} failed: {failure}"
            " (a rules agent has no model to tell, so the turn fails)"
        )
        self.agent = agent
        self.tool = tool
        self.failure = failure


class TurnCancelled(AgentError):
    code = "turn_cancelled"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r}: turn cancelled; nothing was written")
        self.session_id = session_id


class TurnTimeout(AgentError, TimeoutError):
    code = "turn_timeout"

    def __init__(self, session_id: str, seconds: float, waiting_on: str | None = None) -> None:
        # waiting_on: what the turn was waiting on when its time ran out ("the tool
        # 'refund'", "the model 'gpt'"): a name, never a call's arguments (personal data).
        waiting = f" (it was waiting on {waiting_on})" if waiting_on else ""
        super().__init__(
            f"session {session_id!r}: turn took longer than {seconds:g}s{waiting}; rolled back"
        )
        self.session_id = session_id
        self.seconds = seconds
        self.waiting_on = waiting_on
