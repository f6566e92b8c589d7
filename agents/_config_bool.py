"""``ConfigBool``: a config file's boolean is true or false, never pydantic's lax guess.

Lax mode would read ``"yes"``, ``"on"``, ``"1"`` or ``1`` as true, and a typo of one config
as the opposite of what was meant. Accepted: a TOML boolean, and the strings ``true`` and
``false`` in any letter case with blanks around them, since ``${VAR}`` substitution gives
strings. Only config sections use it: API requests, tool arguments and store rows keep their
own rules. It lives in agents/, the lowest package that both config owners (gateway/ and
agents/) may import; a boolean in a channel section would need a copy of its own in channels/,
which imports neither (DESIGN.md's arrows).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator

_NAMES = {"true": True, "false": False}


def _true_or_false(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _NAMES:
        return _NAMES[value.strip().lower()]
    raise ValueError("must be true or false")  # never the value: it may be a secret's


ConfigBool = Annotated[bool, BeforeValidator(_true_or_false)]
