"""Telegram's text limits; the splitting itself is shared by every channel."""

from __future__ import annotations

from .._split import split_text as _split_text
from .._split import utf16_length

MAX_TEXT_LENGTH = 4096
MAX_CAPTION_LENGTH = 1024

__all__ = ["MAX_CAPTION_LENGTH", "MAX_TEXT_LENGTH", "split_text", "utf16_length"]


def split_text(text: str, limit: int = MAX_TEXT_LENGTH) -> list[str]:
    """Cut text into chunks of at most ``limit`` UTF-16 units, as Telegram counts."""
    return _split_text(text, limit, utf16=True)
