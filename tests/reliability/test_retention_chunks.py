"""Retention of a big old history on a SQLite file: every old message goes, the branches of a
live session stay whole, and a writer keeps committing between the chunks (the purge never
holds the write lock for the whole pass)."""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
from contextlib import closing
from pathlib import Path

from webhook_bot_gateway.gateway._pipeline._purge import CHUNK
from webhook_bot_gateway.store import SQLiteStore

from .scale import pick

DAY = 86400.0
START = 1_800_000_000.0
OLD_MESSAGES = pick(20_000, 1_000_000)
SESSIONS = 100


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def fill_old_history(db: Path) -> None:
    """``OLD_MESSAGES`` messages in ``SESSIONS`` chains, all at START, written behind the store."""
    conn = sqlite3.connect(db)
    with conn:
        conn.executemany(
            "INSERT INTO sessions (session_id, channel, account, chat_id, active_agent,"
            " created_at, updated_at) VALUES (?, 'telegram', 'support', ?, 'triage', ?, ?)",
            [(f"telegram-support-{n}", str(n), START, START) for n in range(SESSIONS)],
        )
        per_session = OLD_MESSAGES // SESSIONS
        for n in range(SESSIONS):
            conn.executemany(
                "INSERT INTO messages (id, session_id, parent_id, role, text, created_at)"
                " VALUES (?, ?, ?, 'user', 'old text', ?)",
                [
                    (base + i, f"telegram-support-{n}", base + i - 1 if i else None, START)
                    for base in [n * per_session + 1]
                    for i in range(per_session)
                ],
            )
        conn.execute(
            "UPDATE sessions SET head_id = (SELECT max(id) FROM messages AS m"
            " WHERE m.session_id = sessions.session_id)"
        )
    conn.close()


async def test_retention_of_a_big_history_lets_writes_through_between_chunks(
    tmp_path: Path,
) -> None:
    db, clock = tmp_path / "gateway.db", Clock()
    async with SQLiteStore(db, clock=clock):
        pass  # the schema
    await asyncio.to_thread(fill_old_history, db)
    clock.now += 10 * DAY
    loop = asyncio.get_running_loop()
    waits: list[float] = []
    stop = asyncio.Event()
    async with SQLiteStore(db, clock=clock) as store:
        live = (await store.create_session("telegram", "support", "live", "triage")).session_id

        async def write_until_stopped() -> None:
            while not stop.is_set():
                began = loop.time()
                await store.append_message(live, "user", "a new message")
                waits.append(loop.time() - began)

        writer = asyncio.create_task(write_until_stopped())
        began = loop.time()
        purged = await store.purge_history(7 * DAY, CHUNK)
        seconds = loop.time() - began
        stop.set()
        await writer
        kept = await store.all_messages(live)
        branch = await store.get_branch(live)

    chunks = OLD_MESSAGES // CHUNK
    print(
        f"\nretention: {purged.counts['messages']} old messages in {seconds:.2f} s"
        f" ({chunks} chunks of {CHUNK}); {len(waits)} writes meanwhile, write wait median"
        f" {statistics.median(waits) * 1000:.1f} ms, max {max(waits) * 1000:.1f} ms"
    )
    assert purged.counts["messages"] == OLD_MESSAGES
    assert purged.counts["sessions"] == SESSIONS  # left empty: deleted
    assert len(waits) >= chunks // 2  # the writer got in between the chunks, not after them
    assert [m.id for m in branch] == [m.id for m in kept]  # the live chain is whole
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchone() == (len(kept),)
