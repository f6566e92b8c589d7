"""The public surface of agents/ and the ScriptedModel double's own promises."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from webhook_bot_gateway import agents
from webhook_bot_gateway.agents import ModelBackend, ModelMessage, OpenAIModel, RulesModel
from webhook_bot_gateway.agents.testing import (
    Hang,
    ScriptedModel,
    UnexpectedModelCall,
    call,
    reply,
    transfer,
)


def test_agents_exports_every_public_name_once() -> None:
    for name in agents.__all__:
        assert hasattr(agents, name), name
    assert len(agents.__all__) == len(set(agents.__all__))


def test_agents_import_loads_neither_channels_nor_gateway() -> None:
    code = (
        "import sys, webhook_bot_gateway.agents.testing, webhook_bot_gateway.agents.demo;"
        "pkg = 'webhook_bot_gateway.';"
        "print(sorted({pkg + 'channels', pkg + 'gateway'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("backend", [ScriptedModel, RulesModel, OpenAIModel])
def test_backends_match_the_model_backend_interface(backend: type) -> None:
    for name in ("complete", "aclose"):
        want = inspect.signature(getattr(ModelBackend, name)).parameters
        got = inspect.signature(getattr(backend, name)).parameters
        assert list(got) == list(want), (backend, name)
        assert inspect.iscoroutinefunction(getattr(backend, name))


async def test_scripted_model_replays_and_records() -> None:
    model = ScriptedModel(reply("a"), call("t", {"x": 1}), transfer("b"))
    messages = [ModelMessage("user", "hi")]
    assert (await model.complete(messages, [])).text == "a"
    assert (await model.complete(messages, [])).tool_calls[0].name == "t"
    assert (await model.complete(messages, [])).tool_calls[0].name == "transfer_to_b"
    assert [c.messages for c in model.calls] == [tuple(messages)] * 3
    model.assert_done()


async def test_scripted_model_fails_on_unexpected_call() -> None:
    model = ScriptedModel()
    with pytest.raises(UnexpectedModelCall, match="unexpected model call #1"):
        await model.complete([], [])


def test_scripted_model_fails_on_unused_steps() -> None:
    with pytest.raises(AssertionError, match="1 scripted step"):
        ScriptedModel(reply("never")).assert_done()


async def test_scripted_model_raises_exception_steps_and_runs_functions() -> None:
    model = ScriptedModel(ValueError("boom"), lambda messages, tools: reply(str(len(messages))))
    with pytest.raises(ValueError, match="boom"):
        await model.complete([], [])
    assert (await model.complete([ModelMessage("user", "x")], [])).text == "1"


async def test_hang_step_waits_for_release() -> None:
    hang = Hang()
    model = ScriptedModel(hang)
    hang.release.set()
    assert (await model.complete([], [])).text is None
    assert hang.started.is_set()
