"""PTB's own ERROR record of an answer that is not JSON (a proxy's 502 page), with its traceback
and the whole body: dropped, since PTB then raises an error that says the same, which the
gateway reports (a send's failure, a command's one error line). PTB logs nothing else there."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

PTB_PARSE_LOGGER = "telegram.request.BaseRequest"


def _drop_record(record: logging.LogRecord) -> bool:
    return False


def drop_parse_errors() -> None:
    """From now on (adding it twice is adding it once)."""
    logging.getLogger(PTB_PARSE_LOGGER).addFilter(_drop_record)


def keep_parse_errors() -> None:
    """Undo ``drop_parse_errors``; idempotent."""
    logging.getLogger(PTB_PARSE_LOGGER).removeFilter(_drop_record)


@contextmanager
def parse_errors_unlogged() -> Iterator[None]:
    """Dropped while the block runs."""
    drop_parse_errors()
    try:
        yield
    finally:
        keep_parse_errors()
