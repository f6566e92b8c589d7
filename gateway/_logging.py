"""Log set-up of ``gateway serve`` and the commands, and the filter that keeps web session ids
out of the log: the id is a web user's only credential (docs/web.md)."""

from __future__ import annotations

import logging
import re

_WEB_ID = re.compile(r"\b(web-[0-9a-f]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def redact_web_ids(text: str) -> str:
    """``web-1128e765-9ac8-...`` -> ``web-1128e765…``: enough to follow, too little to use."""
    return _WEB_ID.sub(r"\1…", text) if "web-" in text else text


class RedactWebSessions(logging.Filter):
    """Rewrites every record's message with web session ids shortened, whoever logged it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_web_ids(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def configure_logging() -> None:
    """INFO to stderr, noisy libraries quieter, web session ids shortened on every handler."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Bot API call is noise
    logging.getLogger("aiosqlite").setLevel(logging.WARNING)  # DEBUG logs call args: bodies
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactWebSessions) for f in handler.filters):
            handler.addFilter(RedactWebSessions())
