"""Numbers out of range, given to the CLI: one ``error: ...`` line naming the option (or, for a
quarantine id no row can have, the admin API's ``no quarantined delivery ID``), exit 1, no
traceback, and no store opened (or created) for nothing."""

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
        (["quarantine", "replay", BIG], f"no quarantined delivery {BIG}"),
        (["quarantine", "replay", "9" * 23], f"no quarantined delivery {'9' * 23}"),
        (["quarantine", "replay", "0"], "no quarantined delivery 0"),
        (["quarantine", "replay", "-1"], "no quarantined delivery -1"),
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
        ["sessions", "list", "--offset", str(2**63 - 1), "--limit", "500"],
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
@pytest.mark.parametrize("limit", ["0", "501", "1000", "99999999"])
def test_a_limit_out_of_range_names_the_one_range_a_page_may_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, limit: str
) -> None:
    """One range, whichever side is passed: a page holds 1 to 500 rows, as in the admin API
    (the store's own bound, 1000, is wider: 1000 was accepted here once, and refused there)."""
    create_store(tmp_path / "gw.db")
    status = main(["--config", str(config(tmp_path)), command, "list", "--limit", limit])
    assert status == 1
    assert capsys.readouterr().err == f"error: --limit must be between 1 and 500, got {limit}\n"
