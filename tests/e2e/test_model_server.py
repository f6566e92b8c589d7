"""The real ``gateway serve`` with the ``openai`` backend pointed at the strict fake on loopback
(tests/openai_strict.py): a long conversation with tools, handoffs, a human phase, a dead letter
and a restart sends no request that OpenAI, vLLM or an offered-only server would refuse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pytest_aiohttp import AiohttpServer

from tests.openai_strict import Rules, StrictOpenAI, call, completion, tool_calls_in

from .conftest import MakeGateway, Platforms
from .gateway_proc import ADMIN_TOKEN, BOT, Gateway, eventually
from .webhooks import post_until_ok, telegram_text

CHAT = 4242
FIRST_UPDATE = 9000
SESSION = f"telegram-{BOT}-{CHAT}"
APOLOGY = "Sorry, that went wrong. A person will look into it."
HANDED_BACK = "I'm handing you back to the bot."
OPERATOR_MARK = "[Operator Alice, a person and not you, wrote this to the user:] "
TOOLS_MODULE = '''
from webhook_bot_gateway.agents import tool


@tool
def explode(reason: str = "") -> str:
    """A tool that always raises."""
    raise RuntimeError("the invoice service is down")
'''


def agents(base_url: str, history: str) -> str:
    """Three bot-facing agents on the strict fake, and a human queue."""
    return f"""
[agents]
starting_agent = "triage"
max_turns = 3  # fewer than the human phase has messages: its reason must survive
turn_timeout = 30

[agents.models.strict]
base_url = "{base_url}/v1"
model = "strict-model"
max_retries = 0

[[agents.list]]
name = "triage"
instructions = "You are triage."
model = "strict"
handoffs = ["billing", "human"]
handoff_history = "{history}"

[[agents.list]]
name = "billing"
instructions = "You are billing."
model = "strict"
handoffs = ["triage", "human"]
tools = ["webhook_bot_gateway.agents.demo.lookup_invoice", "e2e_tools.explode"]
handoff_history = "{history}"

[[agents.list]]
name = "human"
kind = "human"
handoff_reply = "A person will answer."
"""


def _agent_of(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"]).removeprefix("You are ").rstrip(".")


def _last_user(body: dict[str, Any]) -> str:
    return next(str(m["content"]) for m in reversed(body["messages"]) if m["role"] == "user")


def brain(body: dict[str, Any]) -> Any:
    """A model that acts on the words of the last user message, once per turn."""
    if body["messages"][-1]["role"] != "user":
        return completion(f"{_agent_of(body)}: done")
    text, agent = _last_user(body).lower(), _agent_of(body)
    if "fail" in text:
        return 500, {"error": {"message": "the model server is down"}}
    for word, target in (("person", "human"), ("bill", "billing"), ("menu", "triage")):
        if word in text and target != agent:
            return completion(None, call(f"call_{word}", f"transfer_to_{target}"))
    if agent == "billing":
        return _billing(text)
    return completion(f"{agent}: {text}")


def _billing(text: str) -> Any:
    if "parallel" in text:
        first = call("p1", "lookup_invoice", '{"number": "INV-1001"}')
        return completion(None, first, call("p2", "lookup_invoice", '{"number": "INV-1002"}'))
    if "broken" in text:
        return completion(
            None,
            call("b1", "lookup_invoice", '{"number": "INV-1004'),
            call("b2", "lookup_invoice", "[1, 2]"),
        )
    if "raise" in text:
        return completion(None, call("r1", "explode", "{}"))
    if "invoice" in text:
        return completion(None, call("i1", "lookup_invoice", '{"number": "INV-1003"}'))
    return completion(f"billing: {text}")


def sloppy(body: dict[str, Any]) -> Any:
    """A server that reuses ``call_0``, sends empty ids and prefixed names."""
    if body["messages"][-1]["role"] != "user":
        return completion("done")
    if _agent_of(body) != "billing":
        return completion(None, call("call_0", "transfer_to_billing"))
    return completion(
        None,
        call("call_0", "lookup_invoice", '{"number": "INV-1001"}'),
        call("call_0", "lookup_invoice", '{"number": "INV-1002"}'),
        call("", "functions.lookup_invoice", '{"number": "INV-1003"}'),
        call("call_0", "x" * 70, "{}"),
    )


class Conversation:
    """Sends one Telegram message at a time and waits until its turn is over."""

    def __init__(self, gateway: Gateway, http: aiohttp.ClientSession) -> None:
        self.gateway, self.http, self.update_id = gateway, http, FIRST_UPDATE

    async def say(self, text: str) -> None:
        self.update_id += 1
        await post_until_ok(self.http, self.gateway.url, telegram_text(self.update_id, CHAT, text))
        await eventually(self._settled, f"the turn of {text!r}", seconds=30)

    def _settled(self) -> bool:
        """Every message sent has its inbox row (written after the ack), none pending."""
        rows = self.gateway.query(
            "SELECT count(*), count(*) FILTER (WHERE state = 'pending') FROM inbox"
            " WHERE session_id = ?",
            SESSION,
        )
        return rows == [(self.update_id - FIRST_UPDATE, 0)]

    async def admin(self, path: str, body: dict[str, Any]) -> None:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        url = f"{self.gateway.url}/api/sessions/{SESSION}/{path}"
        async with self.http.post(url, json=body, headers=headers) as response:
            assert response.status in (200, 202), await response.text()


async def _start(
    make_gateway: MakeGateway, tmp_path: Path, server_url: str, history: str
) -> Gateway:
    (tmp_path / "e2e_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    dispatcher = {"max_attempts": 2, "retry_base_seconds": 0.05, "apology": APOLOGY}
    return await make_gateway(agents(server_url, history), {"dispatcher": dispatcher})


def _requests_since(api: StrictOpenAI, start: int) -> list[dict[str, Any]]:
    return api.bodies[start:]


def _first_of(api: StrictOpenAI, start: int, agent: str) -> dict[str, Any]:
    found = [b for b in _requests_since(api, start) if _agent_of(b) == agent]
    assert found, (agent, [_agent_of(b) for b in api.bodies], api.violations)
    return found[0]


def _sent(body: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(m["role"], m["content"]) for m in body["messages"]]


MODES = [
    pytest.param("full", Rules(), id="strict"),
    pytest.param("full", Rules(vllm=True), id="vllm-strict"),
    pytest.param("messages", Rules(vllm=True, offered_only=True), id="messages-offered-only"),
]


@pytest.mark.parametrize(("history", "rules"), MODES)
async def test_e2e_thirty_turns_against_the_strict_server_send_no_invalid_request(
    make_gateway: MakeGateway,
    platforms: Platforms,
    aiohttp_server: AiohttpServer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    history: str,
    rules: Rules,
) -> None:
    api = StrictOpenAI(rules, brain=brain)
    server = await aiohttp_server(api.app(), host="127.0.0.1")
    gateway = await _start(make_gateway, tmp_path, str(server.make_url("")).rstrip("/"), history)
    chat = Conversation(gateway, http)
    for text in ("hello", "I have a bill question", "invoice please", "parallel lookups"):
        await chat.say(text)
    for text in ("broken args", "raise it", "menu", "hi again", "bill again", "invoice", "menu"):
        await chat.say(text)
    await chat.say("a person please")
    for text in ("are you there", "hello?", "still waiting"):
        await chat.say(text)
    await chat.admin("reply", {"text": "Hi, I'm Alice from support.", "operator": "Alice"})
    await chat.say("my order is late")
    await chat.admin("reply", {"text": HANDED_BACK, "operator": "Alice"})
    await chat.admin("handoff", {"agent": "triage"})
    handback = len(api.bodies)
    await chat.say("thanks")
    back = _sent(_first_of(api, handback, "triage"))
    assert ("user", "a person please") in back
    assert ("assistant", OPERATOR_MARK + HANDED_BACK) in back
    assert ("assistant", HANDED_BACK) not in back
    for text in ("bill", "parallel"):
        await chat.say(text)
    await chat.say("fail now")  # the model server answers 500: retried, then dead-lettered
    await eventually(lambda: APOLOGY in platforms.telegram.texts(str(CHAT)), "the apology")
    await chat.admin("handoff", {"agent": "billing"})
    dead = len(api.bodies)
    await chat.say("back again")
    after = _sent(_first_of(api, dead, "billing"))
    assert ("user", "fail now") in after
    assert any(role == "assistant" and APOLOGY in str(text) for role, text in after)
    await gateway.stop()
    await gateway.start()
    for text in ("invoice", "broken", "menu", "hello", "bill", "raise", "parallel", "menu", "bye"):
        await chat.say(text)
    user_messages = gateway.query(
        "SELECT count(*) FROM messages WHERE session_id = ? AND role = 'user'", SESSION
    )
    assert user_messages == [(30,)]
    assert api.violations == []
    assert len(api.bodies) > 30
    if rules.offered_only:
        offered = [{t["function"]["name"] for t in b.get("tools", [])} for b in api.bodies]
        stray = [(i, name) for i, name in tool_calls_in(api.bodies) if name not in offered[i]]
        assert stray == []


async def test_e2e_a_server_with_repeated_empty_ids_and_bad_names_completes_the_turn(
    make_gateway: MakeGateway,
    platforms: Platforms,
    aiohttp_server: AiohttpServer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    api = StrictOpenAI(Rules(vllm=True), brain=sloppy)
    server = await aiohttp_server(api.app(), host="127.0.0.1")
    gateway = await _start(make_gateway, tmp_path, str(server.make_url("")).rstrip("/"), "full")
    chat = Conversation(gateway, http)
    for text in ("invoices please", "more invoices", "and again"):
        await chat.say(text)
    assert api.violations == []
    replies = platforms.telegram.texts
    await eventually(lambda: replies(str(CHAT)) == ["done"] * 3, "the three replies")
    dead = gateway.query("SELECT count(*) FROM inbox WHERE state = 'dead'")
    assert dead == [(0,)]
    ids = [c["id"] for m in api.bodies[-1]["messages"] for c in m.get("tool_calls", [])]
    assert len(ids) == len(set(ids))
