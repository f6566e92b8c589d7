"""Run configure_logging as ``gateway`` does, on a root logger of its own, and undo it after."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from webhook_bot_gateway.gateway import _logging


@contextmanager
def fresh_root_logging() -> Iterator[None]:
    """An empty root logger (so basicConfig adds its stderr handler, as in production), restored
    afterwards with the redaction's secrets and the aiohttp.server filter taken off again."""
    root = logging.getLogger()
    server = logging.getLogger("aiohttp.server")
    saved = (root.handlers[:], root.level, server.filters[:], server.level)
    root.handlers = []
    try:
        yield
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers, root.level = saved[0], saved[1]
        server.filters, server.level = saved[2], saved[3]
        _logging.REDACTION.use(())


def redirect_root_handlers() -> io.StringIO:
    """Point the root handlers configure_logging set up (filters and all) at a buffer."""
    buffer = io.StringIO()
    for handler in logging.getLogger().handlers:
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(buffer)
    return buffer
