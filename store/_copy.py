"""Copy a whole store from one backend to another (``gateway migrate-store``).

Both backends have the same tables and columns (store/sqlite/_schema.py and
store/postgres/_schema.py), so rows move column for column, ids included. Each backend gives
raw access to its tables through ``TableAccess``; this module owns the order (parents before
children), the circular link of a session's head to its messages, and the final count check.

Everything written to the target goes through ``TableAccess.copying``: on PostgreSQL that is one
transaction for the whole copy, emptying included, committed only once the counts are verified
(a SQLite target is a new file, renamed over the old one by ``gateway migrate-store``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

Row = tuple[Any, ...]
PAGE = 2000  # rows per read of the source and per write to the target: memory stays bounded
T = TypeVar("T")


@dataclass(frozen=True)
class Table:
    """A table, the columns copied and the key that orders its pages."""

    name: str
    columns: tuple[str, ...]
    order: str

    @property
    def column_list(self) -> str:
        return ", ".join(self.columns)


# Parents first. A session's head_id points at one of its messages, which need the session:
# sessions are copied without it and their heads set once the messages are in.
TABLES: tuple[Table, ...] = (
    Table(
        "sessions",
        (
            "session_id",
            "channel",
            "account",
            "chat_id",
            "active_agent",
            "status",
            "owner",
            "metadata",
            "created_at",
            "updated_at",
        ),
        "session_id",
    ),
    Table(
        "messages",
        ("id", "session_id", "parent_id", "role", "text", "agent", "data", "created_at"),
        "id",
    ),
    Table("session_events", ("id", "session_id", "kind", "detail", "created_at", "seq"), "id"),
    Table("processed_messages", ("key", "seen_at"), "key"),
    Table("deliveries", ("id", "channel", "account", "body", "keys", "received_at"), "id"),
    Table(
        "quarantine",
        ("id", "channel", "account", "body", "reason", "received_at", "replayed_at"),
        "id",
    ),
    Table(
        "inbox",
        (
            "id",
            "session_id",
            "dedup_key",
            "event",
            "state",
            "attempts",
            "error",
            "next_attempt_at",
            "created_at",
            "finished_at",
            "cancelled_at",
        ),
        "id",
    ),
    Table(
        "outbox",
        (
            "id",
            "session_id",
            "channel",
            "account",
            "chat_id",
            "payload",
            "state",
            "attempts",
            "next_attempt_at",
            "error",
            "platform_ids",
            "delivery_state",
            "created_at",
            "sent_at",
            "claimed_by",
            "claimed_until",
        ),
        "id",
    ),
    Table(
        "outbox_platform_ids",
        ("channel", "account", "platform_id", "outbox_id"),
        "channel, account, platform_id",
    ),
    Table(
        "attachments",
        (
            "id",
            "session_id",
            "name",
            "content_type",
            "size",
            "state",
            "source",
            "message_key",
            "media_ref",
            "error",
            "created_at",
        ),
        "id",
    ),
    Table("leases", ("owner", "expires_at"), "owner"),
)
HEADS = Table("sessions", ("session_id", "head_id"), "session_id")
LEASES = next(table for table in TABLES if table.name == "leases")


class TableWriter(Protocol):
    """The target's tables inside ``TableAccess.copying``."""

    async def table_count(self, table: Table) -> int: ...

    async def table_insert(self, table: Table, rows: list[Row]) -> None: ...

    async def set_heads(self, heads: list[Row]) -> None: ...

    async def clear_tables(self) -> None: ...

    async def after_copy(self) -> None: ...


class TableAccess(Protocol):
    """Raw rows of a backend's tables, for copying only (not part of ``Store``)."""

    async def table_count(self, table: Table) -> int: ...

    async def table_page(self, table: Table, offset: int, limit: int) -> list[Row]: ...

    async def copying(self, fn: Callable[[TableWriter], Awaitable[T]]) -> T:
        """``fn`` on the tables to copy into. PostgreSQL runs all of it in one transaction on
        one connection, committed only if ``fn`` returns; SQLite gives ``fn`` the store."""
        ...


class TargetNotEmpty(Exception):
    """The target holds rows already; ``counts`` says where."""

    def __init__(self, counts: dict[str, int]) -> None:
        where = ", ".join(f"{name} {count}" for name, count in counts.items() if count)
        super().__init__(f"the target store is not empty ({where})")
        self.counts = counts


class CountMismatch(Exception):
    """After the copy, a table of the target does not hold what the source did."""


async def lease_held_until(store: TableAccess, now: float) -> float | None:
    """The latest end of a lease still running at ``now``: a gateway process works on the store
    (or was killed less than a lease ago, and its turns are not taken over yet). None: none."""
    live: list[float] = []
    offset = 0
    while rows := await store.table_page(LEASES, offset, PAGE):
        live += [float(expires) for _, expires in rows if float(expires) >= now]
        offset += len(rows)
    return max(live, default=None)


async def counts(store: TableAccess | TableWriter) -> dict[str, int]:
    """Rows per table."""
    return {table.name: await store.table_count(table) for table in TABLES}


async def copy_store(
    source: TableAccess,
    target: TableAccess,
    *,
    replace: bool = False,
    progress: Callable[[str, int], None] = lambda table, rows: None,
) -> dict[str, int]:
    """Copy every row of ``source`` into ``target``; the rows copied per table.

    Refuses (TargetNotEmpty) a target holding rows unless ``replace``, which empties it first.
    Raises CountMismatch if a table's count differs afterwards. All of it is one
    ``target.copying`` call: on PostgreSQL a failure, this check's included, rolls back the
    emptying and every row written.
    """

    async def copy(into: TableWriter) -> dict[str, int]:
        return await _copy_all(source, into, replace=replace, progress=progress)

    return await target.copying(copy)


async def _copy_all(
    source: TableAccess,
    target: TableWriter,
    *,
    replace: bool,
    progress: Callable[[str, int], None],
) -> dict[str, int]:
    existing = await counts(target)
    if any(existing.values()):
        if not replace:
            raise TargetNotEmpty(existing)
        await target.clear_tables()
    expected = await counts(source)
    for table in TABLES:
        await _copy_table(source, target, table, progress)
    await _copy_heads(source, target)
    await target.after_copy()
    found = await counts(target)
    if found != expected:
        differ = [
            f"{name}: {expected[name]} -> {found[name]}"
            for name in expected
            if expected[name] != found[name]
        ]
        raise CountMismatch("row counts differ after the copy: " + "; ".join(differ))
    return expected


async def _copy_table(
    source: TableAccess, target: TableWriter, table: Table, progress: Callable[[str, int], None]
) -> None:
    offset = 0
    while rows := await source.table_page(table, offset, PAGE):
        await target.table_insert(table, rows)
        offset += len(rows)
        progress(table.name, offset)
        if len(rows) < PAGE:
            break


async def _copy_heads(source: TableAccess, target: TableWriter) -> None:
    offset = 0
    while rows := await source.table_page(HEADS, offset, PAGE):
        await target.set_heads([row for row in rows if row[1] is not None])
        offset += len(rows)
        if len(rows) < PAGE:
            break
