"""Where attachment files live (``gateway._media.files``): the pure functions, on tables."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from webhook_bot_gateway.gateway._media.files import (
    MAX_NAME,
    PART_GRACE,
    attachment_path,
    clean_name,
    remove_partial_files,
    session_dir,
)
from webhook_bot_gateway.store import InvalidSessionId

ROOT = Path("/srv/media")
SID = "web-0b9d6a1e-2f4c-4c1e-9a7b-3c5d7e9f1a2b"
HEX = "0123456789abcdef" * 2


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("report.pdf", "report.pdf"),
        ("résumé final.txt", "résumé final.txt"),
        ("../etc/passwd", "passwd"),
        ("../../etc/passwd", "passwd"),
        ("/etc/shadow", "shadow"),
        ("C:\\x\\..\\y.txt", "y.txt"),
        ("..\\..\\boot.ini", "boot.ini"),
        ("\\\\server\\share\\doc.txt", "doc.txt"),
        ("dir/", "file"),
        ("a\x00b.txt", "ab.txt"),
        ("line\nbreak\r.txt", "linebreak.txt"),
        ("tab\there\x1b[31m.txt", "tabhere[31m.txt"),
        ("del\x7f\x85.txt", "del.txt"),  # DEL and NEL are control characters too
        ("invoice\u202efdp.exe", "invoicefdp.exe"),  # RTL override: a format character, dropped
        ("zero\u200bwidth\ufeff.txt", "zerowidth.txt"),
        ("e\u0301te\u0301.txt", "été.txt"),  # combining marks composed (NFC)
        ("😀 party 🎉.png", "😀 party 🎉.png"),
        ("שלום.txt", "שלום.txt"),
        (".bashrc", "bashrc"),
        ("...hidden", "hidden"),
        ("  spaced out  ", "spaced out"),
        (".", "file"),
        ("..", "file"),
        ("....", "file"),
        ("", "file"),
        (None, "file"),
        ("\x00\x01\x02", "file"),
        ("x" * 1000, "x" * MAX_NAME),
        ("x" * (MAX_NAME - 1) + " tail", "x" * (MAX_NAME - 1)),  # no space left at the cut
        ("é" * 300, "é" * MAX_NAME),
        ("e\u0301" * 300, "é" * MAX_NAME),  # composed first, then cut: 255 whole letters
    ],
)
def test_clean_name_keeps_a_showable_last_part(raw: str | None, expected: str) -> None:
    assert clean_name(raw, "file") == expected


@pytest.mark.parametrize(
    "raw",
    [". ..", " . .. ", ".\t.hidden", ". .bashrc"],
    ids=["dot-space-dotdot", "spaced-dotdot", "dot-tab-hidden", "dot-space-hidden"],
)
def test_clean_name_leaves_no_leading_dot_behind_spaces(raw: str) -> None:
    name = clean_name(raw, "file")
    assert not name.startswith(".")
    assert name != ".."


def test_clean_name_falls_back_to_the_callers_name() -> None:
    assert clean_name("../", "photo.jpg") == "photo.jpg"


def test_attachment_path_is_the_id_under_the_session_folder() -> None:
    assert attachment_path(ROOT, SID, HEX) == ROOT / SID / HEX


@pytest.mark.parametrize(
    "attachment_id",
    [
        "",
        HEX[:31],
        HEX + "0",
        HEX.upper(),
        "g" * 32,
        "../" + HEX[3:],
        HEX[:31] + "/",
        HEX[:31] + "\x00",
        HEX[:31] + "\n",
        "0x" + HEX[2:],
        " " + HEX[1:],
        "０" * 32,  # fullwidth digits: int() would take them, the file system must not
    ],
)
def test_attachment_path_refuses_an_id_that_is_not_32_lowercase_hex(attachment_id: str) -> None:
    with pytest.raises(ValueError, match="32 lowercase hex"):
        attachment_path(ROOT, SID, attachment_id)


def test_session_dir_is_the_session_id_under_the_root() -> None:
    assert session_dir(ROOT, "telegram-support-1") == ROOT / "telegram-support-1"


@pytest.mark.parametrize(
    "session_id",
    ["", ".", "..", "../x", "a/b", "a\\b", "/etc", "a b", "a\x00", "a\n", "é", "x" * 129],
)
def test_session_dir_refuses_an_invalid_session_id(session_id: str) -> None:
    with pytest.raises(InvalidSessionId):
        session_dir(ROOT, session_id)
    with pytest.raises(InvalidSessionId):
        attachment_path(ROOT, session_id, HEX)


def _idle(path: Path, content: bytes, seconds: float = PART_GRACE + 60) -> Path:
    path.write_bytes(content)
    then = time.time() - seconds
    os.utime(path, (then, then))
    return path


def test_remove_partial_files_takes_only_idle_part_files(tmp_path: Path) -> None:
    folder = tmp_path / "web-1"
    folder.mkdir()
    _idle(folder / ".0123.ab12.part", b"cut")
    _idle(folder / ("0" * 32), b"kept")
    _idle(tmp_path / "notes.part", b"not in a session folder")
    assert remove_partial_files(tmp_path) == 1
    assert sorted(p.name for p in folder.iterdir()) == ["0" * 32]
    assert (tmp_path / "notes.part").exists()


def test_remove_partial_files_leaves_a_part_file_being_written(tmp_path: Path) -> None:
    """A rolling deploy starts a process beside one still writing an upload or a download to
    the same media root: the new one's start must not take the old one's file from under it."""
    folder = tmp_path / "web-1"
    folder.mkdir()
    live = folder / ".1234.cd34.part"
    live.write_bytes(b"being written")
    _idle(live, b"being written", seconds=PART_GRACE - 60)  # written within the grace
    assert remove_partial_files(tmp_path) == 0
    assert live.read_bytes() == b"being written"
