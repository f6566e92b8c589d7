"""No publicly known secret by default (docs/security.md#defaults).

* ``admin.token_file``: with ``admin.token`` empty, the admin token is read from this file; a
  missing file is made with a random token (mode 0600) and the token is printed once, by
  ``gateway serve`` only, once it is bound and started (a failed start makes none, so the
  next start still prints it; check-config writes nothing).
* Published values (the demo secrets of config.example.toml and a few obvious ones) and empty
  webhook secrets are refused at load wherever strangers may reach the server; so are admin
  tokens shorter than ``MIN_ADMIN_TOKEN`` characters off loopback.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from webhook_bot_gateway.store import make_private_folders

from ._env import references, substitute
from .errors import ConfigError

if TYPE_CHECKING:
    from .config import Settings

# Compared without case and surrounding blanks. The first ones are config.example.toml's
# fallbacks (past and present): anyone who read the file knows them.
KNOWN_DEMO_VALUES = frozenset(
    {
        "change-me",
        "changeme",
        "change_me",
        "demo-secret",
        "demo-app-secret",
        "demo-verify-token",
        "demo-access-token",
        "demo-token",
        "secret",
        "password",
        "admin",
        "token",
        "test",
    }
)
MIN_ADMIN_TOKEN = 16  # characters, off loopback; a made token has 43


def is_loopback(host: str) -> bool:
    """``127.0.0.0/8``, ``::1`` or ``localhost``; a wildcard (``0.0.0.0``, ``::``, empty) is not."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_demo_value(value: str) -> bool:
    return value.strip().lower() in KNOWN_DEMO_VALUES


def _sandbox_only(settings: Settings) -> bool:
    """Demo secrets are fine only where the sandbox's own simulator is their one user."""
    return settings.sandbox.enabled and is_loopback(settings.server.host)


def _exposed(settings: Settings) -> str:
    return f"server.host {settings.server.host!r} is not a loopback address"


def refuse_public_secrets(settings: Settings) -> None:
    """ConfigError on the first webhook secret or admin token a stranger could know or guess.

    Demo values are accepted only with the sandbox on a loopback host (its simulator signs its
    deliveries with whatever is configured); empty webhook secrets only on loopback (they reject
    every delivery there, which is safe but useless)."""
    loopback = is_loopback(settings.server.host)
    webhook = [
        (f"telegram.bots[{index}].secret_token", bot.secret_token.get_secret_value(), True)
        for index, bot in enumerate(settings.telegram.bots)
    ]
    in_use = bool(settings.whatsapp.numbers)  # with no number, WhatsApp is not set up at all
    webhook += [
        ("whatsapp.app_secret", settings.whatsapp.app_secret.get_secret_value(), in_use),
        ("whatsapp.verify_token", settings.whatsapp.verify_token.get_secret_value(), in_use),
    ]
    for key, value, required in webhook:
        if is_demo_value(value) and not _sandbox_only(settings):
            raise ConfigError(key, _demo_problem(settings, "forge webhooks"))
        if required and not value and not loopback:
            raise ConfigError(
                key,
                f"is empty, and {_exposed(settings)}: set the platform's secret (an empty one"
                " rejects every delivery)",
            )
    check_admin_token(settings, settings.admin.token.get_secret_value(), "admin.token")


def check_admin_token(settings: Settings, token: str, key: str) -> None:
    """An empty token turns the admin API off: always fine. Otherwise no demo value (unless
    sandbox-only) and, off loopback, at least ``MIN_ADMIN_TOKEN`` characters."""
    if not token:
        return
    if is_demo_value(token) and not _sandbox_only(settings):
        raise ConfigError(key, _demo_problem(settings, "use the admin API"))
    if len(token) < MIN_ADMIN_TOKEN and not is_loopback(settings.server.host):
        raise ConfigError(
            key,
            f"is shorter than {MIN_ADMIN_TOKEN} characters, and {_exposed(settings)}: anyone"
            " who reaches the server could guess it; use a long random one (python3 -c"
            " 'import secrets; print(secrets.token_urlsafe(32))')",
        )


def _demo_problem(settings: Settings, what: str) -> str:
    if not is_loopback(settings.server.host):
        why = f"{_exposed(settings)}: anyone who reaches the server could {what} with it"
    else:
        why = (
            "the sandbox is off: real traffic reaches this server (through a proxy or a tunnel),"
            f" and anyone could {what} with it"
        )
    return (
        f"is a publicly known demo value, and {why}. Set one of your own (config.example.toml"
        " reads it from an environment variable); demo values are accepted only with the"
        " sandbox enabled on a loopback server.host"
    )


def admin_token_source(
    raw_token: object, settings: Settings, environ: Mapping[str, str]
) -> str | None:
    """Where the admin token comes from, in words for the start message ("sign in with ..."),
    never the token: the environment variable that ``admin.token`` (``raw_token``, as written in
    the file) reads, that key itself, or ``admin.token_file``. None: no admin token at all."""
    if isinstance(raw_token, str) and substitute(raw_token, environ):
        names = [name for name in references(raw_token) if environ.get(name)]
        if names:
            return f"the admin token in ${names[0]} (admin.token)"
        return "the admin token set as admin.token in the config file"
    if settings.admin.token_file:
        return f"the admin token in {settings.admin.token_file}"
    return None


def read_token_file(path: Path, notice: TextIO | None = None) -> str:
    """The token in ``path`` (surrounding blanks dropped). A missing file is made first with a
    random token and mode 0600, and the token is printed once on ``notice`` (stderr by default:
    the commands' stdout carries their output)."""
    try:
        made = _make_token_file(path)
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        problem = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError("admin.token_file", f"cannot read or create {path}: {problem}") from None
    if not token:
        raise ConfigError(
            "admin.token_file",
            f"{path} is empty: write a token into it, or delete it to have one made",
        )
    if made:
        print(
            f"Admin token (made at this first start, stored in {path} with mode 0600; printed"
            f" this once): {token}",
            file=notice or sys.stderr,
            flush=True,
        )
    return token


def check_token_file_can_be_made(settings: Settings, *, probe: bool = True) -> None:
    """ConfigError before ``serve`` starts anything when the token file it would make once
    started could not be made: a failure then, with the store and the channels open, would
    leave them to the garbage collector (aiohttp cleans up no part of a failed start).

    ``probe``: also make and remove a temporary file where the token file would go, since
    ``os.access`` answers for root by its rights alone (/proc, a read-only or FUSE mount refuse
    what it allows); check-config, which writes nothing, passes False."""
    admin = settings.admin
    path = Path(admin.token_file)
    if admin.token.get_secret_value() or not admin.token_file or path.exists():
        return
    folder = path.parent
    while not folder.exists() and folder != folder.parent:  # the folders made with the file
        folder = folder.parent
    problem = None
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK) or _read_only(folder):
        problem = f"{folder} is not a folder this user can write"
    elif probe:
        problem = _cannot_create_in(folder)
    if problem is not None:
        raise ConfigError("admin.token_file", f"cannot create {path}: {problem}")


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False  # no answer: the probe, or the start, tells


def _cannot_create_in(folder: Path) -> str | None:
    """None once a private temporary file was made and removed in ``folder``, else why not."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".gateway-probe-"):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def _make_token_file(path: Path) -> bool:
    """Make ``path`` with a new random token unless it exists; True when this call made it.

    The token is written to a private temporary file that is then hard-linked into place, so a
    concurrent start never reads a half-written file and never replaces another's token."""
    if path.exists():
        return False
    make_private_folders(path.parent)  # data/ of a fresh checkout, where the store goes too
    data = (secrets.token_urlsafe(32) + "\n").encode()
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    _write_private(temporary, data)
    try:
        os.link(temporary, path)
    except FileExistsError:
        return False  # another process made it first: its token it is
    except OSError:  # a file system without hard links: create the file itself, exclusively
        try:
            _write_private(path, data)
        except FileExistsError:
            return False
    finally:
        temporary.unlink(missing_ok=True)
    return True


def _write_private(path: Path, data: bytes) -> None:
    """A new file only its owner can read (whatever the umask), with ``data``, on disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
