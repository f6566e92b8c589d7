"""Keep bot tokens out of log records and error messages (PTB puts them in every URL)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from urllib.parse import quote

REDACTED = "<redacted>"
# httpx logs each request URL at INFO; PTB logs its base URL at DEBUG; our aiohttp request
# class logs each request at DEBUG (already redacted; the filter is a second line).
LEAKY_LOGGERS = ("httpx", "telegram.Bot", "channels.telegram.http")


def scrub(text: str, tokens: Iterable[str]) -> str:
    """Replace every token, raw or percent-encoded, in any letter case, with a placeholder."""
    # PTB capitalizes error descriptions, which lowercases a token echoed in one.
    for token in tokens:
        for form in {token, quote(token, safe="")}:
            text = re.sub(re.escape(form), REDACTED, text, flags=re.IGNORECASE)
    return text


class TokenRedactor(logging.Filter):
    """A log filter that rewrites records mentioning one of the tokens."""

    def __init__(self, tokens: Iterable[str]) -> None:
        super().__init__()
        self.tokens = tuple(tokens)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = scrub(message, self.tokens)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True

    def install(self) -> None:
        """Attach to the loggers that print request URLs."""
        for name in LEAKY_LOGGERS:
            logging.getLogger(name).addFilter(self)

    def uninstall(self) -> None:
        """Detach again; idempotent."""
        for name in LEAKY_LOGGERS:
            logging.getLogger(name).removeFilter(self)
