"""Split long text on paragraph, then sentence, then word boundaries."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"[.!?…][)\]\"'»”’]*\s")
_WHITESPACE = re.compile(r"\s")


def split_text(text: str, limit: int) -> list[str]:
    """Cut ``text`` into stripped parts of at most ``limit`` characters; mid-word only if forced."""
    if limit < 1:
        raise ValueError("limit must be positive")
    parts: list[str] = []
    rest = text.strip()
    while len(rest) > limit:
        cut = _cut(rest, limit)
        head, rest = rest[:cut].rstrip(), rest[cut:].lstrip()
        if head:
            parts.append(head)
    if rest:
        parts.append(rest)
    return parts


def _cut(text: str, limit: int) -> int:
    """The index to cut at: the last boundary of the best kind inside the first ``limit`` chars."""
    window = text[: limit + 1]  # a boundary right after the limit still leaves a full part
    paragraph = window.rfind("\n\n")
    if paragraph > 0:
        return paragraph
    sentence = _last_end(_SENTENCE_END, window)
    if sentence > 0:
        return sentence
    word = _last_end(_WHITESPACE, window)
    return word if word > 0 else limit


def _last_end(pattern: re.Pattern[str], window: str) -> int:
    ends = [m.end() - 1 for m in pattern.finditer(window)]
    return ends[-1] if ends else -1
