"""The ``openai`` backend on what real providers answer beyond a plain completion: their
words on a retried failure, cut-off and filtered answers, text the JSON parser refuses."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tests.openai_strict import StrictOpenAI, call, completion
from webhook_bot_gateway.agents import (
    ContextTooLong,
    ModelBackendError,
    ModelMessage,
    OpenAIModel,
    OpenAIModelConfig,
    Runner,
    UserInput,
)
from webhook_bot_gateway.agents import _openai as openai_backend
from webhook_bot_gateway.store import SQLiteStore

from .conftest import make_registry

KEY = "sk-test-secret-123"
HI = [ModelMessage("user", "hi")]


class Sleeps:
    """An injectable sleep that records delays and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
async def api(aiohttp_server: Any) -> AsyncIterator[tuple[StrictOpenAI, TestServer]]:
    fake = StrictOpenAI()
    yield fake, await aiohttp_server(fake.app())
    assert fake.violations == []


@pytest.fixture
async def model(api: tuple[StrictOpenAI, TestServer]) -> AsyncIterator[OpenAIModel]:
    config = OpenAIModelConfig(base_url=str(api[1].make_url("/v1")), model="gpt-test")
    backend = OpenAIModel("fake", config, api_key=KEY, sleep=Sleeps())
    yield backend
    await backend.aclose()


QUOTA = {
    "error": {
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
}


async def test_openai_retried_failure_keeps_what_the_server_said(
    api: tuple[StrictOpenAI, TestServer], model: OpenAIModel, caplog: pytest.LogCaptureFixture
) -> None:
    """A 429 for an exhausted quota, retried and given up on, used to say only "HTTP 429": the
    operator could not tell a rate limit from a bill to pay."""
    fake, _ = api
    for _ in range(4):
        fake.answer(QUOTA, status=429)
    with caplog.at_level(logging.WARNING), pytest.raises(ModelBackendError) as caught:
        await model.complete(HI, [])
    said = (
        "HTTP 429: model said: You exceeded your current quota, please check your plan and"
        " billing details. (code insufficient_quota, type insufficient_quota)"
    )
    assert str(caught.value) == f"model backend 'fake': gave up after 4 tries: {said}"
    assert f"model fake: {said}; retry in 0.5s" in caplog.messages


async def test_openai_retried_failure_names_a_page_without_repeating_it(
    api: tuple[StrictOpenAI, TestServer], model: OpenAIModel
) -> None:
    fake, _ = api
    page = f"<html>502 Bad Gateway; Authorization: Bearer {KEY}</html>".encode()
    for _ in range(4):
        fake.answer(page, status=502, **{"Content-Type": "text/html"})
    with pytest.raises(ModelBackendError) as caught:
        await model.complete(HI, [])
    assert str(caught.value) == (
        "model backend 'fake': gave up after 4 tries:"
        f" HTTP 502 (content-type 'text/html', {len(page)} bytes)"
    )


async def test_openai_retry_after_beyond_max_backoff_keeps_what_the_server_said(
    api: tuple[StrictOpenAI, TestServer], model: OpenAIModel
) -> None:
    fake, _ = api
    fake.answer(QUOTA, status=429, **{"Retry-After": "3600"})
    with pytest.raises(ModelBackendError, match="asked to wait 3600s") as caught:
        await model.complete(HI, [])
    assert "You exceeded your current quota" in str(caught.value)


def _ending(content: str | None, reason: str, *calls: dict[str, Any]) -> dict[str, Any]:
    answer = completion(content, *calls)
    answer["choices"][0]["finish_reason"] = reason
    return answer


CUT = "To reset your password, open Settings, then do NOT press"


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (
            _ending(CUT, "length"),
            "the model's answer was cut off at a length limit (the server's max tokens, or"
            f" the model's context), finish_reason 'length': {len(CUT)} characters of text"
            " and 0 tool call(s), not used",
        ),
        (
            _ending(None, "length", call("c1", "lookup_invoice", '{"number": "INV')),
            "the model's answer was cut off at a length limit (the server's max tokens, or"
            " the model's context), finish_reason 'length': 0 characters of text and 1 tool"
            " call(s), not used",
        ),
        (
            _ending(CUT, "content_filter"),
            "the provider's content filter stopped the model's answer, finish_reason"
            f" 'content_filter': {len(CUT)} characters of text and 0 tool call(s), not used",
        ),
        (
            _ending(None, "content_filter"),
            "the provider's content filter stopped the model's answer, finish_reason"
            " 'content_filter': 0 characters of text and 0 tool call(s), not used",
        ),
        (
            _ending(CUT, "error"),
            "the server failed in the middle of the model's answer, finish_reason 'error':"
            f" {len(CUT)} characters of text and 0 tool call(s), not used",
        ),
    ],
    ids=["length-text", "length-call", "filtered-text", "filtered-nothing", "error"],
)
async def test_openai_answer_that_is_not_whole_is_an_error(
    api: tuple[StrictOpenAI, TestServer], model: OpenAIModel, answer: Any, error: str
) -> None:
    """A reply cut off at the length limit, or stopped by Azure's content filter part way,
    used to be sent to the user as if it were whole."""
    fake, _ = api
    fake.answer(answer)
    with pytest.raises(ModelBackendError) as caught:
        await model.complete(HI, [])
    assert str(caught.value) == f"model backend 'fake': {error}"
    assert len(fake.bodies) == 1  # the turn fails; the dispatcher retries it, then apologises


async def test_openai_cut_off_reply_is_never_sent(
    api: tuple[StrictOpenAI, TestServer],
    model: OpenAIModel,
    store: SQLiteStore,
    session_id: str,
) -> None:
    fake, _ = api
    fake.answer(_ending(CUT, "length"))
    runner = Runner(store, make_registry(model))
    with pytest.raises(ModelBackendError, match="cut off"):
        await runner.run_turn(session_id, UserInput("how do I reset my password?"))
    assert await store.all_messages(session_id) == []


async def test_openai_lone_surrogate_in_an_answer_does_not_lose_it(
    api: tuple[StrictOpenAI, TestServer],
    model: OpenAIModel,
    store: SQLiteStore,
    session_id: str,
) -> None:
    """A JSON escape of half a character (``\\ud83d`` alone: a server that cut an emoji in
    two) made the whole answer "not JSON", so the turn failed on every try."""
    fake, _ = api
    body = b'{"choices": [{"message": {"content": "Caf\\u00e9 \\ud83d\\ude00 and \\ud83d!"}}]}'
    fake.answer(body, **{"Content-Type": "application/json"})
    runner = Runner(store, make_registry(model))
    result = await runner.run_turn(session_id, UserInput("hi"))
    assert [reply.text for reply in result.replies] == ["Caf\u00e9 \U0001f600 and \ufffd!"]
    stored = await store.all_messages(session_id)
    assert stored[-1].text == "Caf\u00e9 \U0001f600 and \ufffd!"


async def test_openai_lone_surrogate_in_a_call_and_a_refusal_is_stored(
    api: tuple[StrictOpenAI, TestServer],
    model: OpenAIModel,
    store: SQLiteStore,
    session_id: str,
) -> None:
    fake, _ = api
    arguments = '{\\"number\\": \\"INV-1\\ud83d\\"}'
    function = f'{{"name": "lookup_invoice", "arguments": "{arguments}"}}'
    message = f'{{"content": null, "tool_calls": [{{"id": "c1", "function": {function}}}]}}'
    body = f'{{"choices": [{{"message": {message}}}]}}'
    fake.answer(body.encode(), **{"Content-Type": "application/json"})
    fake.answer(b'{"choices": [{"message": {"refusal": "No \\udc00."}}]}')
    await store.update_session(session_id, active_agent="billing")
    runner = Runner(store, make_registry(model, model))
    result = await runner.run_turn(session_id, UserInput("INV-1?"))
    assert [reply.text for reply in result.replies] == ["No \ufffd."]
    stored = await store.all_messages(session_id)
    assert stored[1].data["tool_calls"][0]["arguments"] == '{"number": "INV-1\ufffd"}'
    assert stored[2].text == "INV-1\ufffd: 49.00 EUR, paid"
    assert stored[3].data["refusal"] == "No \ufffd."


async def test_openai_error_in_a_200_answer_is_retried_as_its_code_says(
    api: tuple[StrictOpenAI, TestServer], model: OpenAIModel, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenRouter answers 200 when the model failed after it began, with the error in the body:
    it used to be "not a chat completion: choices: Field required", never retried."""
    fake, _ = api
    fake.answer({"error": {"code": 502, "message": "Provider returned error", "metadata": {}}})
    fake.answer(completion("Hello."))
    with caplog.at_level(logging.WARNING):
        response = await model.complete(HI, [])
    assert response.text == "Hello."
    assert (
        "model fake: HTTP 200: model said: Provider returned error (code 502); retry in 0.5s"
        in (caplog.messages)
    )


async def test_openai_error_in_a_200_answer_that_asks_no_retry_fails_at_once(
    api: tuple[StrictOpenAI, TestServer], model: OpenAIModel
) -> None:
    fake, _ = api
    fake.answer({"error": {"code": 402, "message": "Insufficient credits"}})
    with pytest.raises(ModelBackendError) as caught:
        await model.complete(HI, [])
    assert str(caught.value) == (
        "model backend 'fake': HTTP 200: model said: Insufficient credits (code 402)"
    )
    assert (caught.value.status, len(fake.bodies)) == (402, 1)


NOW = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC


@pytest.mark.parametrize(
    ("headers", "waited"),
    [
        ({"retry-after-ms": "1500", "Retry-After": "2"}, 1.5),  # Azure's, the finer one
        ({"Retry-After": "Thu, 01 Jan 2026 00:00:07 GMT"}, 7.0),  # an HTTP date
        ({"Retry-After": "Wed, 31 Dec 2025 23:59:00 GMT"}, 0.0),  # a date gone by
        ({"Retry-After": "soon"}, 0.5),  # neither: the backoff
    ],
    ids=["retry-after-ms", "http-date", "date-past", "garbage"],
)
async def test_openai_waits_as_long_as_the_server_asks_in_each_form(
    api: tuple[StrictOpenAI, TestServer], headers: dict[str, str], waited: float
) -> None:
    """A Retry-After given as an HTTP date, or Azure's retry-after-ms, was ignored: the
    backend retried after its own backoff, sooner than asked, and used up its tries."""
    fake, server = api
    fake.answer({"error": {"message": "slow down"}}, status=429, **headers)
    fake.answer(completion("Hello."))
    sleeps = Sleeps()
    config = OpenAIModelConfig(base_url=str(server.make_url("/v1")), model="gpt-test")
    backend = OpenAIModel("fake", config, sleep=sleeps, clock=lambda: NOW)
    try:
        assert (await backend.complete(HI, [])).text == "Hello."
    finally:
        await backend.aclose()
    assert sleeps.delays == [waited]


OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages"
        " resulted in 9312 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
VLLM_OVERFLOW = {  # vLLM's shape: no code, only its words
    "object": "error",
    "message": "This model's maximum context length is 4096 tokens. However, you requested"
    " 5000 tokens in the messages. Please reduce the length of the messages.",
    "type": "BadRequestError",
    "code": 400,
}


def _fits(most_users: int, overflow: dict[str, Any]) -> Any:
    """A model whose context holds at most ``most_users`` user messages."""

    def brain(body: dict[str, Any]) -> Any:
        users = [m for m in body["messages"] if m["role"] == "user"]
        if len(users) > most_users:
            return 400, overflow
        return completion(f"answer to {users[-1]['content']}")

    return brain


@pytest.mark.parametrize("overflow", [OVERFLOW, VLLM_OVERFLOW], ids=["openai", "vllm"])
async def test_a_history_longer_than_the_models_context_is_cut_until_it_fits(
    api: tuple[StrictOpenAI, TestServer],
    model: OpenAIModel,
    store: SQLiteStore,
    session_id: str,
    caplog: pytest.LogCaptureFixture,
    overflow: dict[str, Any],
) -> None:
    """A session whose history outgrew the model's window failed every later turn, for ever:
    each is now asked again with half as many earlier turns until the window holds them."""
    fake, _ = api
    runner = Runner(store, make_registry(model), max_turns=8)
    fake.brain = _fits(100, overflow)
    for n in range(7):
        await runner.run_turn(session_id, UserInput(f"question {n}"))
    fake.brain = _fits(3, overflow)  # a smaller model, or longer messages: 8 turns no longer fit
    fake.bodies.clear()
    with caplog.at_level(logging.INFO, logger="agents"):
        result = await runner.run_turn(session_id, UserInput("question 7"))
    assert [reply.text for reply in result.replies] == ["answer to question 7"]
    sent = [[m["content"] for m in body["messages"] if m["role"] == "user"] for body in fake.bodies]
    assert [len(users) for users in sent] == [8, 4, 2]
    assert sent[-1] == ["question 6", "question 7"]
    assert sum("asking again with the last" in message for message in caplog.messages) == 2


async def test_a_turn_the_models_context_cannot_hold_alone_fails(
    api: tuple[StrictOpenAI, TestServer],
    model: OpenAIModel,
    store: SQLiteStore,
    session_id: str,
) -> None:
    fake, _ = api
    fake.brain = _fits(0, OVERFLOW)
    runner = Runner(store, make_registry(model), max_turns=4)
    with pytest.raises(ContextTooLong, match="maximum context length"):
        await runner.run_turn(session_id, UserInput("a message longer than the whole window"))
    assert [len([m for m in b["messages"] if m["role"] == "user"]) for b in fake.bodies] == [1]
    assert await store.all_messages(session_id) == []


async def test_an_answer_past_the_size_bound_is_cut_and_not_kept_in_memory(
    api: tuple[StrictOpenAI, TestServer], model: OpenAIModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken server or proxy streaming for the whole timeout was read whole into memory."""
    monkeypatch.setattr(openai_backend, "MAX_ANSWER_BYTES", 1000)
    fake, _ = api
    huge = completion("x" * 2000)
    for _ in range(4):
        fake.answer(huge)
    with pytest.raises(ModelBackendError, match="AnswerTooLarge the answer (announces|passed)"):
        await model.complete(HI, [])
    fake.answer(completion("short"))
    assert (await model.complete(HI, [])).text == "short"


async def test_openai_content_sent_as_text_parts_is_read_as_text(
    api: tuple[StrictOpenAI, TestServer], model: OpenAIModel
) -> None:
    """Some compatible servers answer content as parts, as requests may send it: the answer was
    refused as "not a chat completion", on every try."""
    fake, _ = api
    parts = [{"type": "text", "text": "Open Settings, "}, {"type": "text", "text": "then Reset."}]
    fake.answer(completion(parts))
    assert (await model.complete(HI, [])).text == "Open Settings, then Reset."
    fake.answer(completion([{"type": "image_url", "image_url": {"url": "data:x"}}]))
    with pytest.raises(ModelBackendError, match="not a chat completion"):
        await model.complete(HI, [])


async def test_openai_429_without_retry_after_waits_for_the_spent_limit_to_reset(
    api: tuple[StrictOpenAI, TestServer], model: OpenAIModel
) -> None:
    """OpenAI tells when a spent limit resets (``x-ratelimit-reset-requests: 6m0s``) rather
    than in Retry-After: the retries came at 0.5, 1 and 2 s, each refused again."""
    fake, _ = api
    limited = {
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "1.5s",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "2s",
    }
    fake.answer({"error": {"message": "Rate limit reached"}}, status=429, **limited)
    fake.answer({"error": {"message": "Rate limit reached"}}, status=429)  # says nothing
    fake.answer(completion("hello"))
    assert (await model.complete(HI, [])).text == "hello"
    assert model._sleep.delays == [2.0, 1.0]  # the later reset; then the backoff's own
