"""Map a Graph API error answer to a SendError with the disposition the sender acts on.

Meta asks to key on ``error.code``, not on the HTTP status: rate limits come back as 400s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .._errors import FatalSendError, PermanentSendError, RetryableSendError, SendError

CHANNEL = "whatsapp"
_MAX_REASON = 400

# Rejected before processing, or a transient fault on Meta's side: the same request may succeed.
RETRYABLE_CODES: frozenset[int] = frozenset({2, 4, 80007, 130429, 131000, 131016, 131056, 131057})
# Seconds to wait where Meta documents a pace: 131057 is a throughput upgrade that lasts up to
# a minute; 131056, the per-recipient pair limit, starts at 1 s and grows (GROWTH).
RETRY_AFTER: dict[int, float] = {4: 60.0, 80007: 60.0, 130429: 1.0, 131056: 1.0, 131057: 60.0}
# Meta's schedule for the pair limit: "retry after 4^X seconds (starting with X=0 and increasing
# X by 1 after each failure) until successful". A burst borrows from the recipient's future
# quota (a burst of 20 needs ~2 minutes), so fixed short waits run out of tries first.
GROWTH: dict[int, float] = {131056: 4.0}
# The number's credentials or standing are bad: every later send for it would fail the same way.
FATAL_CODES: frozenset[int] = frozenset({0, 3, 10, 190, 368, 131005, 131031, 131042})
# Refused for this message only, even though the status may be 401/403.
PERMANENT_CODES: frozenset[int] = frozenset(
    {
        100,  # invalid parameter
        130472,  # the user is in a marketing experiment
        130497,  # the business may not message users in this country
        131008,  # required parameter missing
        131009,  # parameter value not valid
        131026,  # undeliverable: not on WhatsApp, old client, terms not accepted
        131047,  # more than 24 hours since the user last wrote: only templates
        131048,  # spam rate limit: a quality problem, retrying makes it worse
        131049,  # held back for ecosystem engagement
        131050,  # the user stopped marketing messages
        131051,  # unsupported message type
        131052,  # media download error
        131053,  # media upload error
    }
)


@dataclass(frozen=True, slots=True)
class GraphError:
    status: int
    code: int | None = None
    message: str | None = None
    type: str | None = None
    details: str | None = None
    fbtrace_id: str | None = None


def read_graph_error(status: int, body: bytes) -> GraphError:
    """The ``error`` object of a Graph answer; missing or odd fields become None."""
    try:
        root = json.loads(body)
    except (ValueError, RecursionError):
        return GraphError(status=status)
    error = root.get("error") if isinstance(root, dict) else None
    if not isinstance(error, dict):
        return GraphError(status=status)
    data = error.get("error_data")
    return GraphError(
        status=status,
        code=_int(error.get("code")),
        message=_str(error.get("message")),
        type=_str(error.get("type")),
        details=_str(data.get("details")) if isinstance(data, dict) else None,
        fbtrace_id=_str(error.get("fbtrace_id")),
    )


def send_error(error: GraphError, retry_after: float | None, secret: str) -> SendError:
    """Classify the error; ``secret`` is scrubbed from the reason in case Meta ever echoes it."""
    reason = _reason(error).replace(secret, "[redacted]") if secret else _reason(error)
    code, status = error.code, error.status
    fields = {"error_code": code if code is not None else status, "status": status}
    if code is not None and (code in FATAL_CODES or 200 <= code <= 299):
        return FatalSendError(CHANNEL, reason, **fields)
    if (code is not None and code in RETRYABLE_CODES) or status == 429 or status >= 500:
        hint = retry_after if retry_after is not None else RETRY_AFTER.get(code or 0)
        growth = GROWTH.get(code or 0) if retry_after is None else None
        return RetryableSendError(CHANNEL, reason, retry_after=hint, growth=growth, **fields)
    if code is not None and (code in PERMANENT_CODES or 132000 <= code <= 132999):
        return PermanentSendError(CHANNEL, reason, **fields)
    if status == 401 or (status == 403 and error.type == "OAuthException"):
        return FatalSendError(CHANNEL, reason, **fields)
    return PermanentSendError(CHANNEL, reason, **fields)


def status_retry(code: int | None, reason: str) -> RetryableSendError | None:
    """The retry a ``failed`` delivery status asks for: Meta accepted the send, then reports
    one of the transient codes (131056 pair limit, 130429 throughput, 131000, 131016...) that
    it asks to send again, with the wait a send refused with that code gets; None otherwise."""
    if code is None or code not in RETRYABLE_CODES:
        return None
    return RetryableSendError(
        CHANNEL,
        reason,
        retry_after=RETRY_AFTER.get(code),
        growth=GROWTH.get(code),
        error_code=code,
    )


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header; HTTP dates are not worth the code here."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < 86_400 else None


def _reason(error: GraphError) -> str:
    head = f"HTTP {error.status}"
    if error.code is not None:
        head += f", Graph error {error.code}"
    if error.type:
        head += f" ({error.type})"
    text = ": ".join(filter(None, [head, error.message, error.details]))
    if error.fbtrace_id:
        text += f" [fbtrace_id {error.fbtrace_id}]"
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 1] + "…"


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
