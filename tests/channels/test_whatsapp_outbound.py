"""Request bodies built from OutboundMessage, and the text splitter; no network."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook_bot_gateway.channels import (
    Button,
    OutboundMedia,
    OutboundMessage,
    OutboundTemplate,
    PermanentSendError,
)
from webhook_bot_gateway.channels.whatsapp import build_payloads, split_text

ENVELOPE = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": "15551234567"}


def message(**fields: Any) -> OutboundMessage:
    values: dict[str, Any] = {"channel": "whatsapp", "account": "1", "chat_id": "15551234567"}
    values.update(fields)
    return OutboundMessage(**values)


def buttons(count: int, title: str = "Option", **extra: Any) -> tuple[Button, ...]:
    return tuple(Button(id=f"b{i}", title=f"{title} {i}", **extra) for i in range(count))


def test_build_text_message() -> None:
    assert build_payloads(message(text="  hello  ")) == [
        {**ENVELOPE, "type": "text", "text": {"body": "hello", "preview_url": False}}
    ]


def test_build_sends_to_a_bsuid_with_recipient_instead_of_to() -> None:
    (payload,) = build_payloads(message(chat_id="US.13491208655302741918", text="hi"))
    assert "to" not in payload
    assert payload["recipient"] == "US.13491208655302741918"


def test_build_reply_to_goes_in_the_context_of_the_first_part_only() -> None:
    payloads = build_payloads(message(text="word " * 1000, reply_to="wamid.in"))
    assert len(payloads) == 2
    assert payloads[0]["context"] == {"message_id": "wamid.in"}
    assert "context" not in payloads[1]


def test_build_splits_long_text_on_paragraphs() -> None:
    first, second = "a" * 3000, "b" * 3000
    payloads = build_payloads(message(text=f"{first}\n\n{second}"))
    assert [p["text"]["body"] for p in payloads] == [first, second]


def test_build_up_to_three_short_buttons_are_reply_buttons() -> None:
    (payload,) = build_payloads(message(text="Pick one", buttons=buttons(3)))
    assert payload == {
        **ENVELOPE,
        "type": "interactive",
        "interactive": {
            "type": "button",
            "body": {"text": "Pick one"},
            "action": {
                "buttons": [
                    {"type": "reply", "reply": {"id": "b0", "title": "Option 0"}},
                    {"type": "reply", "reply": {"id": "b1", "title": "Option 1"}},
                    {"type": "reply", "reply": {"id": "b2", "title": "Option 2"}},
                ]
            },
        },
    }


def test_build_four_to_ten_buttons_are_a_list() -> None:
    (payload,) = build_payloads(message(text="Pick", buttons=buttons(10, description="d")))
    interactive = payload["interactive"]
    assert interactive["type"] == "list"
    assert interactive["body"] == {"text": "Pick"}
    assert interactive["action"]["button"] == "Options"
    (section,) = interactive["action"]["sections"]
    assert section["rows"][0] == {"id": "b0", "title": "Option 0", "description": "d"}
    assert len(section["rows"]) == 10


@pytest.mark.parametrize(
    "choices",
    [
        (Button(id="a", title="A title longer than twenty"),),
        (Button(id="a", title="A", description="needs a list row"),),
    ],
)
def test_build_buttons_that_do_not_fit_reply_buttons_become_a_list(
    choices: tuple[Button, ...],
) -> None:
    (payload,) = build_payloads(message(text="Pick", buttons=choices))
    assert payload["interactive"]["type"] == "list"


def test_build_list_rows_are_shortened_to_the_limits() -> None:
    long = Button(id="a", title="T" * 30, description="D" * 80)
    (payload,) = build_payloads(message(text="Pick", buttons=(long,)))
    (row,) = payload["interactive"]["action"]["sections"][0]["rows"]
    assert row["title"] == "T" * 23 + "…"
    assert row["description"] == "D" * 71 + "…"


def test_build_more_than_ten_buttons_is_refused_before_sending() -> None:
    with pytest.raises(PermanentSendError, match="11 buttons") as caught:
        build_payloads(message(text="Pick", buttons=buttons(11)))
    assert caught.value.error_code == "invalid_message"


def test_build_buttons_without_text_are_refused() -> None:
    with pytest.raises(PermanentSendError, match="need text"):
        build_payloads(message(buttons=buttons(2)))


def test_build_list_row_id_over_200_characters_is_refused() -> None:
    choices = tuple(Button(id=f"{i}" + "x" * 200, title="t") for i in range(4))
    with pytest.raises(PermanentSendError, match="row id"):
        build_payloads(message(text="Pick", buttons=choices))


def test_build_long_text_with_buttons_sends_text_first_and_the_body_last() -> None:
    text = "First sentence here. " * 100  # ~2,100 characters, over the 1,024 body limit
    payloads = build_payloads(message(text=text, buttons=buttons(2)))
    assert [p["type"] for p in payloads] == ["text", "text", "interactive"]
    body = payloads[-1]["interactive"]["body"]["text"]
    assert len(body) <= 1024
    joined = " ".join([p["text"]["body"] for p in payloads[:-1]] + [body])
    assert joined.split() == text.split()


def test_build_empty_message_is_refused() -> None:
    with pytest.raises(PermanentSendError, match="no text"):
        build_payloads(message(text="   "))


@pytest.mark.parametrize(
    ("media", "expected"),
    [
        (
            OutboundMedia(kind="image", url="https://example.com/a.png", caption="cap"),
            {"type": "image", "image": {"link": "https://example.com/a.png", "caption": "cap"}},
        ),
        (
            OutboundMedia(kind="video", id="123", caption="cap"),
            {"type": "video", "video": {"id": "123", "caption": "cap"}},
        ),
        (
            OutboundMedia(kind="document", id="123", file_name="invoice.pdf"),
            {"type": "document", "document": {"id": "123", "filename": "invoice.pdf"}},
        ),
        (OutboundMedia(kind="audio", id="123"), {"type": "audio", "audio": {"id": "123"}}),
        (OutboundMedia(kind="sticker", id="123"), {"type": "sticker", "sticker": {"id": "123"}}),
        (
            OutboundMedia(kind="image", id="123", url="https://example.com/a.png"),
            {"type": "image", "image": {"id": "123"}},
        ),
    ],
)
def test_build_media_by_link_or_id(media: OutboundMedia, expected: dict[str, Any]) -> None:
    assert build_payloads(message(media=media)) == [{**ENVELOPE, **expected}]


def test_build_media_without_id_or_url_is_refused() -> None:
    with pytest.raises(PermanentSendError, match="id or a url"):
        build_payloads(message(media=OutboundMedia(kind="image")))


def test_build_short_text_becomes_the_caption_of_captioned_media() -> None:
    media = OutboundMedia(kind="image", id="1")
    (payload,) = build_payloads(message(media=media, text="look"))
    assert payload["image"] == {"id": "1", "caption": "look"}


def test_build_audio_caption_and_text_follow_as_a_text_message() -> None:
    media = OutboundMedia(kind="audio", id="1", caption="listen")
    payloads = build_payloads(message(media=media, text="to this", reply_to="wamid.in"))
    assert [p["type"] for p in payloads] == ["audio", "text"]
    assert payloads[0]["context"] == {"message_id": "wamid.in"}
    assert payloads[1]["text"]["body"] == "listen\n\nto this"


def test_build_caption_over_1024_characters_goes_out_as_text() -> None:
    media = OutboundMedia(kind="image", id="1", caption="c" * 1025)
    payloads = build_payloads(message(media=media))
    assert payloads[0]["image"] == {"id": "1"}
    assert payloads[1]["text"]["body"] == "c" * 1025


def test_build_media_with_buttons_sends_media_then_the_interactive() -> None:
    media = OutboundMedia(kind="document", id="1")
    payloads = build_payloads(message(media=media, text="Pick", buttons=buttons(2)))
    assert [p["type"] for p in payloads] == ["document", "interactive"]


def test_split_text_prefers_paragraphs_then_sentences_then_words() -> None:
    assert split_text("One. Two.\n\nThree.", 12) == ["One. Two.", "Three."]
    assert split_text("One two. Three four five.", 12) == ["One two.", "Three four", "five."]
    assert split_text("alpha beta gamma", 11) == ["alpha beta", "gamma"]


def test_split_text_cuts_a_word_only_when_it_is_longer_than_the_limit() -> None:
    assert split_text("ab " + "x" * 12, 5) == ["ab", "xxxxx", "xxxxx", "xx"]


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("ab .!?\n"), max_size=300),
    limit=st.integers(min_value=1, max_value=40),
)
def test_split_text_parts_fit_and_keep_every_word(text: str, limit: int) -> None:
    parts = split_text(text, limit)
    assert all(0 < len(part) <= limit for part in parts)
    assert all(part == part.strip() for part in parts)
    assert "".join("".join(parts).split()) == "".join(text.split())
    words = text.split()
    if all(len(word) <= limit for word in words):
        assert " ".join(parts).split() == words  # no word was cut


def test_build_template_message_is_the_documented_shape() -> None:
    template = OutboundTemplate(name="order_update", language="en_US", parameters=("Ana", "A-17"))
    assert build_payloads(message(template=template, text="ignored")) == [
        {
            **ENVELOPE,
            "type": "template",
            "template": {
                "name": "order_update",
                "language": {"code": "en_US"},
                "components": [
                    {
                        "type": "body",
                        "parameters": [
                            {"type": "text", "text": "Ana"},
                            {"type": "text", "text": "A-17"},
                        ],
                    }
                ],
            },
        }
    ]


def test_build_template_without_parameters_has_no_components() -> None:
    template = OutboundTemplate(name="hello_world", language="en_US")
    (payload,) = build_payloads(message(template=template, reply_to="wamid.in"))
    assert payload["template"] == {"name": "hello_world", "language": {"code": "en_US"}}
    assert payload["context"] == {"message_id": "wamid.in"}
