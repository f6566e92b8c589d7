"""Numbers the store cannot hold, given to the CLI: one ``error: ...`` line naming the option,
exit 1, no traceback, and no store opened (or created) for nothing."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from webhook_bot_gateway.gateway.cli import main

from .test_cli import create_store

BIG = str(2**63)


def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f'[store]\nurl = "sqlite:///{tmp_path}/gw.db"\n', encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["sessions", "list", "--offset", BIG], "offset"),
        (["sessions", "list", "--offset", "9" * 23], "offset"),
        (["sessions", "list", "--offset", "-1"], "offset"),
        (["sessions", "list", "--limit", BIG], "limit"),
        (["sessions", "list", "--limit", "0"], "limit"),
        (["quarantine", "list", "--offset", BIG], "offset"),
        (["quarantine", "list", "--limit", "-5"], "limit"),
        (["quarantine", "replay", BIG], "id"),
        (["quarantine", "replay", "9" * 23], "id"),
        (["quarantine", "replay", "0"], "id"),
        (["quarantine", "replay", "-1"], "id"),
    ],
)
def test_out_of_range_numbers_are_one_error_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], named: str
) -> None:
    out = io.StringIO()
    status = main(["--config", str(config(tmp_path)), *args], out=out)
    captured = capsys.readouterr()
    assert status == 1
    assert out.getvalue() == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ")
    assert named in lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert not (tmp_path / "gw.db").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["sessions", "list", "--offset", str(2**63 - 1), "--limit", "1000"],
        ["quarantine", "list", "--offset", str(2**63 - 1)],
        ["quarantine", "replay", str(2**63 - 1)],
    ],
)
def test_the_largest_numbers_the_store_holds_are_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    create_store(tmp_path / "gw.db")
    out = io.StringIO()
    status = main(["--config", str(config(tmp_path)), *args], out=out)
    if args[1] == "replay":
        assert (status, out.getvalue()) == (1, "")
        assert capsys.readouterr().err == f"error: no quarantined delivery {2**63 - 1}\n"
    else:
        assert status == 0
        assert '"total"' in out.getvalue() or '"quarantine": []' in out.getvalue()


@pytest.mark.parametrize("command", ["sessions", "quarantine"])
@pytest.mark.parametrize("limit", ["0", "1001", "99999999"])
def test_a_limit_out_of_range_names_the_one_range_a_page_may_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, limit: str
) -> None:
    """One range, whichever side is passed: a page holds 1 to 1000 rows (the store's bound)."""
    create_store(tmp_path / "gw.db")
    status = main(["--config", str(config(tmp_path)), command, "list", "--limit", limit])
    assert status == 1
    assert capsys.readouterr().err == f"error: --limit must be between 1 and 1000, got {limit}\n"
