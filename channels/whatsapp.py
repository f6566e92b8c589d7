"""The WhatsApp channel's public names (implementation in ``channels._whatsapp``)."""

from ._whatsapp import (
    SIGNATURE_HEADER,
    TEXT_LIMIT,
    WhatsAppAdapter,
    build_payloads,
    parse_delivery,
    split_text,
    status_retry,
)

__all__ = [
    "SIGNATURE_HEADER",
    "TEXT_LIMIT",
    "WhatsAppAdapter",
    "build_payloads",
    "parse_delivery",
    "split_text",
    "status_retry",
]
