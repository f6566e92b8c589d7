"""Retention (``purge_history``): what both backends share, the tables, the order and the rule.

Rows older than the cutoff go table by table, each chunk one short transaction, so a writer
waits for one chunk at most. A session whose turn is running is not touched, nor is any
pending inbox or outbox row (work not done yet), nor any stored delivery (not parsed yet).

The history DAG: an old message goes even when a newer child stays; that child becomes a root
(its ``parent_id`` is set to NULL in the same transaction), so every kept branch still loads
from its head and simply starts at its oldest kept message. A head that goes leaves the
session with no current branch (``head_id`` NULL), as a new session has.

Tables whose ids grow with time (messages, events, inbox, outbox, quarantine) are walked in id
order from the oldest row, and a walk ends at the first row not older than the cutoff: each
chunk reads at most ``chunk_size`` rows through the primary key, however big the table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ._args import in_chunks

T = TypeVar("T")

# The id-ordered tables, in the order they are purged: rows that refer to messages or events
# first, sessions (left empty) last.
ORDERED_TABLES = ("inbox", "outbox", "quarantine", "session_events", "messages")

# One row of a chunk's scan: its id, whether it is older than the cutoff, whether it may go.
ScanRow = tuple[int, bool, bool]


@dataclass(frozen=True)
class HistoryPurged:
    """What one ``purge_history`` deleted: counts by table, and the attachment rows gone, as
    (session id, attachment id), whose files the caller deletes next."""

    counts: dict[str, int] = field(default_factory=dict)
    attachments: tuple[tuple[str, str], ...] = ()

    @property
    def total(self) -> int:
        return sum(self.counts.values()) + len(self.attachments)


def chosen(rows: Sequence[ScanRow], chunk_size: int) -> tuple[list[int], bool]:
    """The ids of a scanned chunk that go, and whether the walk is over (a row not old enough,
    or fewer rows than asked for: the end of the table)."""
    ids: list[int] = []
    for row_id, old, allowed in rows:
        if not old:
            return ids, True
        if allowed:
            ids.append(row_id)
    return ids, len(rows) < chunk_size


# A chunk of an ordered table: (cutoff, after id, chunk size) -> (deleted, last id read, done).
OrderedChunk = Callable[[str, float, int, int], Awaitable[tuple[int, int, bool]]]


async def purge_ordered(run_chunk: OrderedChunk, table: str, cutoff: float, size: int) -> int:
    """Walk ``table`` chunk by chunk (one transaction each) from its oldest row; the total."""
    total, after, done = 0, 0, False
    while not done:
        deleted, after, done = await run_chunk(table, cutoff, after, size)
        total += deleted
    return total


async def collect_chunks(run_chunk: Callable[[], Awaitable[list[T]]], size: int) -> list[T]:
    """Run ``run_chunk`` (one transaction each) until it returns fewer than ``size`` rows; all
    the rows it returned."""
    gone: list[T] = []
    while True:
        found = await run_chunk()
        gone += found
        if len(found) < size:
            return gone


async def purge_all(
    ordered: OrderedChunk,
    attachments: Callable[[], Awaitable[list[tuple[str, str]]]],
    empty_sessions: Callable[[], Awaitable[int]],
    cutoff: float,
    chunk_size: int,
) -> HistoryPurged:
    """One retention pass with a backend's chunk transactions: the ordered tables, then the
    attachments (returned, for their files), then the sessions left empty."""
    counts = {
        table: await purge_ordered(ordered, table, cutoff, chunk_size) for table in ORDERED_TABLES
    }
    gone = await collect_chunks(attachments, chunk_size)
    counts["sessions"] = await in_chunks(empty_sessions, chunk_size)
    return HistoryPurged(counts, tuple(gone))
