"""No publicly known secret by default: the admin token file, demo secrets and short admin tokens
refused wherever strangers may reach the server (docs/security.md#defaults)."""

from __future__ import annotations

import io
import logging
import os
import stat
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webhook_bot_gateway.gateway._admin_token import (
    KNOWN_DEMO_VALUES,
    admin_token_source,
    is_loopback,
    read_token_file,
)
from webhook_bot_gateway.gateway.app import sandbox_banner
from webhook_bot_gateway.gateway.cli import main
from webhook_bot_gateway.gateway.config import (
    load_settings,
    parse_settings,
    with_admin_token_file,
)
from webhook_bot_gateway.gateway.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config.example.toml"
STRONG = "x7Vq-3nLw_9TzpA2kR5mY8sD1fG4hJ6b"  # 32 characters nobody published
# Every secret of config.example.toml set from the environment to a value of one's own.
OWN_SECRETS = {
    "GATEWAY_ADMIN_TOKEN": STRONG,
    "TELEGRAM_SECRET_TOKEN": STRONG + "-tg",
    "WHATSAPP_APP_SECRET": STRONG + "-app",
    "WHATSAPP_VERIFY_TOKEN": STRONG + "-verify",
}
# ... and the platforms' real APIs, as going live needs (the sandbox's are refused without it).
LIVE = OWN_SECRETS | {
    "TELEGRAM_API_BASE_URL": "https://api.telegram.org",
    "WHATSAPP_GRAPH_BASE_URL": "https://graph.facebook.com",
}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory, as ``make run`` in a fresh clone."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that would leave a new file readable by everyone."""
    before = os.umask(0)
    yield
    os.umask(before)


def example(**sections: dict[str, Any]) -> dict[str, Any]:
    raw = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return raw


def example_on(host: str, **sections: dict[str, Any]) -> dict[str, Any]:
    return example(server={"host": host}, **sections)


def refusal(raw: dict[str, Any], environ: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_settings(raw, environ)
    return caught.value


# (1) config.example.toml: no public admin token; a random one in data/admin-token


def test_the_example_names_no_public_admin_token() -> None:
    admin = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))["admin"]
    assert admin == {"token": "${GATEWAY_ADMIN_TOKEN:-}", "token_file": "data/admin-token"}
    assert parse_settings(example(), {}).admin.token.get_secret_value() == ""


def made_at_start() -> str:
    """The admin token ``gateway serve`` has once it started (``app.announce_start``)."""
    settings = with_admin_token_file(load_settings(EXAMPLE, {}), make=True)
    return settings.admin.token.get_secret_value()


def test_loading_the_config_makes_no_token_file(workdir: Path) -> None:
    """Every command loads it, serve too: the file is made only once serve has started, so a
    start that fails (a port in use, a store down) does not take the token's one print away."""
    assert load_settings(EXAMPLE, {}).admin.token.get_secret_value() == ""
    assert list(workdir.iterdir()) == []


def test_serve_that_could_not_make_the_token_file_fails_before_it_starts(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The file is made once every part started: failing there left the store and the
    channels open, and the log full of asyncio tracebacks. So it is checked before."""
    (workdir / "data").write_text("a file where the folder goes\n", encoding="utf-8")
    monkeypatch.setenv("GATEWAY_PORT", "0")
    monkeypatch.delenv("GATEWAY_ADMIN_TOKEN", raising=False)
    assert main(["serve", "--config", str(EXAMPLE)], out=io.StringIO()) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"error: {EXAMPLE}: admin.token_file: cannot create data/admin-token: data is"
        " not a folder this user can write\n"
    )
    assert not (workdir / "gateway.db").exists()


def test_check_config_refuses_a_token_file_serve_could_not_make(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """check-config says what serve would: the folder of the token file is a file."""
    (workdir / "data").write_text("a file where the folder goes\n", encoding="utf-8")
    monkeypatch.delenv("GATEWAY_ADMIN_TOKEN", raising=False)
    assert main(["check-config", "--config", str(EXAMPLE)], out=io.StringIO()) == 1
    assert capsys.readouterr().err == (
        f"error: {EXAMPLE}: admin.token_file: cannot create data/admin-token: data is"
        " not a folder this user can write\n"
    )
    assert sorted(p.name for p in workdir.iterdir()) == ["data"]  # nothing written


def test_serve_that_cannot_create_in_a_folder_root_may_write_fails_before_it_starts(
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """/proc takes no new file, whatever ``os.access`` says of root's rights: serve tries to
    make one there before it starts (one error line, no asyncio traceback of a failed start)."""
    config = workdir / "gateway.toml"
    text = EXAMPLE.read_text(encoding="utf-8")
    config.write_text(text.replace('"data/admin-token"', '"/proc/gateway-admin-token"'))
    monkeypatch.setenv("GATEWAY_PORT", "0")
    monkeypatch.delenv("GATEWAY_ADMIN_TOKEN", raising=False)
    assert main(["serve", "--config", str(config)], out=io.StringIO()) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith(
        f"error: {config}: admin.token_file: cannot create /proc/gateway-admin-token: "
    )
    assert captured.err.count("\n") == 1
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert not (workdir / "gateway.db").exists()


def test_first_start_makes_a_private_random_token_and_prints_it_once(
    workdir: Path, open_umask: None, capsys: pytest.CaptureFixture[str]
) -> None:
    token = made_at_start()
    path = workdir / "data" / "admin-token"
    assert path.read_text(encoding="utf-8") == token + "\n"
    assert len(token) >= 43  # secrets.token_urlsafe(32)
    assert token.lower() not in KNOWN_DEMO_VALUES
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # even with umask 0
    first = capsys.readouterr()
    assert token not in first.out  # stdout carries the commands' output (JSON, summaries)
    assert token in first.err
    assert "data/admin-token" in first.err
    assert load_settings(EXAMPLE, {}).admin.token.get_secret_value() == token  # read
    assert made_at_start() == token  # kept
    assert token not in capsys.readouterr().err  # printed that once only
    assert sorted(p.name for p in path.parent.iterdir()) == ["admin-token"]  # no temporary left
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700  # data/ holds the store too


def test_two_fresh_installs_get_different_tokens(tmp_path: Path) -> None:
    one = read_token_file(tmp_path / "a" / "admin-token", io.StringIO())
    two = read_token_file(tmp_path / "b" / "admin-token", io.StringIO())
    assert one != two


def test_concurrent_first_starts_agree_on_one_token(tmp_path: Path) -> None:
    path = tmp_path / "data" / "admin-token"
    notices = [io.StringIO() for _ in range(8)]
    tokens: list[str] = []
    barrier = threading.Barrier(len(notices))

    def start(notice: io.StringIO) -> None:
        barrier.wait()
        tokens.append(read_token_file(path, notice))

    threads = [threading.Thread(target=start, args=(notice,)) for notice in notices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(tokens)) == 1
    assert tokens[0] == path.read_text(encoding="utf-8").strip()
    assert sum(tokens[0] in notice.getvalue() for notice in notices) == 1
    assert [p.name for p in path.parent.iterdir()] == ["admin-token"]


def test_the_environment_token_wins_and_no_file_is_made(workdir: Path) -> None:
    settings = load_settings(EXAMPLE, {"GATEWAY_ADMIN_TOKEN": STRONG})
    settings = with_admin_token_file(settings, make=True)  # as serve once started
    assert settings.admin.token.get_secret_value() == STRONG
    assert not (workdir / "data").exists()


# where to sign in: the start message names the token's source, never the token


def source(raw: dict[str, Any], environ: dict[str, str]) -> str | None:
    """What ``gateway serve`` says the admin token is (cli: ``admin_token_source``)."""
    settings = parse_settings(raw, environ)
    return admin_token_source(raw["admin"].get("token"), settings, environ)


def test_the_start_message_names_the_variable_the_token_came_from(workdir: Path) -> None:
    """`GATEWAY_ADMIN_TOKEN=... make run` with an older data/admin-token beside it: the banner
    sent people to the file, whose token the server did not take."""
    (workdir / "data").mkdir()
    (workdir / "data" / "admin-token").write_text("an-older-token-from-the-file\n")
    said = source(example(), {"GATEWAY_ADMIN_TOKEN": STRONG})
    assert said == "the admin token in $GATEWAY_ADMIN_TOKEN (admin.token)"
    banner = sandbox_banner(parse_settings(example(), {}), said)
    assert banner == (
        "Sandbox on: open http://127.0.0.1:8080/ and sign in with the admin token in"
        " $GATEWAY_ADMIN_TOKEN (admin.token) to play both sides."
    )


def test_the_start_message_names_the_key_of_a_token_written_in_the_config() -> None:
    said = source(example(admin={"token": STRONG}), {})
    assert said == "the admin token set as admin.token in the config file"
    said = source(example(admin={"token": "${MISSING:-" + STRONG + "}"}), {})
    assert said == "the admin token set as admin.token in the config file"  # the default's


def test_the_start_message_names_the_token_file_when_the_variable_is_unset_or_empty() -> None:
    for environ in ({}, {"GATEWAY_ADMIN_TOKEN": ""}):
        assert source(example(), environ) == "the admin token in data/admin-token"


def test_the_start_message_says_when_no_one_can_sign_in() -> None:
    raw = example(admin={"token": "", "token_file": ""})
    assert source(raw, {}) is None
    banner = sandbox_banner(parse_settings(raw, {}), None)
    assert "no one can sign in: admin.token and admin.token_file are empty" in banner


def test_an_existing_token_file_is_read_as_written(workdir: Path) -> None:
    (workdir / "data").mkdir()
    (workdir / "data" / "admin-token").write_text(f"  {STRONG}\n", encoding="utf-8")
    assert load_settings(EXAMPLE, {}).admin.token.get_secret_value() == STRONG


def test_an_empty_token_file_is_an_error_naming_the_key(workdir: Path) -> None:
    (workdir / "data").mkdir()
    (workdir / "data" / "admin-token").write_text("\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(EXAMPLE, {})
    assert caught.value.key == "admin.token_file"
    assert "empty" in caught.value.problem


def test_an_unreadable_token_file_is_an_error_naming_the_key(workdir: Path) -> None:
    (workdir / "data" / "admin-token").mkdir(parents=True)  # a directory, not a file
    with pytest.raises(ConfigError) as caught:
        load_settings(EXAMPLE, {})
    assert caught.value.key == "admin.token_file"


def test_no_token_and_no_token_file_keeps_the_admin_api_off(workdir: Path) -> None:
    path = workdir / "c.toml"
    path.write_text('[server]\nhost = "0.0.0.0"\n[admin]\ntoken = ""\n', encoding="utf-8")
    assert load_settings(path, {}).admin.token.get_secret_value() == ""
    assert list(workdir.iterdir()) == [path]


# (2) webhook secrets: demo values only with the sandbox on loopback, empty ones not exposed


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_demo_secrets_stay_allowed_for_the_sandbox_on_loopback(host: str) -> None:
    settings = parse_settings(example_on(host), {})
    assert settings.telegram.bots[0].secret_token.get_secret_value() == "demo-secret"
    assert settings.whatsapp.app_secret.get_secret_value() == "demo-app-secret"


@pytest.mark.parametrize(
    ("key", "variable"),
    [
        ("telegram.bots[0].secret_token", "TELEGRAM_SECRET_TOKEN"),
        ("whatsapp.app_secret", "WHATSAPP_APP_SECRET"),
        ("whatsapp.verify_token", "WHATSAPP_VERIFY_TOKEN"),
    ],
)
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.0.2.10", "gateway.example.com"])
def test_a_demo_webhook_secret_is_refused_off_loopback(host: str, key: str, variable: str) -> None:
    environ = {name: value for name, value in OWN_SECRETS.items() if name != variable}
    error = refusal(example_on(host), environ)
    assert error.key == key
    assert "publicly known demo value" in error.problem
    assert "not a loopback address" in error.problem
    assert "demo-" not in str(error)  # names the key, never the value


def test_a_demo_webhook_secret_is_refused_without_the_sandbox_even_on_loopback() -> None:
    # a tunnel or a reverse proxy brings real traffic to a loopback address
    environ = {k: v for k, v in OWN_SECRETS.items() if k != "WHATSAPP_APP_SECRET"}
    error = refusal(example(sandbox={"enabled": False}), environ)
    assert error.key == "whatsapp.app_secret"
    assert "sandbox" in error.problem


@pytest.mark.parametrize("value", sorted(KNOWN_DEMO_VALUES) + ["Change-Me", " demo-secret "])
def test_every_known_demo_value_is_refused_without_case_or_blanks(value: str) -> None:
    environ = OWN_SECRETS | {"TELEGRAM_SECRET_TOKEN": value}
    assert refusal(example_on("0.0.0.0"), environ).key == "telegram.bots[0].secret_token"


@pytest.mark.parametrize("key", ["app_secret", "verify_token"])
def test_an_empty_whatsapp_secret_is_refused_off_loopback(key: str) -> None:
    raw = example_on("0.0.0.0", whatsapp={key: ""})
    error = refusal(raw, OWN_SECRETS)
    assert error.key == f"whatsapp.{key}"
    assert "is empty" in error.problem


def test_empty_whatsapp_secrets_without_a_number_are_fine_off_loopback() -> None:
    raw = example_on("0.0.0.0", whatsapp={"app_secret": "", "verify_token": "", "numbers": []})
    settings = parse_settings(raw, OWN_SECRETS)
    assert settings.whatsapp.app_secret.get_secret_value() == ""


def test_own_secrets_are_accepted_off_loopback() -> None:
    settings = parse_settings(example_on("0.0.0.0", sandbox={"enabled": False}), LIVE)
    assert settings.admin.token.get_secret_value() == STRONG


# (3) the admin token off loopback: 16 characters at least, no demo value


@pytest.mark.parametrize("token", ["change-me", "CHANGEME", "password", "short-token-15c"])
def test_a_weak_admin_token_is_refused_off_loopback(token: str) -> None:
    error = refusal(example_on("0.0.0.0"), OWN_SECRETS | {"GATEWAY_ADMIN_TOKEN": token})
    assert error.key == "admin.token"
    assert token not in str(error)


def test_a_sixteen_character_admin_token_is_enough_off_loopback() -> None:
    environ = OWN_SECRETS | {"GATEWAY_ADMIN_TOKEN": "a" * 16}
    assert parse_settings(example_on("0.0.0.0"), environ).admin.token.get_secret_value()


def test_a_short_admin_token_stays_allowed_on_loopback() -> None:
    environ = LIVE | {"GATEWAY_ADMIN_TOKEN": "e2e-admin-token"}
    assert parse_settings(example(sandbox={"enabled": False}), environ).admin.token


def test_the_demo_admin_token_is_refused_without_the_sandbox_on_loopback() -> None:
    environ = OWN_SECRETS | {"GATEWAY_ADMIN_TOKEN": "change-me"}
    assert parse_settings(example(), environ).admin.token  # the sandbox on loopback: allowed
    assert refusal(example(sandbox={"enabled": False}), environ).key == "admin.token"


def test_a_short_token_in_the_token_file_is_refused_off_loopback(workdir: Path) -> None:
    (workdir / "data").mkdir()
    (workdir / "data" / "admin-token").write_text("tiny\n", encoding="utf-8")
    text = EXAMPLE.read_text(encoding="utf-8").replace('host = "127.0.0.1"', 'host = "0.0.0.0"')
    config = workdir / "c.toml"
    config.write_text(text, encoding="utf-8")
    environ = {k: v for k, v in OWN_SECRETS.items() if k != "GATEWAY_ADMIN_TOKEN"}
    with pytest.raises(ConfigError) as caught:
        load_settings(config, environ)
    assert caught.value.key == "admin.token_file"
    assert "tiny" not in str(caught.value)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("192.168.1.5", False),
        ("localhost.example.com", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
