"""How big the reliability tests run: short in `make test`, long in `make soak`.

`make soak` sets ``GATEWAY_SOAK=long``; every test in this folder reads its sizes from here, so
the short and the long version are the same code with other numbers.
"""

from __future__ import annotations

import os

LONG = os.environ.get("GATEWAY_SOAK", "") == "long"


def pick(short: int, long: int) -> int:
    """``long`` under ``make soak``, ``short`` otherwise."""
    return long if LONG else short
