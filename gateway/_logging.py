"""Log set-up of ``gateway serve`` and the commands, and the filters on it (docs/security.md,
docs/logging.md):

* ``[logging]``: the root level, and JSON lines or readable text on stderr;
* every line written while a webhook or a turn is handled carries its fields (``LogContext``);
* every configured secret, and the token of any ``/bot<token>/`` path, is scrubbed from every
  record whoever logged it, its message, arguments and traceback included;
* web session ids are shortened: the id is a web user's only credential (docs/web.md);
* a request aiohttp cannot parse is one INFO line, not an ERROR with a traceback.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import warnings
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from types import TracebackType
from urllib.parse import parse_qsl, quote, quote_plus, unquote

from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.multipart import BadContentDispositionHeader, BadContentDispositionParam
from pydantic import BaseModel, SecretStr

from ._log_context import FIELDS, LOG_CONTEXT
from .config import LoggingConfig, Settings

REDACTED = "<redacted>"
# Shorter values are not scrubbed: they would garble every line and protect nothing.
MIN_SECRET_CHARS = 4

# A web session id (web-<uuid>), or the same uuid in a web message's dedup key (web:<uuid>:...).
_WEB_ID = re.compile(r"\b(web[-:][0-9a-f]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
# PTB puts the token in every Bot API and file URL: {base}/bot<token>/<method>. Any such segment
# goes, configured bot or not; without the closing slash only what looks like a token.
_BOT_PATH = re.compile(r"(/bot)(?:[^/\s?#'\"<>]+(?=/)|\d+(?::|%3[Aa])[\w-]+)")
# Query parameters of a configured URL whose values are credentials.
_SECRET_KEY = re.compile(r"pass|pwd|secret|token|key|auth|sig|credential", re.IGNORECASE)


def redact_web_ids(text: str) -> str:
    """``web-1128e765-9ac8-...`` -> ``web-1128e765…`` (and ``web:1128e765…:<client_id>`` in a
    dedup key): enough to follow, too little to use."""
    return _WEB_ID.sub(r"\1…", text) if "web-" in text or "web:" in text else text


def url_secrets(url: str) -> list[str]:
    """The credentials written into a URL: the userinfo's password and secret-looking query
    values. Split by hand like ``mask_url``: a password may hold an unescaped ``#?/``."""
    _, sep, rest = url.partition("://")
    if not sep:
        return []
    userinfo, at, location = rest.rpartition("@")
    found: list[str] = []
    if at:
        _, colon, password = userinfo.partition(":")
        if colon:
            found += [password, unquote(password)]
    query = location.partition("?")[2].partition("#")[0]
    found += [value for key, value in parse_qsl(query) if _SECRET_KEY.search(key)]
    return found


def configured_secrets(
    settings: Settings, environ: Mapping[str, str] = os.environ
) -> tuple[str, ...]:
    """Every secret of the configuration: each SecretStr (bot tokens and secret_tokens, the
    WhatsApp app_secret, verify_token and access tokens, the admin token), the passwords in
    its URLs (the database's, the API base URLs') and the values of the API key variables;
    each at least MIN_SECRET_CHARS long."""
    found: list[str] = []
    _collect(settings, "", found, environ)
    return tuple(dict.fromkeys(secret for secret in found if len(secret) >= MIN_SECRET_CHARS))


def _collect(value: object, name: str, found: list[str], environ: Mapping[str, str]) -> None:
    if isinstance(value, SecretStr):
        found.append(value.get_secret_value())
    elif isinstance(value, BaseModel):
        for field in type(value).model_fields:
            _collect(getattr(value, field), field, found, environ)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, name, found, environ)
    elif isinstance(value, dict):
        for item in value.values():
            _collect(item, name, found, environ)
    elif isinstance(value, str):
        if name.endswith("url"):
            found += url_secrets(value)
        elif name.endswith("_env") and _SECRET_KEY.search(name):  # agents' api_key_env
            found.append(environ.get(value, ""))


def secrets_pattern(secrets: Iterable[str]) -> re.Pattern[str] | None:
    """One regex for every secret as written raw, percent-, form- or JSON-encoded, in any
    letter case (PTB capitalizes error descriptions); None when there is nothing to find."""
    forms: set[str] = set()
    for secret in secrets:
        if len(secret) >= MIN_SECRET_CHARS:
            forms |= {secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1]}
    if not forms:
        return None
    longest_first = sorted(forms, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, longest_first)), re.IGNORECASE)


def redact(text: str, secrets: re.Pattern[str] | None = None) -> str:
    """``text`` without the secrets, any ``/bot<token>/`` token, and with web ids shortened."""
    if secrets is not None:
        text = secrets.sub(REDACTED, text)
    if "/bot" in text:
        text = _BOT_PATH.sub(r"\1" + REDACTED, text)
    return redact_web_ids(text)


_TRACEBACKS = logging.Formatter()


class Redaction(logging.Filter):
    """A handler filter: rewrites every record (message with its arguments, traceback, stack)
    without the configured secrets, whichever logger it came from."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: tuple[str, ...] = ()
        self._pattern: re.Pattern[str] | None = None

    def use(self, secrets: Iterable[str]) -> None:
        """Scrub these secrets from now on (replacing the ones before)."""
        self.secrets = tuple(secrets)
        self._pattern = secrets_pattern(self.secrets)

    def redact(self, text: str) -> str:
        return redact(text, self._pattern)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken log call: the handler's emit reports it (handleError)
            return True
        cleaned = self.redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            # What Formatter.format would cache on the record, computed here to be scrubbed.
            record.exc_text = _TRACEBACKS.formatException(record.exc_info)
        if record.exc_text:
            cleaned = self.redact(record.exc_text)
            if cleaned != record.exc_text:  # printed from exc_text; exc_info would repeat it
                record.exc_text, record.exc_info = cleaned, None
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


REDACTION = Redaction()  # the one filter on the root handlers; its secrets set by configure


class MalformedRequests(logging.Filter):
    """On ``aiohttp.server``: a request aiohttp could not parse (bad request line, header,
    version...) is the client's fault and answered 400; aiohttp logs it as "Error handling
    request" at ERROR with a 12-line traceback. It becomes one INFO line. An exception raised
    in a route handler is left alone: it is logged at ERROR with its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError) and _raised_by_the_parser(exc.__traceback__):
            remote = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            record.msg, record.args = "malformed HTTP request from %s: %s", (remote, _one_line(exc))
            record.exc_info, record.exc_text = None, None
            if record.levelno > logging.INFO:
                record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def _raised_by_the_parser(tb: TracebackType | None) -> bool:
    """The exception was caught where aiohttp feeds its parser (``data_received``, ``start``),
    not where it awaits a route handler (``_handle_request``)."""
    if tb is None:
        return False
    code = tb.tb_frame.f_code
    return code.co_filename.endswith("web_protocol.py") and code.co_name != "_handle_request"


def _one_line(exc: HttpProcessingError, limit: int = 200) -> str:
    lines = (line.strip() for line in (exc.message or "").splitlines())
    text = " ".join(line for line in lines if line.strip("^ "))  # no caret under the column
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


MALFORMED_REQUESTS = MalformedRequests()


def quiet_malformed_requests() -> None:
    """Put MalformedRequests on aiohttp's server logger; idempotent."""
    server = logging.getLogger("aiohttp.server")
    if MALFORMED_REQUESTS not in server.filters:
        server.addFilter(MALFORMED_REQUESTS)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
HANDLER_NAME = "gateway"  # the stderr handler configure_logging adds; its format follows config


def context_fields(record: logging.LogRecord, redaction: Redaction) -> dict[str, object]:
    """The fields of the webhook, turn or reply the record was written in
    (``_log_context.FIELDS``), their texts scrubbed: the Redaction filter only sees the message
    (a web session id in ``session_id`` is shortened as in a message)."""
    attributes = record.__dict__
    return {
        name: _scrubbed(attributes[name], redaction)
        for name in FIELDS
        if attributes.get(name) is not None
    }


def _scrubbed(value: object, redaction: Redaction) -> object:
    if isinstance(value, str):
        return redaction.redact(value)
    if isinstance(value, list | tuple):
        return [_scrubbed(item, redaction) for item in value]
    return value


class TextFormatter(logging.Formatter):
    """The readable line: time, level, logger, message, then the context as ``key=value``."""

    def __init__(self, redaction: Redaction = REDACTION) -> None:
        super().__init__(TEXT_FORMAT)
        self._redaction = redaction

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        fields = context_fields(record, self._redaction)
        if not fields:
            return line
        pairs = " ".join(f"{name}={_text_value(value)}" for name, value in fields.items())
        return f"{line} {pairs}"


def _text_value(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``,
    the context fields present, and ``exc`` / ``stack`` when there are. The message, the
    traceback and the stack come scrubbed by the Redaction filter; the context fields are
    scrubbed here."""

    def __init__(self, redaction: Redaction = REDACTION) -> None:
        super().__init__()
        self._redaction = redaction

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **context_fields(record, self._redaction),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def make_formatter(style: str, stream: object) -> logging.Formatter:
    """``[logging] format``: ``auto`` is text when ``stream`` is a terminal, else JSON."""
    if style == "auto":
        isatty = getattr(stream, "isatty", None)
        style = "text" if callable(isatty) and isatty() else "json"
    return TextFormatter() if style == "text" else JsonFormatter()


def _own_handler(root: logging.Logger) -> None:
    """A stderr handler when the root has none, as ``logging.basicConfig`` would add (a test
    runner's capture handlers count as some)."""
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.set_name(HANDLER_NAME)
        root.addHandler(handler)


def configure_logging(settings: Settings | None = None) -> None:
    """The level and format of ``[logging]`` (the defaults until ``settings`` are loaded: call
    again then), noisy libraries quieter, and on every root handler the context of the webhook
    or turn under way and the redaction: web session ids shortened, ``/bot<token>/`` tokens
    hidden, and with ``settings`` every secret they configure scrubbed. Malformed requests: one
    line."""
    config = settings.logging if settings is not None else LoggingConfig()
    root = logging.getLogger()
    _own_handler(root)
    root.setLevel(config.level)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Bot API call is noise
    logging.getLogger("aiosqlite").setLevel(logging.WARNING)  # DEBUG logs call args: bodies
    REDACTION.use(configured_secrets(settings) if settings is not None else ())
    for handler in root.handlers:
        for log_filter in (LOG_CONTEXT, REDACTION):
            if log_filter not in handler.filters:
                handler.addFilter(log_filter)
        if handler.name == HANDLER_NAME and isinstance(handler, logging.StreamHandler):
            handler.setFormatter(make_formatter(config.format, handler.stream))
    quiet_malformed_requests()
    warnings_as_log_lines()


def warnings_as_log_lines() -> None:
    """Python warnings go through the handlers (format, redaction) as ``py.warnings`` lines,
    not raw to stderr; aiohttp's warnings about a client's malformed Content-Disposition are
    dropped: they echo the client's header once per distinct value, and the upload goes on
    with the file name it could read."""
    logging.captureWarnings(True)
    for category in (BadContentDispositionHeader, BadContentDispositionParam):
        warnings.filterwarnings("ignore", category=category)
