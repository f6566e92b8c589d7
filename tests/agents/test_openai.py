"""The ``openai`` backend against a fake OpenAI-compatible server on loopback."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from pydantic import ValidationError

from tests.openai_strict import Rules, StrictOpenAI, call, completion
from webhook_bot_gateway.agents import (
    AgentsConfig,
    ImagePart,
    ModelBackendError,
    ModelMessage,
    OpenAIModel,
    OpenAIModelConfig,
    Reply,
    Runner,
    UserInput,
    build_registry,
)
from webhook_bot_gateway.agents._openai import without_secret
from webhook_bot_gateway.store import SQLiteStore

from .conftest import make_registry

KEY = "sk-test-secret-123"
LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {"number": {"title": "Number", "type": "string"}},
    "required": ["number"],
    "additionalProperties": False,
}
NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}


def transfer_tool(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": f"transfer_to_{name}",
            "description": f"Hand the conversation to the {name} agent.",
            "parameters": NO_PARAMETERS,
        },
    }


LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_invoice",
        "description": "Look up an invoice by number.",
        "parameters": LOOKUP_SCHEMA,
    },
}


wire_call = call


def assistant_call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [wire_call(call_id, name, arguments)],
    }


def tool_result(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "content": content, "tool_call_id": call_id}


class Sleeps:
    """An injectable sleep that records delays and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture(params=[Rules(), Rules(vllm=True)], ids=["strict", "vllm-strict"])
async def fake(
    request: pytest.FixtureRequest, aiohttp_server: Any
) -> AsyncIterator[tuple[StrictOpenAI, TestServer]]:
    fake = StrictOpenAI(request.param)
    yield fake, await aiohttp_server(fake.app())
    assert fake.violations == []


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def model(
    fake: tuple[StrictOpenAI, TestServer], sleeps: Sleeps
) -> AsyncIterator[OpenAIModel]:
    _, test_server = fake
    config = OpenAIModelConfig(base_url=str(test_server.make_url("/v1")), model="gpt-test")
    backend = OpenAIModel("fake", config, api_key=KEY, sleep=sleeps)
    yield backend
    await backend.aclose()


async def test_openai_plain_answer_exact_request(
    fake: tuple[StrictOpenAI, TestServer], model: OpenAIModel, store: SQLiteStore, session_id: str
) -> None:
    api, _ = fake
    api.answer(completion("Hello from the model."))
    runner = Runner(store, make_registry(model, model))
    result = await runner.run_turn(session_id, UserInput("hi"))
    assert result.replies == (Reply("Hello from the model.", "triage"),)
    assert api.bodies == [
        {
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": "You route."},
                {"role": "user", "content": "hi"},
            ],
            "tools": [transfer_tool("billing"), transfer_tool("human")],
        }
    ]
    assert api.headers[0]["Authorization"] == f"Bearer {KEY}"
    assert api.headers[0]["Content-Type"] == "application/json"


async def test_openai_tool_call_then_answer(
    fake: tuple[StrictOpenAI, TestServer], model: OpenAIModel, store: SQLiteStore, session_id: str
) -> None:
    api, _ = fake
    api.answer(completion(None, wire_call("call_1", "lookup_invoice", '{"number":"INV-9"}')))
    api.answer(completion("INV-9 is paid."))
    await store.update_session(session_id, active_agent="billing")
    runner = Runner(store, make_registry(model, model))
    result = await runner.run_turn(session_id, UserInput("INV-9?"))
    assert result.replies == (Reply("INV-9 is paid.", "billing"),)
    system_user = [
        {"role": "system", "content": "You do billing."},
        {"role": "user", "content": "INV-9?"},
    ]
    tools = [LOOKUP_TOOL, transfer_tool("triage")]
    assert api.bodies[0] == {"model": "gpt-test", "messages": system_user, "tools": tools}
    assert api.bodies[1] == {
        "model": "gpt-test",
        "messages": [
            *system_user,
            assistant_call("call_1", "lookup_invoice", '{"number":"INV-9"}'),
            tool_result("call_1", "INV-9: 49.00 EUR, paid"),
        ],
        "tools": tools,
    }


async def test_openai_transfer_to_billing(
    fake: tuple[StrictOpenAI, TestServer], model: OpenAIModel, store: SQLiteStore, session_id: str
) -> None:
    api, _ = fake
    api.answer(completion(None, wire_call("call_t", "transfer_to_billing")))
    api.answer(completion("Billing here, which invoice?"))
    runner = Runner(store, make_registry(model, model))
    result = await runner.run_turn(session_id, UserInput("a refund"))
    assert result.agent_after == "billing"
    assert result.replies == (Reply("Billing here, which invoice?", "billing"),)
    assert api.bodies[1] == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "You do billing."},
            {"role": "user", "content": "a refund"},
            assistant_call("call_t", "transfer_to_billing"),
            tool_result("call_t", "Transferred to billing."),
        ],
        "tools": [LOOKUP_TOOL, transfer_tool("triage")],
    }


async def test_openai_malformed_tool_calls_answered_as_tool_errors(
    fake: tuple[StrictOpenAI, TestServer], model: OpenAIModel, store: SQLiteStore, session_id: str
) -> None:
    api, _ = fake
    bad_json = wire_call("c1", "lookup_invoice", '{"number": "INV-1"')
    unknown = wire_call("c2", "delete_everything", "{}")
    api.answer(completion(None, bad_json, unknown))
    api.answer(completion("Sorry, let me try again later."))
    await store.update_session(session_id, active_agent="billing")
    runner = Runner(store, make_registry(model, model))
    result = await runner.run_turn(session_id, UserInput("INV-1"))
    assert [r.text for r in result.replies] == ["Sorry, let me try again later."]
    sent = api.bodies[1]["messages"]
    replayed = [wire_call("c1", "lookup_invoice", "{}"), unknown]  # never the broken JSON
    assert sent[2] == {"role": "assistant", "content": None, "tool_calls": replayed}
    assert sent[3]["tool_call_id"] == "c1"
    assert sent[3]["content"].startswith(
        "error: the arguments are not valid JSON (Expecting ',' delimiter"
    )
    assert sent[4]["tool_call_id"] == "c2"
    assert sent[4]["content"].startswith("error: unknown tool 'delete_everything'; the tools")


async def test_openai_429_then_success_honours_retry_after(
    fake: tuple[StrictOpenAI, TestServer], model: OpenAIModel, sleeps: Sleeps
) -> None:
    api, _ = fake
    rate_limited = {"error": {"message": "slow down", "type": "rate_limit"}}
    api.answer(rate_limited, status=429, **{"Retry-After": "7"})
    api.answer({"error": {"message": "oops"}}, status=503)
    api.answer(completion("finally"))
    response = await model.complete([ModelMessage("user", "hi")], [])
    assert response.text == "finally"
    assert sleeps.delays == [7.0, 1.0]  # Retry-After, then the backoff of the second try
    assert len(api.bodies) == 3
    assert api.bodies[0] == api.bodies[2]


async def test_openai_retry_after_longer_than_max_backoff_gives_up_at_once(
    fake: tuple[StrictOpenAI, TestServer], model: OpenAIModel, sleeps: Sleeps
) -> None:
    """A 429 asking for an hour used to be slept on, until the turn timed out, on every try."""
    api, _ = fake
    api.answer({"error": {"message": "quota"}}, status=429, **{"Retry-After": "3600"})
    with pytest.raises(ModelBackendError) as caught:
        await model.complete([ModelMessage("user", "hi")], [])
    assert str(caught.value) == (
        "model backend 'fake': HTTP 429: model said: quota; it asked to wait 3600s"
        " (Retry-After), more than max_backoff (30s): gave up after 1 tries"
    )
    assert caught.value.retry_after == 3600.0  # the dispatcher waits that long before the turn
    assert (sleeps.delays, len(api.bodies)) == ([], 1)


async def test_openai_wait_past_the_turns_deadline_fails_the_turn_at_once(
    fake: tuple[StrictOpenAI, TestServer],
    model: OpenAIModel,
    sleeps: Sleeps,
    store: SQLiteStore,
    session_id: str,
) -> None:
    """A Retry-After within max_backoff but beyond the turn's time left: the model call fails
    now (a model error the dispatcher retries), rather than wait for the turn to time out."""
    api, _ = fake
    api.answer({"error": {"message": "busy"}}, status=503, **{"Retry-After": "20"})
    runner = Runner(store, make_registry(model), turn_timeout=10)
    with pytest.raises(
        ModelBackendError, match="HTTP 503: model said: busy; the next try would wait 20s, and"
    ) as caught:
        await runner.run_turn(session_id, UserInput("hi"))
    assert caught.value.retry_after == 20.0
    assert (sleeps.delays, len(api.bodies)) == ([], 1)


async def test_openai_retry_within_the_turns_time_left_is_waited_for(
    fake: tuple[StrictOpenAI, TestServer],
    model: OpenAIModel,
    sleeps: Sleeps,
    store: SQLiteStore,
    session_id: str,
) -> None:
    api, _ = fake
    api.answer({"error": {"message": "busy"}}, status=503, **{"Retry-After": "20"})
    api.answer(completion("Hello."))
    runner = Runner(store, make_registry(model), turn_timeout=60)
    result = await runner.run_turn(session_id, UserInput("hi"))
    assert [r.text for r in result.replies] == ["Hello."]
    assert sleeps.delays == [20.0]


def test_openai_default_request_timeout_leaves_the_turn_time_for_retries() -> None:
    """With timeout = turn_timeout (60 and 60) a hung request used up the whole turn, and
    max_retries never applied to a timeout."""
    config = AgentsConfig.model_validate({"models": {"gpt": {"model": "m"}}})
    timeout, retries = config.models["gpt"].timeout, config.models["gpt"].max_retries
    assert (timeout, retries, config.turn_timeout) == (30.0, 3, 120.0)
    assert timeout * 3 < config.turn_timeout  # three hung tries and their backoff fit in a turn
    assert config.timing_warnings() == []


def test_openai_request_timeout_that_uses_up_the_turn_is_warned_about() -> None:
    models = {"gpt": {"model": "m", "timeout": 60}, "fast": {"model": "m", "timeout": 5}}
    config = AgentsConfig.model_validate({"turn_timeout": 60, "models": models})
    assert config.timing_warnings() == [
        "agents.models.gpt.timeout (60s) is not below half of agents.turn_timeout (60s): a"
        " request that hangs uses up the turn before it can be tried again (max_retries)"
    ]


async def test_openai_gives_up_after_retries_without_leaking_the_key(
    fake: tuple[StrictOpenAI, TestServer],
    model: OpenAIModel,
    sleeps: Sleeps,
    caplog: pytest.LogCaptureFixture,
) -> None:
    api, _ = fake
    for _ in range(4):
        api.answer({"error": {"message": "busy"}}, status=500)
    with caplog.at_level(logging.DEBUG), pytest.raises(ModelBackendError) as caught:
        await model.complete([ModelMessage("user", "hi")], [])
    assert str(caught.value) == (
        "model backend 'fake': gave up after 4 tries: HTTP 500: model said: busy"
    )
    assert sleeps.delays == [0.5, 1.0, 2.0]
    assert KEY not in caplog.text
    assert KEY not in repr(model)


async def test_openai_client_error_is_not_retried(
    fake: tuple[StrictOpenAI, TestServer], model: OpenAIModel, sleeps: Sleeps
) -> None:
    api, _ = fake
    api.answer({"error": {"message": "model not found"}}, status=404)
    with pytest.raises(ModelBackendError) as caught:
        await model.complete([ModelMessage("user", "hi")], [])
    assert str(caught.value) == "model backend 'fake': HTTP 404: model said: model not found"
    assert caught.value.status == 404
    assert sleeps.delays == []


# A proxy in front of the model server that answers its refusal with the request's headers.
PROXY_PAGE = (
    f"<html><body>Forbidden by proxy. Request headers: Authorization: Bearer {KEY}</body></html>"
)


async def test_openai_refusal_that_is_not_json_is_not_repeated(
    fake: tuple[StrictOpenAI, TestServer], model: OpenAIModel, caplog: pytest.LogCaptureFixture
) -> None:
    """The 4xx page of a proxy quoting the request: the error names the status, the media type
    and the length, never the page (the key was in it, and anything else may be)."""
    api, _ = fake
    api.answer(PROXY_PAGE.encode(), status=403, **{"Content-Type": "text/html"})
    with caplog.at_level(logging.DEBUG), pytest.raises(ModelBackendError) as caught:
        await model.complete([ModelMessage("user", "hi")], [])
    assert str(caught.value) == (
        f"model backend 'fake': HTTP 403 (content-type 'text/html', {len(PROXY_PAGE)} bytes)"
    )
    assert caught.value.status == 403
    assert api.headers[0]["Authorization"] == f"Bearer {KEY}"  # it was sent, and echoed
    assert KEY not in caplog.text


@pytest.mark.parametrize(
    ("status", "answer", "error"),
    [
        (
            401,  # OpenAI masks the key itself: kept, it is not the key
            {
                "error": {
                    "message": "Incorrect API key provided: sk-test-****-123. You can find...",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            },
            "HTTP 401: model said: Incorrect API key provided: sk-test-****-123. You can find..."
            " (code invalid_api_key, type invalid_request_error)",
        ),
        (
            401,  # a provider that quotes the key whole, in any case, in any field
            {"error": {"message": f"key '{KEY}' is not valid", "code": KEY.upper()}},
            "HTTP 401: model said: key '<redacted>' is not valid (code <redacted>)",
        ),
        (
            404,  # vLLM's form, its code a number
            {
                "object": "error",
                "message": "The model `gpt-test` does not exist.",
                "type": "NotFoundError",
                "param": None,
                "code": 404,
            },
            "HTTP 404: model said: The model `gpt-test` does not exist. (code 404, type"
            " NotFoundError)",
        ),
        (
            404,  # Ollama's native form
            {"error": "model 'gpt-test' not found"},
            "HTTP 404: model said: model 'gpt-test' not found",
        ),
        (
            400,  # the key taken out before the message is cut short: no piece of it is left
            {"error": {"message": "x" * 295 + KEY + "\n\x1b[31mred"}},
            "HTTP 400: model said: " + "x" * 295 + "<red…",
        ),
        (
            400,  # on one line, without control characters (a log line, a cell)
            {"error": {"message": "bad\r\nrequest:\x1b[31m red\tnow"}},
            "HTTP 400: model said: bad request: [31m red now",
        ),
        (422, {"detail": [{"msg": KEY}]}, "HTTP 422 (content-type 'application/json', 43 bytes)"),
        (400, {"error": {"code": 400}}, "HTTP 400 (content-type 'application/json', 24 bytes)"),
        (400, [KEY], "HTTP 400 (content-type 'application/json', 22 bytes)"),
    ],
    ids=[
        "openai-masked",
        "key-echoed",
        "vllm",
        "ollama",
        "cut-after-redaction",
        "one-line",
        "json-without-message",
        "error-without-message",
        "not-an-object",
    ],
)
async def test_openai_json_refusal_keeps_what_the_model_said_without_the_key(
    fake: tuple[StrictOpenAI, TestServer],
    model: OpenAIModel,
    status: int,
    answer: Any,
    error: str,
) -> None:
    api, _ = fake
    api.answer(answer, status=status)
    with pytest.raises(ModelBackendError) as caught:
        await model.complete([ModelMessage("user", "hi")], [])
    assert str(caught.value) == f"model backend 'fake': {error}"
    assert caught.value.status == status
    assert KEY.lower() not in str(caught.value).lower()


async def test_openai_empty_answer_names_its_finish_reason_without_the_key(
    fake: tuple[StrictOpenAI, TestServer], model: OpenAIModel
) -> None:
    api, _ = fake
    answer = completion(None)
    answer["choices"][0]["finish_reason"] = f"stop:{KEY}"
    api.answer(answer)
    with pytest.raises(ModelBackendError) as caught:
        await model.complete([ModelMessage("user", "hi")], [])
    assert str(caught.value) == (
        "model backend 'fake': the model gave an empty answer (no text, no tool call),"
        " finish_reason 'stop:<redacted>'"
    )


@pytest.mark.parametrize(
    ("key", "text", "cleaned"),
    [
        ("sk-a/b+c d", "raw sk-a/b+c d, url sk-a%2Fb%2Bc%20d, form sk-a%2Fb%2Bc+d", None),
        ('k"ey\\1234', 'json "k\\"ey\\\\1234"', 'json "<redacted>"'),
        ("abc", "abc stays: too short", "abc stays: too short"),
        (None, "no key", "no key"),
    ],
    ids=["raw-percent-form", "json-escaped", "short", "none"],
)
def test_openai_key_is_taken_out_in_each_form_it_may_be_quoted(
    key: str | None, text: str, cleaned: str | None
) -> None:
    result = without_secret(text, key)
    if cleaned is None:
        assert result == "raw <redacted>, url <redacted>, form <redacted>"
    else:
        assert result == cleaned


async def test_openai_not_a_completion_is_an_error(
    fake: tuple[StrictOpenAI, TestServer], model: OpenAIModel
) -> None:
    api, _ = fake
    api.answer({"choices": []})
    with pytest.raises(ModelBackendError, match="without choices"):
        await model.complete([ModelMessage("user", "hi")], [])


SECRET_PAGE = "internal proxy 10.0.0.5 user=crm password=hunter2"


@pytest.mark.parametrize(
    ("answer", "content_type", "problem"),
    [
        (
            b'{"choices": [{"message": {"content": "' + SECRET_PAGE.encode(),
            "application/json",
            "not JSON (EOF while parsing a string at line 1 column 87)"
            " (content-type 'application/json', 87 bytes)",
        ),
        (
            f"<html><body>{SECRET_PAGE}</body></html>".encode(),
            "text/html; charset=utf-8",
            "not JSON (expected value at line 1 column 1) (content-type 'text/html', 75 bytes)",
        ),
        (
            {"choices": [{"text": SECRET_PAGE}]},
            None,
            "not a chat completion: choices.0.message: Field required"
            " (content-type 'application/json', 76 bytes)",
        ),
        (
            {"choices": [{"message": {"content": ["x"]}}, {"message": 1}], "note": SECRET_PAGE},
            None,
            "not a chat completion: choices.0.message.content: Input should be a valid string"
            " (and 1 more error(s)) (content-type 'application/json', 123 bytes)",
        ),
    ],
    ids=["truncated-json", "html-page", "missing-field", "wrong-type"],
)
async def test_openai_malformed_answer_says_what_is_wrong_without_the_body(
    fake: tuple[StrictOpenAI, TestServer],
    model: OpenAIModel,
    answer: Any,
    content_type: str | None,
    problem: str,
) -> None:
    api, _ = fake
    api.answer(answer, **({"Content-Type": content_type} if content_type else {}))
    with pytest.raises(ModelBackendError) as caught:
        await model.complete([ModelMessage("user", "hi")], [])
    assert str(caught.value) == f"model backend 'fake': {problem}"
    assert "hunter2" not in str(caught.value)


async def test_openai_request_timeout_is_retried_then_fails(
    fake: tuple[StrictOpenAI, TestServer], sleeps: Sleeps
) -> None:
    api, test_server = fake
    api.answer("hang")
    config = OpenAIModelConfig(
        base_url=str(test_server.make_url("/v1")), model="m", timeout=0.05, max_retries=0
    )
    backend = OpenAIModel("slow", config, sleep=sleeps)
    try:
        with pytest.raises(ModelBackendError, match="gave up after 1 tries: TimeoutError"):
            await backend.complete([ModelMessage("user", "hi")], [])
    finally:
        api.hang.set()
        await backend.aclose()
    assert "Authorization" not in api.headers[0]


async def test_openai_arguments_sent_as_object_are_accepted(
    fake: tuple[StrictOpenAI, TestServer], model: OpenAIModel
) -> None:
    api, _ = fake
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    api.answer(completion(None, call))
    response = await model.complete([ModelMessage("user", "hi")], [])
    assert response.tool_calls[0].arguments == '{"a": 1}'


async def test_openai_registry_reads_key_from_named_variable(
    fake: tuple[StrictOpenAI, TestServer],
) -> None:
    api, test_server = fake
    api.answer(completion("ok"))
    config = AgentsConfig.model_validate(
        {
            "starting_agent": "a",
            "models": {
                "local": {
                    "base_url": str(test_server.make_url("/v1")),
                    "model": "llama",
                    "api_key_env": "MY_KEY",
                }
            },
            "list": [{"name": "a", "model": "local"}],
        }
    )
    registry = build_registry(config, environ={"MY_KEY": KEY})
    try:
        agent = registry.starting_agent
        await registry.model_for(agent).complete([ModelMessage("user", "x")], [])
    finally:
        await registry.aclose()
    assert api.headers[0]["Authorization"] == f"Bearer {KEY}"
    assert api.bodies[0]["model"] == "llama"


PNG = b"\x89PNG\r\n\x1a\n fake image bytes"


async def _vision_model(test_server: TestServer, *, vision: bool) -> OpenAIModel:
    config = OpenAIModelConfig(
        base_url=str(test_server.make_url("/v1")), model="gpt-test", vision=vision
    )
    return OpenAIModel("fake", config, api_key=KEY, sleep=Sleeps())


async def test_openai_vision_model_gets_this_turns_images_as_image_parts(
    fake: tuple[StrictOpenAI, TestServer], store: SQLiteStore, session_id: str
) -> None:
    api, test_server = fake
    backend = await _vision_model(test_server, vision=True)
    api.answer(completion("A cat."))
    api.answer(completion("Still a cat."))
    runner = Runner(store, make_registry(backend, backend))
    try:
        photo = ImagePart("image/png", PNG)
        await runner.run_turn(session_id, UserInput("what is this?", images=(photo,)))
        await runner.run_turn(session_id, UserInput("and now?"))
    finally:
        await backend.aclose()
    data_url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert api.bodies[0]["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": data_url}},
        ],
    }
    # The next turn does not send the image again: the history keeps its text only.
    assert [m["content"] for m in api.bodies[1]["messages"] if m["role"] == "user"] == [
        "what is this?",
        "and now?",
    ]
    assert "image" not in repr(await store.get_branch(session_id))


async def test_openai_model_without_vision_gets_text_only(
    fake: tuple[StrictOpenAI, TestServer], store: SQLiteStore, session_id: str
) -> None:
    api, test_server = fake
    backend = await _vision_model(test_server, vision=False)
    api.answer(completion("I cannot see."))
    runner = Runner(store, make_registry(backend, backend))
    try:
        photo = ImagePart("image/png", PNG)
        await runner.run_turn(session_id, UserInput("[attached image: cat.png]", images=(photo,)))
    finally:
        await backend.aclose()
    assert api.bodies[0]["messages"][-1] == {"role": "user", "content": "[attached image: cat.png]"}
    assert "fake image bytes" not in repr(photo)


class GatedOpenAI:
    """Holds every request until the test lets it go; counts requests in flight per model."""

    def __init__(self) -> None:
        self.in_flight: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.arrivals = 0
        self.peers: set[Any] = set()  # client (host, port): one per connection used
        self._gate = asyncio.Semaphore(0)
        self._changed = asyncio.Condition()

    async def handle(self, request: web.Request) -> web.Response:
        model = str((await request.json())["model"])
        assert request.transport is not None
        self.peers.add(request.transport.get_extra_info("peername"))
        async with self._changed:
            self.arrivals += 1
            self.in_flight[model] += 1
            self.peak[model] = max(self.peak[model], self.in_flight[model])
            self._changed.notify_all()
        try:
            await self._gate.acquire()
        finally:
            self.in_flight[model] -= 1
        return web.json_response(completion(f"answer of {model}"))

    async def until(self, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate()`` holds; re-checked at each arrival."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout=10)

    def release(self, count: int) -> None:
        """Let ``count`` held (or future) requests answer."""
        for _ in range(count):
            self._gate.release()


@pytest.fixture
async def gated(aiohttp_server: Any) -> tuple[GatedOpenAI, TestServer]:
    api = GatedOpenAI()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", api.handle)
    return api, await aiohttp_server(app)


def _gated_model(server: TestServer, model: str, **limits: int) -> OpenAIModel:
    config = OpenAIModelConfig(base_url=str(server.make_url("/v1")), model=model, **limits)
    return OpenAIModel(model, config, sleep=Sleeps())


def _start(backend: OpenAIModel, count: int) -> list[asyncio.Task[Any]]:
    hi = [ModelMessage("user", "hi")]
    return [asyncio.create_task(backend.complete(hi, [])) for _ in range(count)]


async def _finish(api: GatedOpenAI, tasks: list[asyncio.Task[Any]]) -> list[Any]:
    api.release(len(tasks))
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_openai_default_pool_holds_more_than_aiohttps_100_in_flight(
    gated: tuple[GatedOpenAI, TestServer],
) -> None:
    api, server = gated
    backend = _gated_model(server, "wide")
    tasks = _start(backend, 150)
    try:
        await api.until(lambda: api.in_flight["wide"] == 150)
    finally:
        results = await _finish(api, tasks)
        await backend.aclose()
    assert [r.text for r in results] == ["answer of wide"] * 150
    assert len(api.peers) == 150


async def test_openai_connections_are_kept_alive_and_reused(
    gated: tuple[GatedOpenAI, TestServer],
) -> None:
    api, server = gated
    backend = _gated_model(server, "m")
    try:
        for wave in (1, 2):
            tasks = _start(backend, 20)
            await api.until(lambda wave=wave: api.arrivals == 20 * wave)  # type: ignore[misc]
            assert all(r.text for r in await _finish(api, tasks))
    finally:
        await backend.aclose()
    assert len(api.peers) == 20  # the second wave used the first wave's connections


@pytest.mark.parametrize("limits", [{"max_concurrency": 3}, {"max_connections": 3}])
async def test_openai_never_more_requests_in_flight_than_the_bound(
    gated: tuple[GatedOpenAI, TestServer], limits: dict[str, int]
) -> None:
    api, server = gated
    backend = _gated_model(server, "m", **limits)
    tasks = _start(backend, 7)
    try:
        await api.until(lambda: api.in_flight["m"] == 3)
        for arrived in range(4, 8):  # one answer lets exactly one waiting request in
            api.release(1)
            await api.until(lambda arrived=arrived: api.arrivals == arrived)  # type: ignore[misc]
            assert api.in_flight["m"] == 3
    finally:
        results = await _finish(api, tasks)
        await backend.aclose()
    assert [r.text for r in results] == ["answer of m"] * 7
    assert api.peak["m"] == 3


async def test_openai_concurrency_bound_is_per_model(
    gated: tuple[GatedOpenAI, TestServer],
) -> None:
    api, server = gated
    narrow = _gated_model(server, "narrow", max_concurrency=2)
    wide = _gated_model(server, "wide", max_concurrency=5)
    tasks = _start(narrow, 6) + _start(wide, 6)
    try:
        await api.until(lambda: api.in_flight["narrow"] == 2 and api.in_flight["wide"] == 5)
        assert api.arrivals == 7
    finally:
        results = await _finish(api, tasks)
        await narrow.aclose()
        await wide.aclose()
    assert [r.text for r in results] == ["answer of narrow"] * 6 + ["answer of wide"] * 6
    assert api.peak == Counter({"narrow": 2, "wide": 5})


def test_openai_pool_defaults_sized_for_turns_waiting_on_a_model() -> None:
    config = OpenAIModelConfig(model="m")
    assert (config.max_connections, config.max_concurrency) == (2000, None)
    assert config.concurrency == 2000
    assert OpenAIModelConfig(model="m", max_concurrency=10).concurrency == 10


@pytest.mark.parametrize(
    ("limits", "key", "message"),
    [
        ({"max_connections": 0}, "max_connections", "greater than 0"),
        ({"max_concurrency": 0}, "max_concurrency", "greater than 0"),
        ({"max_connections": 10, "max_concurrency": 11}, None, "max_concurrency (11) is above"),
    ],
)
def test_openai_pool_limits_validated_naming_the_key(
    limits: dict[str, int], key: str | None, message: str
) -> None:
    raw = {"starting_agent": "a", "models": {"local": {"model": "m", **limits}}}
    with pytest.raises(ValidationError) as caught:
        AgentsConfig.model_validate(raw)
    error = caught.value.errors()[0]
    assert error["loc"] == ("models", "local", *([key] if key else []))
    assert message in error["msg"]
