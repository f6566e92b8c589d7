"""Split a long reply into platform-sized messages at the most natural boundary."""

from __future__ import annotations

import re

# Sentence end: terminal punctuation, optional closing quotes or brackets, then whitespace.
_SENTENCE_END = re.compile(r"[.!?\u2026\u3002]+[\"'\u201d\u2019»)\]]*\s+")


def utf16_length(text: str) -> int:
    """Length in UTF-16 code units, as Telegram counts it."""
    return len(text.encode("utf-16-le")) // 2


def split_text(text: str, limit: int, *, utf16: bool = False) -> list[str]:
    """Cut text into stripped chunks of at most ``limit`` characters (UTF-16 units if ``utf16``).

    Paragraph ends are preferred, then sentence ends, then spaces; a word is cut only when it
    alone is longer than ``limit``.
    """
    if limit < 1:
        raise ValueError("limit must be positive")
    chunks: list[str] = []
    rest = text.strip()
    while rest:
        fit = max(_fitting_prefix(rest, limit, utf16), 1)  # always progress
        if fit == len(rest):
            chunks.append(rest)
            break
        cut = _cut_point(rest[: fit + 1], fit)
        chunks.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    return chunks


def _fitting_prefix(text: str, limit: int, utf16: bool) -> int:
    if not utf16:
        return min(len(text), limit)
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            return index
    return len(text)


def _cut_point(window: str, fit: int) -> int:
    """Where to cut ``window`` (the ``fit`` characters that fit, plus the next one)."""
    # A paragraph or sentence end in the first half would leave a needlessly short message.
    floor = fit // 2
    paragraph = window.rfind("\n\n")
    if paragraph > 0 and paragraph >= floor:
        return paragraph
    sentence = max((m.end() for m in _SENTENCE_END.finditer(window)), default=0)
    if sentence > 0 and sentence >= floor:
        return sentence  # the whitespace it takes along is stripped
    space = max(window.rfind(c) for c in " \n\t")
    return space if space > 0 else fit
