"""A platform's JSON as text every store can hold.

JSON may escape a lone surrogate (``"\\ud800"`` with no partner), which ``json.loads`` keeps as
it is and no UTF-8 text can hold: SQLite and PostgreSQL both refuse it, so one such character
in a message's text or id would send the whole delivery to quarantine. Read here, each becomes
U+FFFD, the dedup keys taken before the ack and the parsed events agree, and the message is
answered. A body without such an escape is ``json.loads``'s answer as it is.
"""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # may also find a valid pair: harmless
_SURROGATE = re.compile("[\ud800-\udfff]")


def load_json(body: bytes | str) -> Any:
    """``json.loads(body)`` with every lone surrogate as U+FFFD (ValueError, RecursionError as
    ``json.loads`` raises them)."""
    value = json.loads(body)
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    return _scrubbed(value) if _SURROGATE_ESCAPE.search(raw) else value


def _scrubbed(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_scrubbed(item) for item in value]
    if isinstance(value, dict):
        return {_scrubbed(key): _scrubbed(item) for key, item in value.items()}
    return value
