"""Tools of the offline demo agents in ``config.example.toml``."""

from __future__ import annotations

from ._tools import tool

_INVOICES = {
    "INV-1001": {"amount": "49.00 EUR", "status": "paid", "due": "2024-05-01"},
    "INV-1002": {"amount": "120.50 EUR", "status": "open", "due": "2024-07-15"},
    "INV-1003": {"amount": "9.99 EUR", "status": "refunded", "due": "2024-03-10"},
}


@tool
def lookup_invoice(number: str) -> str:
    """Look up a demo invoice by its number, such as INV-1001."""
    key = number.strip().upper()
    invoice = _INVOICES.get(key)
    if invoice is None:
        return f"No invoice {key} was found. Demo invoices: {', '.join(_INVOICES)}."
    return f"Invoice {key}: {invoice['amount']}, {invoice['status']}, due {invoice['due']}."
