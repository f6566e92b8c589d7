"""Splitting replies at 4096 UTF-16 units on paragraph, sentence, then word boundaries."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from webhook_bot_gateway.channels._telegram._split import utf16_length
from webhook_bot_gateway.channels.telegram import MAX_TEXT_LENGTH, split_text


def test_split_text_keeps_a_short_text_whole() -> None:
    assert split_text("Hello there.") == ["Hello there."]


def test_split_text_of_blank_text_is_empty() -> None:
    assert split_text(" \n\t ") == []


def test_split_text_keeps_exactly_4096_characters_in_one_message() -> None:
    text = "a" * MAX_TEXT_LENGTH
    assert split_text(text) == [text]


def test_split_text_cuts_4097_characters_in_two() -> None:
    chunks = split_text("a" * (MAX_TEXT_LENGTH + 1))
    assert [len(c) for c in chunks] == [MAX_TEXT_LENGTH, 1]


def test_split_text_prefers_a_paragraph_boundary() -> None:
    first = "First paragraph. " * 150  # 2550 characters, full of sentence ends
    second = "Second paragraph. " * 150
    chunks = split_text(first.strip() + "\n\n" + second.strip())
    assert chunks == [first.strip(), second.strip()]


def test_split_text_falls_back_to_a_sentence_boundary() -> None:
    sentence = "This sentence has exactly forty chars. "  # 39 + 1
    text = sentence * 200  # no paragraph break at all
    chunks = split_text(text)
    assert all(chunk.endswith("chars.") for chunk in chunks)
    assert all(utf16_length(chunk) <= MAX_TEXT_LENGTH for chunk in chunks)
    assert " ".join(chunks) == text.strip()


def test_split_text_skips_a_paragraph_break_too_early_in_the_window() -> None:
    # A paragraph end at 100 would leave a 100-character message; a later sentence end wins.
    text = "x" * 100 + "\n\n" + ("Sentence number one goes here. " * 200)
    chunks = split_text(text)
    assert len(chunks[0]) > MAX_TEXT_LENGTH // 2
    assert chunks[0].endswith("here.")


def test_split_text_falls_back_to_a_word_boundary() -> None:
    text = " ".join(["word"] * 2000)  # 9999 characters, no punctuation
    chunks = split_text(text)
    assert all(chunk.startswith("word") and chunk.endswith("word") for chunk in chunks)
    assert " ".join(chunks) == text


def test_split_text_cuts_a_single_long_word_hard() -> None:
    chunks = split_text("z" * 10_000)
    assert [len(c) for c in chunks] == [4096, 4096, 1808]


def test_split_text_counts_utf16_units_like_telegram() -> None:
    emoji = "\U0001f600"  # two UTF-16 units
    chunks = split_text(emoji * 2049)
    assert [len(c) for c in chunks] == [2048, 1]
    assert utf16_length(chunks[0]) == MAX_TEXT_LENGTH


@settings(max_examples=60, deadline=None)
@given(
    st.text(alphabet=st.sampled_from("ab .!\n\U0001f600"), max_size=400),
    st.integers(min_value=2, max_value=50),
)
def test_split_text_chunks_fit_and_keep_every_non_space_character(text: str, limit: int) -> None:
    chunks = split_text(text, limit)
    assert all(0 < utf16_length(chunk) <= limit for chunk in chunks)
    assert all(chunk == chunk.strip() for chunk in chunks)
    assert "".join("".join(chunks).split()) == "".join(text.split())
