"""The background purge: expired dedup keys and finished pipeline rows go, the rest stays."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.e2e.gateway_proc import eventually
from webhook_bot_gateway.gateway._media.files import attachment_path
from webhook_bot_gateway.gateway._pipeline._purge import Purger, Retention
from webhook_bot_gateway.store import OutboxIn, SQLiteStore

from .pipeline_helpers import FakeClock, add_inbox, inbound, rows

HOUR = 3600.0


async def test_purger_deletes_expired_keys_and_old_finished_rows_only(tmp_path: Path) -> None:
    db = tmp_path / "gateway.db"
    clock = FakeClock()
    async with SQLiteStore(db, dedup_ttl_hours=1, clock=clock) as store:
        await store.claim(["old-key"])
        [sid] = await add_inbox(store, inbound("hi", n=1))
        [row] = await store.pending_inbox(sid)
        async with store.turn(sid) as turn:
            turn.complete_inbox([row.id])
        item = await store.enqueue_outbox(OutboxIn(sid, "telegram", "support", "42", {"t": 1}))
        await store.outbox_sent(item.id, ["1"])
        pending = await store.enqueue_outbox(OutboxIn(sid, "telegram", "support", "42", {"t": 2}))
        clock.now += 2 * HOUR
        await store.claim(["new-key"])
        purger = Purger(store, interval=HOUR, keep_seconds=HOUR)
        assert await purger.purge_once() == (1, 2)
        assert await purger.purge_once() == (0, 0)
    assert rows(db, "SELECT key FROM processed_messages") == [("new-key",)]
    assert rows(db, "SELECT count(*) FROM inbox") == [(0,)]
    assert rows(db, "SELECT id FROM outbox") == [(pending.id,)]  # unsent rows are never purged


async def test_purger_run_purges_at_once_and_stops_when_told(tmp_path: Path) -> None:
    db = tmp_path / "gateway.db"
    clock = FakeClock()
    async with SQLiteStore(db, dedup_ttl_hours=1, clock=clock) as store:
        await store.claim(["old-key"])
        clock.now += 2 * HOUR
        purger = Purger(store, interval=HOUR, keep_seconds=HOUR)
        task = asyncio.create_task(purger.run())
        try:
            for _ in range(500):  # bounded: the first purge runs at once, not after an hour
                if rows(db, "SELECT count(*) FROM processed_messages") == [(0,)]:
                    break
                await asyncio.sleep(0.01)
            assert rows(db, "SELECT count(*) FROM processed_messages") == [(0,)]
        finally:
            purger.stop()
            await asyncio.wait_for(task, 5)  # stop() ends the hour's wait at once


DAY = 86400.0


async def test_retention_deletes_old_rows_then_their_files_and_keeps_recent_ones(
    tmp_path: Path,
) -> None:
    db, root = tmp_path / "gateway.db", tmp_path / "media"
    clock = FakeClock()
    async with SQLiteStore(db, clock=clock) as store:
        sid = (await store.create_session("telegram", "support", "42", "triage")).session_id
        old = await _file(store, root, sid, b"old file")
        await store.append_message(sid, "user", "old text")
        clock.now += 10 * DAY
        new = await _file(store, root, sid, b"new file")
        await store.append_message(sid, "user", "new text")
        purger = Purger(store, interval=HOUR, keep_seconds=HOUR, retention=Retention(7 * DAY, root))
        purged = await purger.retain_once()
    assert purged is not None
    assert purged.attachments == ((sid, old),)
    assert not attachment_path(root, sid, old).exists()
    assert attachment_path(root, sid, new).read_bytes() == b"new file"
    assert rows(db, "SELECT text FROM messages") == [("new text",)]


async def test_without_retention_days_history_is_kept_forever(tmp_path: Path) -> None:
    db = tmp_path / "gateway.db"
    clock = FakeClock()
    async with SQLiteStore(db, clock=clock) as store:
        sid = (await store.create_session("telegram", "support", "42", "triage")).session_id
        await store.append_message(sid, "user", "old text")
        clock.now += 3650 * DAY
        purger = Purger(store, interval=HOUR, keep_seconds=HOUR)
        assert await purger.retain_once() is None
        await purger.purge_once()
    assert rows(db, "SELECT text FROM messages") == [("old text",)]


async def test_purger_run_applies_retention_at_start(tmp_path: Path) -> None:
    db = tmp_path / "gateway.db"
    clock = FakeClock()
    async with SQLiteStore(db, clock=clock) as store:
        sid = (await store.create_session("telegram", "support", "42", "triage")).session_id
        await store.append_message(sid, "user", "old text")
        clock.now += 10 * DAY
        retention = Retention(7 * DAY, tmp_path / "media")
        purger = Purger(store, interval=HOUR, keep_seconds=HOUR, retention=retention)
        task = asyncio.create_task(purger.run())
        try:
            for _ in range(500):  # bounded: the first pass runs at once, not after a day
                if rows(db, "SELECT count(*) FROM messages") == [(0,)]:
                    break
                await asyncio.sleep(0.01)
            assert rows(db, "SELECT count(*) FROM messages") == [(0,)]
        finally:
            purger.stop()
            await asyncio.wait_for(task, 5)


def _block(path: Path) -> None:
    """Make ``path`` impossible to unlink, for root too: a folder with a file in it takes its
    place (unlink then fails with IsADirectoryError, as it fails on an immutable file)."""
    path.unlink()
    path.mkdir()
    (path / "inside").write_bytes(b"x")


def _unblock(path: Path) -> None:
    shutil.rmtree(path)
    path.write_bytes(b"old file")


async def test_retention_logs_a_file_it_cannot_remove_and_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db, root = tmp_path / "gateway.db", tmp_path / "media"
    clock = FakeClock()
    async with SQLiteStore(db, clock=clock) as store:
        sid = (await store.create_session("telegram", "support", "42", "triage")).session_id
        stuck, other = await _file(store, root, sid, b"one"), await _file(store, root, sid, b"two")
        _block(attachment_path(root, sid, stuck))
        clock.now += 10 * DAY
        purger = Purger(store, interval=HOUR, keep_seconds=HOUR, retention=Retention(7 * DAY, root))
        with caplog.at_level(logging.WARNING, logger="gateway.purge"):
            purged = await purger.retain_once()  # raised IsADirectoryError: the task died
        assert await purger.purge_once() == (0, 0)  # and the dedup purge goes on
    assert purged is not None
    assert set(purged.attachments) == {(sid, stuck), (sid, other)}
    assert not attachment_path(root, sid, other).exists()
    assert purger.files_left == (attachment_path(root, sid, stuck),)
    assert rows(db, "SELECT count(*) FROM attachments") == [(0,)]  # rows first, as always
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert stuck in warning.getMessage()
    assert "a.pdf" not in warning.getMessage()


async def test_a_file_one_retention_pass_left_is_removed_by_the_next(tmp_path: Path) -> None:
    db, root = tmp_path / "gateway.db", tmp_path / "media"
    clock = FakeClock()
    async with SQLiteStore(db, clock=clock) as store:
        sid = (await store.create_session("telegram", "support", "42", "triage")).session_id
        stuck = await _file(store, root, sid, b"one")
        path = attachment_path(root, sid, stuck)
        _block(path)
        clock.now += 10 * DAY
        purger = Purger(store, interval=HOUR, keep_seconds=HOUR, retention=Retention(7 * DAY, root))
        await purger.retain_once()
        _unblock(path)
        await purger.retain_once()
    assert not path.exists()
    assert purger.files_left == ()


async def _file(store: SQLiteStore, root: Path, sid: str, content: bytes) -> str:
    made = await store.create_attachment(sid, name="a.pdf", content_type="x/y", source="upload")
    path = attachment_path(root, sid, made.id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return made.id


def _aged(path: Path, content: bytes = b"x", seconds: float = 2 * HOUR) -> Path:
    """A file written ``seconds`` ago (its mtime), its folder made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    then = time.time() - seconds
    os.utime(path, (then, then))
    return path


async def test_retention_removes_old_files_no_row_names_as_a_crash_leaves_them(
    tmp_path: Path,
) -> None:
    """A stop or a crash between the rows' commit and the files' removal leaves files no row
    names; a later pass, of a new process, finds and removes those older than an hour."""
    db, root = tmp_path / "gateway.db", tmp_path / "media"
    async with SQLiteStore(db, clock=FakeClock()) as store:
        sid = (await store.create_session("telegram", "support", "42", "triage")).session_id
        kept = attachment_path(root, sid, await _file(store, root, sid, b"named"))
        _aged(kept)  # old, but a row names it
        orphan = _aged(attachment_path(root, sid, "a" * 32))
        fresh = attachment_path(root, sid, "b" * 32)  # an upload whose row comes next
        fresh.write_bytes(b"new")
        erased = _aged(attachment_path(root, "telegram-support-7", "c" * 32))  # session gone
        partial = _aged(root / sid / ".upload.part")
        foreign = _aged(root / sid / "notes.txt")
        purger = Purger(store, interval=HOUR, keep_seconds=HOUR, retention=Retention(7 * DAY, root))
        purged = await purger.retain_once()
    assert purged is not None
    assert purged.attachments == ()
    assert not orphan.exists()
    assert not erased.exists()
    assert not erased.parent.exists()
    assert kept.read_bytes() == b"x"
    assert fresh.exists()
    assert partial.exists()
    assert foreign.exists()
    assert purger.files_left == ()


async def test_a_file_no_row_names_that_cannot_be_removed_is_in_files_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db, root = tmp_path / "gateway.db", tmp_path / "media"
    async with SQLiteStore(db, clock=FakeClock()) as store:
        sid = (await store.create_session("telegram", "support", "42", "triage")).session_id
        stuck = _aged(attachment_path(root, sid, "d" * 32))
        _block(stuck)
        os.utime(stuck, (time.time() - 2 * HOUR,) * 2)
        purger = Purger(store, interval=HOUR, keep_seconds=HOUR, retention=Retention(7 * DAY, root))
        with caplog.at_level(logging.WARNING, logger="gateway.media"):
            await purger.retain_once()
        assert purger.files_left == (stuck,)
        _unblock(stuck)
        os.utime(stuck, (time.time() - 2 * HOUR,) * 2)
        await purger.retain_once()
    assert not stuck.exists()
    assert purger.files_left == ()
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "d" * 32 in warning.getMessage()


async def test_without_retention_the_daily_pass_still_sweeps_files_no_row_names(
    tmp_path: Path,
) -> None:
    """An erasure commits its rows, then removes the session's folder: a crash in between left
    the user's files for ever where no retention runs. The daily pass sweeps them anyway."""
    db, root = tmp_path / "gateway.db", tmp_path / "media"
    async with SQLiteStore(db, clock=FakeClock()) as store:
        sid = (await store.create_session("telegram", "support", "42", "triage")).session_id
        kept = _aged(attachment_path(root, sid, await _file(store, root, sid, b"named")))
        erased = _aged(attachment_path(root, "web-erased", "e" * 32))
        purger = Purger(store, interval=HOUR, keep_seconds=HOUR, media_root=root)
        task = asyncio.create_task(purger.run())
        try:
            await eventually(lambda: not erased.exists(), "the sweep of the erased folder")
        finally:
            purger.stop()
            await asyncio.wait_for(task, 5)
    assert not erased.parent.exists()
    assert kept.exists()
    assert rows(db, "SELECT count(*) FROM attachments") == [(1,)]
