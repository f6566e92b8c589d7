"""Split a reply into Telegram-sized messages at the most natural boundary."""

from __future__ import annotations

import re

MAX_TEXT_LENGTH = 4096
MAX_CAPTION_LENGTH = 1024
# Sentence end: terminal punctuation, optional closing quotes or brackets, then whitespace.
_SENTENCE_END = re.compile(r"[.!?\u2026\u3002]+[\"'\u201d\u2019)\]]*\s+")


def utf16_length(text: str) -> int:
    """Length as Telegram counts it: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def split_text(text: str, limit: int = MAX_TEXT_LENGTH) -> list[str]:
    """Cut text into chunks of at most ``limit`` UTF-16 units: paragraph, sentence, word ends."""
    chunks: list[str] = []
    rest = text.strip()
    while rest:
        fit = max(_fitting_prefix(rest, limit), 1)  # always progress, even on a tiny limit
        if fit == len(rest):
            chunks.append(rest)
            break
        cut = _cut_point(rest[:fit])
        chunks.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    return chunks


def _fitting_prefix(text: str, limit: int) -> int:
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            return index
    return len(text)


def _cut_point(window: str) -> int:
    # A paragraph or sentence end in the first half would leave a needlessly short message.
    floor = len(window) // 2
    paragraph = window.rfind("\n\n")
    if paragraph > 0 and paragraph >= floor:
        return paragraph
    sentence = max((m.end() for m in _SENTENCE_END.finditer(window)), default=0)
    if sentence > 0 and sentence >= floor:
        return sentence
    space = max(window.rfind(c) for c in " \n\t")
    return space if space > 0 else len(window)
