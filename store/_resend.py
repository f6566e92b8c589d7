"""A sent reply that a failed delivery status says to send again (``StatusIn.resend_at``).

Both backends' ``apply_statuses`` read the row, ask ``plan`` what to write, and write it with
one UPDATE conditional on the row being as read, in the status's own transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Resend:
    """The row goes back to ``pending`` from part ``part`` (the parts before it reached the
    platform), due at ``due``; ``dropped`` are the platform ids of the failed part and of
    those after it, whose later statuses no longer find the row."""

    part: int
    due: float
    kept: list[str]
    dropped: list[str]

    def detail(self) -> dict[str, float | int]:
        """What the session's ``status`` event says of it."""
        return {"resend_at": self.due, "resend_part": self.part}


def plan(
    platform_ids: Sequence[str], attempts: int, platform_id: str, resend_at: Sequence[float]
) -> Resend | None:
    """The re-send of a ``sent`` row whose part ``platform_id`` failed, or None: the id is
    not one of the row's current parts (an earlier try's, superseded) or the row made more
    tries than ``resend_at`` has times for (out of tries)."""
    ids = list(platform_ids)
    if platform_id not in ids or not 1 <= attempts <= len(resend_at):
        return None
    part = ids.index(platform_id)
    return Resend(part, float(resend_at[attempts - 1]), ids[:part], ids[part:])
