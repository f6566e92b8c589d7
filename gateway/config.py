"""The whole configuration file: TOML, environment references, validated once at start."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import ErrorDetails

from webhook_bot_gateway.agents import AgentConfigError, AgentsConfig, ConfigBool
from webhook_bot_gateway.channels import TelegramConfig, WhatsAppConfig
from webhook_bot_gateway.store import check_url

from ._accounts import check_account_agents, declared_in_config
from ._admin_token import check_admin_token, read_token_file, refuse_public_secrets
from ._base_urls import check_base_urls
from ._config_numbers import boolean_for_number
from ._env import key_path, origin, substitute
from .errors import ConfigError

DEFAULT_CONFIG = "config.toml"


class _Section(BaseModel):
    # TOML has inf and nan: a timeout of inf never fires, a rate of nan compares false to all.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


MIB = 1024 * 1024
GIB = 1024 * MIB


class ServerConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    max_body_whatsapp: int = Field(default=4 * MIB, gt=0)  # Meta's batches reach about 3 MB
    max_body_telegram: int = Field(default=1 * MIB, gt=0)
    read_timeout: float = Field(default=10.0, gt=0)  # seconds to receive a whole body
    # Webhook bodies read at once (those that did not come whole with their headers); past it
    # a delivery gets 503 "busy" and the platform retries. Each may hold up to its max_body.
    max_concurrent_reads: int = Field(default=256, gt=0)
    # aiohttp's keep-alive timer: an idle connection is closed after this many seconds, and it
    # is the only deadline aiohttp puts on a request's header (counted from the connection's
    # opening or its last response; see docs/security.md#http-limits).
    keepalive_timeout: float = Field(default=15.0, gt=0)
    shutdown_timeout: float = Field(default=10.0, gt=0)  # running turns get this long to finish
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"  # auto: uvloop where installed


class IngestConfig(_Section):
    window_ms: float = Field(default=2.0, ge=0)  # group commit: wait this long for company
    max_batch: int = Field(default=256, gt=0)
    # Messages acknowledged and not yet answered: past backlog_ready /readyz answers 503; at
    # backlog_refuse new deliveries get 503 before anything is stored (docs/http.md).
    backlog_ready: int = Field(default=5000, gt=0)
    backlog_refuse: int = Field(default=20000, gt=0, validate_default=True)
    # Acks first: while webhooks arrive and the event loop runs this late (mean over 50 ms),
    # new deliveries enter the pipeline at a reduced rate (docs/pipeline.md). 0: never paced.
    ack_priority_lag_ms: float = Field(default=2.0, ge=0)
    # ... and only while at least this many messages wait (the backlog last read from the store).
    ack_priority_backlog: int = Field(default=200, ge=0)

    @field_validator("backlog_refuse")
    @classmethod
    def _refuse_above_ready(cls, refuse: int, info: ValidationInfo) -> int:
        ready = info.data.get("backlog_ready")
        if isinstance(ready, int) and refuse <= ready:
            raise ValueError(f"must be greater than ingest.backlog_ready ({ready})")
        return refuse


class StoreConfig(_Section):
    url: str = "sqlite:///data/gateway.db"  # or postgresql://user@host:5432/database
    pool_size: int = Field(default=10, ge=1, le=1000)  # PostgreSQL connections per process
    # A process renews its lease every third of this; a process that stopped renewing for this
    # long is dead to the others, which then take over its running turns (docs/deployment.md).
    lease_seconds: float = Field(default=15.0, ge=1.0, le=3600.0)
    # History, events, attachments and finished pipeline rows older than this many days are
    # deleted once a day (docs/data.md); 0 keeps everything forever.
    retention_days: int = Field(default=0, ge=0, le=36500)

    @field_validator("url")
    @classmethod
    def _known_backend(cls, url: str) -> str:
        return check_url(url)


class DedupConfig(_Section):
    ttl_hours: float = Field(default=192, gt=0)
    purge_interval_seconds: float = Field(default=3600, gt=0)


class AdminConfig(_Section):
    token: SecretStr = SecretStr("")  # empty: token_file's token, or no admin API at all
    # With token empty: the token in this file (relative to the working directory); a missing
    # file is made at serve's start with a random token, mode 0600, and the token printed once.
    token_file: str = ""


class SandboxConfig(_Section):
    enabled: ConfigBool = False


class MediaConfig(_Section):
    root: str = "data/media"  # one folder per session, relative to the working directory
    max_bytes: int = Field(default=20 * MIB, gt=0)  # per file: uploads and platform downloads
    # Free space the media root's disk keeps: the store and the other sessions' files need it
    # more than one more upload does. 0: no floor.
    min_free_bytes: int = Field(default=GIB, ge=0)
    max_uploads_per_session: int = Field(default=100, gt=0)  # a web session's uploaded files
    # Platform media are fetched only from these hosts (".example.com": the domain and its
    # subdomains), over https, from public addresses; the configured API base URLs are trusted too.
    allowed_hosts: tuple[str, ...] = (
        "graph.facebook.com",
        ".fbsbx.com",
        ".whatsapp.net",
        "api.telegram.org",
    )
    download_timeout: float = Field(default=30.0, gt=0)  # seconds per platform download
    download_wait_seconds: float = Field(default=2.0, ge=0)  # a turn waits this long at most


class WebConfig(_Section):
    max_frame_bytes: int = Field(default=65_536, gt=0)  # a larger /ws frame gets an error frame
    max_text_chars: int = Field(default=4096, gt=0)  # a longer message text is refused
    max_attachments: int = Field(default=10, ge=0)  # attachment ids one message may reference
    heartbeat_seconds: float = Field(default=30.0, gt=0)  # /ws ping interval


def _text_or_empty(text: str | None) -> str | None:
    """A text sent to users: "" (or None) for none, else more than blanks (the channels strip
    what they send: a blank one would be queued, then fail with nothing to send)."""
    if text and not text.strip():
        raise ValueError('must hold text, or be "" for none')
    return text


UserText = Annotated[str, AfterValidator(_text_or_empty)]


class DispatcherConfig(_Section):
    double_texting: Literal["merge", "enqueue"] = "merge"
    # With "merge": a turn whose last message is part of a Telegram album (its parts come as
    # separate updates) waits until no new part has come for this long, to answer them at once.
    album_wait_seconds: float = Field(default=1.0, ge=0)
    max_concurrent_turns: int = Field(default=2000, gt=0)  # turns mostly wait on a model
    max_attempts: int = Field(default=3, gt=0)  # tries of a failing turn before dead letter
    retry_base_seconds: float = Field(default=2.0, ge=0)
    # Sent when a dead-lettered session is then with a human agent (handed to one, or already).
    apology: UserText = "Sorry, something went wrong on our side. A person will look into it."
    # Sent when it is not (no handoff, one the account does not allow, or to a bot): no promise
    # of a person. None: NO_PERSON_APOLOGY, or none at all when ``apology`` is "".
    apology_no_person: UserText | None = None
    dead_letter_handoff: str = "human"  # agent to hand a dead-lettered session to; "" for none
    typing_after_seconds: float = Field(default=1.0, ge=0)
    typing_interval_seconds: float = Field(default=4.0, gt=0)


class LoggingConfig(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # json: one JSON object a line; text: readable lines; auto: text on a terminal, else json.
    format: Literal["auto", "json", "text"] = "auto"

    @field_validator("level", mode="before")
    @classmethod
    def _upper_case(cls, level: object) -> object:
        return level.upper() if isinstance(level, str) else level


class SenderConfig(_Section):
    max_attempts: int = Field(default=8, gt=0)
    backoff_base_seconds: float = Field(default=1.0, ge=0)
    backoff_max_seconds: float = Field(default=300.0, gt=0)
    telegram_chat_per_second: float = Field(default=1.0, gt=0)
    telegram_bot_per_second: float = Field(default=30.0, gt=0)
    telegram_group_per_minute: float = Field(default=20.0, gt=0)  # Telegram: 20 a minute a group
    whatsapp_number_per_second: float = Field(default=80.0, gt=0)
    whatsapp_chat_per_second: float = Field(default=1.0, gt=0)
    burst: int = Field(default=3, gt=0)  # messages a chat may get at once before pacing


class Settings(_Section):
    server: ServerConfig = ServerConfig()
    ingest: IngestConfig = IngestConfig()
    store: StoreConfig = StoreConfig()
    dedup: DedupConfig = DedupConfig()
    admin: AdminConfig = AdminConfig()
    sandbox: SandboxConfig = SandboxConfig()
    media: MediaConfig = MediaConfig()
    web: WebConfig = WebConfig()
    telegram: TelegramConfig = TelegramConfig()
    whatsapp: WhatsAppConfig = WhatsAppConfig()
    dispatcher: DispatcherConfig = DispatcherConfig()
    sender: SenderConfig = SenderConfig()
    logging: LoggingConfig = LoggingConfig()
    agents: AgentsConfig = AgentsConfig()


def resolve_config_path(given: str | None, environ: Mapping[str, str] = os.environ) -> Path:
    """``--config``, else ``$GATEWAY_CONFIG``, else ``config.toml``."""
    return Path(given or environ.get("GATEWAY_CONFIG") or DEFAULT_CONFIG)


def load_settings(path: Path, environ: Mapping[str, str] = os.environ) -> Settings:
    """Read, substitute and validate ``path``; every failure is a ConfigError naming the key.

    Unlike ``parse_settings`` this reads an existing ``admin.token_file``; it writes nothing (a
    missing one is made by ``gateway serve`` once it has started: see ``with_admin_token_file``)."""
    return with_admin_token_file(parse_settings(read_config(path), environ))


def read_config(path: Path) -> dict[str, Any]:
    """The TOML document in ``path``, not validated yet; a ConfigError naming the file."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(str(path), "config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot read the config file: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), f"not valid TOML: {exc}") from None


def parse_settings(raw: dict[str, object], environ: Mapping[str, str]) -> Settings:
    """Validate an already parsed TOML document. An error at a value read from the environment
    names the variables (``(the value comes from ${GATEWAY_PORT})``), never the value."""
    data = substitute(raw, environ)
    if (found := boolean_for_number(Settings, data)) is not None:
        raise ConfigError(key_path(found), "must be a number, not true or false")
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc, raw, environ) from None
    try:
        return _checked(settings)
    except ConfigError as exc:
        note = origin(raw, exc.key, environ)
        if not note:
            raise
        raise ConfigError(exc.key, exc.problem + note) from None


def _checked(settings: Settings) -> Settings:
    """The checks that need the whole validated file; the settings with local URLs made whole."""
    refuse_public_secrets(settings)  # demo secrets and short admin tokens where strangers reach
    declared = declared_in_config(settings)
    if declared is not None:  # with agents.module, checked once the registry is built
        check_account_agents(settings, declared)
    settings = with_local_urls(settings)
    check_base_urls(settings, own_url(settings))  # absolute http(s); no sandbox URL without it
    return settings


def with_admin_token_file(settings: Settings, *, make: bool = False) -> Settings:
    """An empty ``admin.token`` with ``admin.token_file`` set: the file's token becomes
    ``admin.token``. A missing file is left missing and the token empty, unless ``make``: then
    it is made with a random token, mode 0600, and the token printed once. Only ``serve`` makes
    it, once the server is bound and every part of it started (``app.serve``): a start that
    fails makes none, so the next one is the first and prints it."""
    admin = settings.admin
    if admin.token.get_secret_value() or not admin.token_file:
        return settings
    if not make and not Path(admin.token_file).exists():
        return settings
    token = read_token_file(Path(admin.token_file))
    check_admin_token(settings, token, "admin.token_file")
    admin = admin.model_copy(update={"token": SecretStr(token)})
    return settings.model_copy(update={"admin": admin})


def with_local_urls(settings: Settings, prefix: str = "/") -> Settings:
    """An API base URL that is a path (``/sandbox/telegram``) means this gateway itself: it is
    made absolute with the server's own address, so the sandbox follows ``server.port``.
    (``prefix``: what such a URL starts with; see ``with_bound_port``.)"""
    own = own_url(settings)
    telegram, whatsapp = settings.telegram, settings.whatsapp
    if telegram.api_base_url.startswith(prefix):
        path = telegram.api_base_url[len(prefix) - 1 :]
        telegram = telegram.model_copy(update={"api_base_url": own + path})
    if whatsapp.graph_base_url.startswith(prefix):
        path = whatsapp.graph_base_url[len(prefix) - 1 :]
        whatsapp = whatsapp.model_copy(update={"graph_base_url": own + path})
    return settings.model_copy(update={"telegram": telegram, "whatsapp": whatsapp})


def with_bound_port(settings: Settings, port: int) -> Settings:
    """``server.port = 0`` asks the system for a port: once ``serve`` has bound it, the
    settings name it, and the base URLs made for this gateway itself follow (they held ``:0``)."""
    if settings.server.port == port:
        return settings
    unbound = own_url(settings) + "/"
    server = settings.server.model_copy(update={"port": port})
    return with_local_urls(settings.model_copy(update={"server": server}), unbound)


def own_url(settings: Settings) -> str:
    """Where this gateway is reached from itself (the base of its sandbox URLs)."""
    return f"http://{loopback_host(settings.server.host)}:{settings.server.port}"


def loopback_host(host: str) -> str:
    """Where this server is reached from itself, as a URL's host: a wildcard address means
    loopback; an IPv6 address is bracketed."""
    if host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def _first_error(
    exc: ValidationError, raw: dict[str, object], environ: Mapping[str, str]
) -> ConfigError:
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    location = tuple(part for part in first["loc"] if isinstance(part, str | int))
    key, problem = key_path(location), _problem(first)
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, AgentConfigError) and cause.key:  # [agents] knows the key better
        key, problem = cause.key, cause.problem
    if first["type"] != "extra_forbidden":  # an unknown key's value is not the problem
        problem += origin(raw, key, environ)
    if len(errors) > 1:
        problem += f" (and {len(errors) - 1} more error(s))"
    return ConfigError(key, problem)


# pydantic's "Input should be a valid tuple" and the like, in the words of a TOML file.
_PLAIN_WORDS = {
    "must be a whole number": ("int_type", "int_parsing", "int_from_float"),
    "must be a number": ("float_type", "float_parsing"),
    "must be true or false": ("bool_type", "bool_parsing"),
    "must be a string": ("string_type",),
    "must be a list": ("list_type", "tuple_type", "set_type", "frozen_set_type"),
    "must be a table": ("dict_type", "model_type"),
}
_PLAIN = {kind: words for words, kinds in _PLAIN_WORDS.items() for kind in kinds}


def _problem(error: ErrorDetails) -> str:
    """Plain words for an unknown key and a value of the wrong type, else pydantic's message
    without the "Value error, " its validators' errors get."""
    if error["type"] == "extra_forbidden":
        return "unknown key"
    if error["type"] in _PLAIN:
        return _PLAIN[error["type"]]
    return error["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
