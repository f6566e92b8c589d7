"""What a turn reports as it runs: each model call's duration and outcome, and each handoff.

The gateway counts these in /metrics (docs/operations.md); agents/ knows nothing of metrics, and a
runner without an observer reports to ``NO_OBSERVER``, which drops everything.
"""

from __future__ import annotations

from typing import Literal, Protocol

ModelOutcome = Literal["ok", "error", "cancelled"]


class TurnObserver(Protocol):
    """Told of a turn's model calls and handoffs; must be cheap and must not raise."""

    def model_call(self, model: str, seconds: float, outcome: ModelOutcome) -> None:
        """One ``complete`` call of the backend that ``model`` names, retries included."""

    def handoff(self, source: str, target: str) -> None:
        """The turn's agent handed the session to another agent."""


class _NoObserver:
    def model_call(self, model: str, seconds: float, outcome: ModelOutcome) -> None:
        pass

    def handoff(self, source: str, target: str) -> None:
        pass


NO_OBSERVER: TurnObserver = _NoObserver()
