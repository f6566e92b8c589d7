"""WhatsApp Cloud API channel (Meta Graph API)."""

from .._split import split_text
from ._adapter import WhatsAppAdapter
from ._graph_errors import status_retry
from ._outbound import TEXT_LIMIT, build_payloads
from ._parse import parse_delivery
from ._signature import SIGNATURE_HEADER

__all__ = [
    "SIGNATURE_HEADER",
    "TEXT_LIMIT",
    "WhatsAppAdapter",
    "build_payloads",
    "parse_delivery",
    "split_text",
    "status_retry",
]
