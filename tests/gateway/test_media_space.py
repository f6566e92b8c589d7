"""The free-space floor of the media root, on the real disk: a floor above today's free space
refuses, a floor of 0 never does, and the warning is rate-limited on an injected clock."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from webhook_bot_gateway.gateway._media.space import WARN_EVERY, DiskFloor, free_bytes

GIB = 1024**3


def test_free_bytes_of_a_root_not_made_yet_is_its_disks() -> None:
    assert free_bytes(Path("/nonexistent/media/root")) > 0


def test_disk_floor_refuses_under_the_floor_and_never_when_it_is_zero(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    root = tmp_path / "media"
    assert not DiskFloor(root, free + GIB, refused="x").has_room(0)
    assert DiskFloor(root, 0, refused="x").has_room(10 * free)


def test_disk_floor_warns_again_only_after_warn_every_counting_the_refusals_between(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = 0.0
    beyond = shutil.disk_usage(tmp_path).free + GIB
    floor = DiskFloor(tmp_path / "media", beyond, refused="uploads are refused", clock=lambda: now)
    with caplog.at_level(logging.WARNING, logger="gateway.media"):
        for _ in range(3):
            assert not floor.has_room(0)
        now = WARN_EVERY - 1
        assert not floor.has_room(0)
        now = WARN_EVERY
        assert not floor.has_room(0)
    first, second = (r.getMessage() for r in caplog.records)
    assert "media.min_free_bytes" in first
    assert "uploads are refused" in first
    assert "(1 refused since" in first
    assert "(4 refused since" in second
