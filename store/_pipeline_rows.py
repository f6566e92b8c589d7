"""Rows of the pipeline tables to the store's frozen dataclasses."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, cast

from ._pipeline_types import (
    DELIVERY_STATES,
    Delivery,
    InboxItem,
    OutboxItem,
    QuarantineItem,
    SessionInbox,
)
from ._rows import Row, load_json, to_datetime

DELIVERY_COLUMNS = "id, channel, account, body, keys, received_at"
INBOX_COLUMNS = (
    "id, session_id, dedup_key, event, state, attempts, error, next_attempt_at, created_at"
)
OUTBOX_COLUMNS = (
    "id, session_id, channel, account, chat_id, payload, state, attempts, next_attempt_at,"
    " error, platform_ids, delivery_state, created_at, sent_at, claimed_by"
)
QUARANTINE_COLUMNS = "id, channel, account, body, reason, received_at, replayed_at"

# A status only moves a row forward (statuses can arrive out of order); "failed" is final.
STATUS_RANK = {state: rank for rank, state in enumerate(DELIVERY_STATES, start=1)}


def dump_list(values: list[str]) -> str:
    """A JSON array of strings as stored."""
    return json.dumps(values, separators=(",", ":"), ensure_ascii=False)


def _load_list(text: str) -> list[str]:
    return cast(list[str], json.loads(text))


def to_delivery(row: Row) -> Delivery:
    """A ``DELIVERY_COLUMNS`` row to a Delivery."""
    return Delivery(
        id=row[0],
        channel=row[1],
        account=row[2],
        body=bytes(row[3]),
        keys=frozenset(_load_list(row[4])),
        received_at=to_datetime(row[5]),
    )


def to_session_inboxes(sessions: Sequence[str], rows: Sequence[Row]) -> list[SessionInbox]:
    """``sessions`` (in order), each with its ``rows``: ``INBOX_COLUMNS`` of pending rows,
    oldest first, then the count of the session's pending rows."""
    new: dict[str, list[InboxItem]] = {sid: [] for sid in sessions}
    pending: dict[str, int] = {}
    for row in rows:
        if (items := new.get(row[1])) is not None:
            items.append(to_inbox(row))
            pending[row[1]] = row[9]
    return [
        SessionInbox(sid, tuple(items), bool(items) and pending[sid] == len(items))
        for sid, items in new.items()
    ]


def to_inbox(row: Row) -> InboxItem:
    """An ``INBOX_COLUMNS`` row to an InboxItem."""
    return InboxItem(
        id=row[0],
        session_id=row[1],
        dedup_key=row[2],
        event=load_json(row[3]),
        state=row[4],
        attempts=row[5],
        error=row[6],
        next_attempt_at=row[7],
        created_at=to_datetime(row[8]),
    )


def to_outbox(row: Row) -> OutboxItem:
    """An ``OUTBOX_COLUMNS`` row to an OutboxItem."""
    sent_at: Any = row[13]
    return OutboxItem(
        id=row[0],
        session_id=row[1],
        channel=row[2],
        account=row[3],
        chat_id=row[4],
        payload=load_json(row[5]),
        state=row[6],
        attempts=row[7],
        next_attempt_at=row[8],
        error=row[9],
        platform_ids=tuple(_load_list(row[10])),
        delivery_state=row[11],
        created_at=to_datetime(row[12]),
        sent_at=None if sent_at is None else to_datetime(sent_at),
        claimed_by=row[14],
    )


def to_quarantine(row: Row) -> QuarantineItem:
    """A ``QUARANTINE_COLUMNS`` row to a QuarantineItem."""
    replayed_at: Any = row[6]
    return QuarantineItem(
        id=row[0],
        channel=row[1],
        account=row[2],
        body=bytes(row[3]),
        reason=row[4],
        received_at=to_datetime(row[5]),
        replayed_at=None if replayed_at is None else to_datetime(replayed_at),
    )


def dump_ids(ids: Sequence[int]) -> str:
    """Row ids as a JSON array, for ``IN (SELECT value FROM json_each(?))``."""
    return json.dumps(list(ids))


def by_session(rows: Iterable[tuple[str, int]]) -> dict[str, frozenset[int]]:
    """``(session_id, row id)`` pairs, grouped: the ids of each session."""
    grouped: dict[str, set[int]] = {}
    for session_id, row_id in rows:
        grouped.setdefault(session_id, set()).add(row_id)
    return {session_id: frozenset(ids) for session_id, ids in grouped.items()}
