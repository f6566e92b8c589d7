"""Erasure (``delete_session``): no table holds the session's ids or texts afterwards (dedup keys
excepted, as documented), on every backend; on a SQLite file not even the file's bytes do."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterable
from pathlib import Path

import pytest

from webhook_bot_gateway.channels.web import web_dedup_key
from webhook_bot_gateway.store import (
    InboxIn,
    NewMessage,
    OutboxIn,
    QuarantineIn,
    SQLiteStore,
    Store,
)
from webhook_bot_gateway.store.sqlite import _conn

from .conftest import FakeClock, Raw
from .pipeline import ACCOUNT, CHANNEL, inbox_of, sid

CHAT, OTHER_CHAT = "4915550001234", "4915550009999"
SID, OTHER = sid(CHAT), sid(OTHER_CHAT)
SECRETS = ("erase-me user text", "erase-me answer", "erase-me operator note", "erase-me.pdf")
KEPT = "keep-me text of another chat"
DEDUP = "processed_messages"  # keys hold no content and keep a redelivery out (docs/data.md)


async def _fill(store: Store) -> list[str]:
    """A session with a row in every table that can name it, and another one; the texts and
    ids that must be gone after erasing the first."""
    pending, done = await inbox_of(
        store,
        InboxIn(CHANNEL, ACCOUNT, CHAT, "wa:erase-1", {"text": SECRETS[0], "chat_id": CHAT}),
        InboxIn(CHANNEL, ACCOUNT, CHAT, "wa:erase-2", {"text": SECRETS[0], "chat_id": CHAT}),
    )
    await inbox_of(store, InboxIn(CHANNEL, ACCOUNT, OTHER_CHAT, "wa:keep", {"text": KEPT}))
    async with store.turn(SID, inbox_ids=[done]) as turn:
        turn.append(NewMessage("user", SECRETS[0]))
        turn.append(NewMessage("assistant", SECRETS[1]))
        turn.add_outbox(OutboxIn(SID, CHANNEL, ACCOUNT, CHAT, {"text": SECRETS[1]}))
        turn.complete_inbox([done])
    [sent] = await store.list_outbox(SID)
    await store.outbox_sent(sent.id, ["wamid.erase-platform-id"])
    await store.record_event(SID, "note", {"text": SECRETS[2]})
    made = await store.create_attachment(SID, name=SECRETS[3], content_type="x/y", source="upload")
    await store.append_message(OTHER, "user", KEPT)
    body = f'{{"entry": [{{"wa_id": "{CHAT}", "text": "{SECRETS[0]}"}}]}}'.encode()
    near = f'{{"wa_id": "{CHAT}5", "text": "{KEPT}"}}'.encode()  # a longer id: not this chat
    await store.ingest(
        [QuarantineIn(CHANNEL, None, body, "bad"), QuarantineIn(CHANNEL, None, near, "bad")]
    )
    del pending
    return [SID, made.id, "wamid.erase-platform-id", *SECRETS]


async def _tables(raw: Raw) -> list[str]:
    if raw.backend.is_sqlite:
        found = await raw.rows("SELECT name FROM sqlite_master WHERE type = 'table'")
    else:
        found = await raw.rows(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
        )
    return sorted(row[0] for row in found)


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


async def _where_found(raw: Raw, needles: list[str]) -> dict[str, list[str]]:
    """For each needle, the tables (dedup excepted) where some column of some row holds it."""
    found: dict[str, list[str]] = {needle: [] for needle in needles}
    for table in await _tables(raw):
        if table == DEDUP:
            continue
        cells = " ".join(_text(v) for row in await raw.rows(f"SELECT * FROM {table}") for v in row)
        for needle in needles:
            if needle in cells:
                found[needle].append(table)
    return found


async def test_erasing_a_session_leaves_no_row_naming_it_or_holding_its_texts(
    store: Store, raw: Raw
) -> None:
    needles = await _fill(store)
    before = await _where_found(raw, [*needles, KEPT])
    assert all(before[needle] for needle in needles)  # the search does see every one of them

    assert await store.delete_session(SID)

    after = await _where_found(raw, [*needles, KEPT])
    assert {needle: after[needle] for needle in needles} == {needle: [] for needle in needles}
    assert set(after[KEPT]) >= {"messages", "inbox", "quarantine"}  # the other chat is intact
    assert await raw.count(DEDUP) == 3  # the keys stay: a redelivery is not taken as new
    assert not await store.delete_session(SID)


# A web chat id with LIKE's wildcard in it: ``_`` must match only itself (the decoy's ``X``).
WEB_CHAT = "0f8fe7a2_c6b8"


async def test_erasing_a_web_session_forgets_its_client_ids_and_only_those(store: Store) -> None:
    """The web client, not a platform, resends, and a session begun anew under the same id
    uses "c1" again: its message must not be taken for a duplicate (docs/data.md)."""
    web = await store.create_session("web", "", WEB_CHAT, "triage")
    mine = web_dedup_key(WEB_CHAT, "c1")
    others = [
        web_dedup_key(WEB_CHAT + "-2", "c1"),  # a longer chat id
        web_dedup_key(WEB_CHAT.replace("_", "X"), "c1"),
        web_dedup_key("x" + WEB_CHAT, "c1"),
        "whatsapp:wamid.1",
    ]
    assert await store.claim([mine, *others]) == {mine, *others}

    assert await store.delete_session(web.session_id)

    assert await store.claim([mine, *others]) == {mine}  # new again; the others still live


def files_holding(folder: Path, texts: Iterable[str]) -> dict[str, list[str]]:
    """For each file under ``folder`` (recursively) that holds some of ``texts``: which ones."""
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        content = path.read_bytes()
        held = [text for text in texts if text.encode() in content]
        if held:
            found[str(path.relative_to(folder))] = held
    return found


async def test_erasing_on_a_sqlite_file_leaves_no_copy_in_its_files(
    db_path: Path, clock: FakeClock
) -> None:
    """SQLite backend: deleted content is zeroed (secure_delete) and the WAL emptied."""
    async with SQLiteStore(db_path, clock=clock) as store:
        await _fill(store)
    # The close checkpointed everything into the database file itself, as time would.
    assert files_holding(db_path.parent, [SECRETS[0]]) == {"store.db": [SECRETS[0]]}
    async with SQLiteStore(db_path, clock=clock) as store:
        await store.append_message(OTHER, "user", "a write after the restart")

        assert await store.delete_session(SID)

        assert files_holding(db_path.parent, [SID, *SECRETS]) == {}
        assert files_holding(db_path.parent, [KEPT]) == {"store.db": [KEPT]}


async def test_erasing_while_another_process_reads_the_file_does_not_stall_the_store(
    db_path: Path,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SQLite backend: emptying the WAL waits for no reader (a backup job, an open sqlite3
    shell): the store's one writer would hold every ack behind it. The busy timeout is made
    an hour here, so a wait for the reader would not end; the next erasure empties the WAL."""
    monkeypatch.setattr(_conn, "BUSY_TIMEOUT_MS", 3_600_000)
    async with SQLiteStore(db_path, clock=clock) as store:
        await _fill(store)
        reader = sqlite3.connect(db_path)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM messages").fetchone()  # holds its snapshot
        try:
            async with asyncio.timeout(60):  # a guard only: without the fix, an hour
                assert await store.delete_session(SID)
                await store.append_message(OTHER, "user", "a write while the reader reads")
        finally:
            reader.rollback()
            reader.close()
        assert "the WAL could not be emptied" in caplog.text
        assert await store.delete_session(OTHER)
        assert files_holding(db_path.parent, [SID, *SECRETS]) == {}


async def test_erasing_a_quarantined_body_on_a_sqlite_file_leaves_no_copy_in_its_files(
    db_path: Path, clock: FakeClock
) -> None:
    """SQLite backend: a chat with no session, its body erased by id, as a session is."""
    body = f'{{"wa_id": "{CHAT}", "text": "{SECRETS[0]}"}}'.encode()
    async with SQLiteStore(db_path, clock=clock) as store:
        [result] = await store.ingest([QuarantineIn(CHANNEL, None, body, "bad")])
    assert files_holding(db_path.parent, [SECRETS[0]]) == {"store.db": [SECRETS[0]]}
    async with SQLiteStore(db_path, clock=clock) as store:
        await store.ingest([QuarantineIn(CHANNEL, None, b"a write after the restart", "bad")])
        assert result.quarantine_id is not None

        assert await store.delete_quarantine(result.quarantine_id)

        assert files_holding(db_path.parent, [SECRETS[0]]) == {}
