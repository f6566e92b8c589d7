"""asyncpg's pool logs a WARNING with a whole traceback each time it fails to reconnect its
floor connections (a few times a second while the server restarts): kept as one line that ends
with the error's type and text, the traceback dropped. The store's own errors say the rest."""

from __future__ import annotations

import logging

POOL_LOGGER = "asyncpg.pool"


def _one_line(record: logging.LogRecord) -> bool:
    if record.exc_info and record.exc_info[1] is not None:
        error = record.exc_info[1]
        record.msg = f"{record.getMessage()} ({type(error).__name__}: {error})"
        record.args = None
        record.exc_info = None
        record.exc_text = None
    return True


def pool_errors_in_one_line() -> None:
    """From now on (adding it twice is adding it once)."""
    logging.getLogger(POOL_LOGGER).addFilter(_one_line)
