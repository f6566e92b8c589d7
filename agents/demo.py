"""Tools of the offline demo agents in ``config.example.toml``."""

from __future__ import annotations

from collections import OrderedDict

from ._tools import ToolContext, tool

_INVOICES = {
    "INV-1001": {"amount": "49.00 EUR", "status": "paid", "due": "2024-05-01"},
    "INV-1002": {"amount": "120.50 EUR", "status": "open", "due": "2024-07-15"},
    "INV-1003": {"amount": "9.99 EUR", "status": "refunded", "due": "2024-03-10"},
}

# What lookup_invoice answered, by idempotency key: newest last, at most _REMEMBERED of them.
ANSWERED: OrderedDict[str, str] = OrderedDict()
_REMEMBERED = 1000


@tool
def lookup_invoice(number: str, call: ToolContext | None = None) -> str:
    """Look up a demo invoice by its number, such as INV-1001.

    A lookup changes nothing, but it shows what a tool with a side effect (a refund, a charge,
    an e-mail) does: a turn that failed or was interrupted runs again, tools included, with the
    same ``call.idempotency_key``. Such a tool sends the key to the service (Stripe's
    ``Idempotency-Key`` header), or records it with the effect, in the same transaction, and
    answers a key it has seen with what it answered then, without acting again. This demo keeps
    its record in memory, which a crash loses; a real tool keeps it where the effect is.
    """
    # A sync tool runs in a thread, beside other turns' calls of it: one look at the record.
    answered = ANSWERED.get(call.idempotency_key) if call is not None else None
    if answered is not None:
        return answered  # this call ran before: do nothing twice
    key = number.strip().upper()
    invoice = _INVOICES.get(key)
    if invoice is None:
        answer = f"No invoice {key} was found. Demo invoices: {', '.join(_INVOICES)}."
    else:
        answer = f"Invoice {key}: {invoice['amount']}, {invoice['status']}, due {invoice['due']}."
    if call is not None:
        ANSWERED[call.idempotency_key] = answer
        while len(ANSWERED) > _REMEMBERED:
            ANSWERED.popitem(last=False)
    return answer
