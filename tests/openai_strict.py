"""A strict OpenAI-compatible chat completions server for tests, on loopback.

Every request is checked against the rules OpenAI enforces on ``/chat/completions`` (roles and
their fields, tool-call ids present, unique and answered, tool messages after their call,
function names, arguments as strings, tools' JSON Schemas), plus what stricter servers refuse:
``vllm`` (vLLM, llama.cpp and sglang parse the arguments in the history: each must be a JSON
object) and ``offered_only`` (gateways in front of Anthropic or Bedrock models: a call in the
history must name a tool offered in the request). Empty tool results are refused in every mode
(Anthropic-backed servers do). A request that breaks a rule gets a 400 with OpenAI's error shape
and is kept in ``violations``, so a test asserting ``violations == []`` fails on it.

Answers come from a queue (``answer``) or, when it is empty, from ``brain(request body)``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
FIELDS: Mapping[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "tool_calls", "refusal"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
Answer = tuple[int, Any]
Brain = Callable[[dict[str, Any]], Any]  # a completion body, or (status, body)


@dataclass(frozen=True, slots=True)
class Rules:
    vllm: bool = False  # arguments in the history must parse as JSON objects
    offered_only: bool = False  # calls in the history only to tools offered in the request


def completion(content: str | None = None, *calls: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A chat completion answering ``content`` and/or tool ``calls`` (see ``call``)."""
    message: dict[str, Any] = {"role": "assistant", "content": content, **extra}
    if calls:
        message["tool_calls"] = list(calls)
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "m", "choices": [choice]}


def call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    """One tool call of an answer, as the server sends it."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def check_request(body: Any, rules: Rules = Rules()) -> list[str]:
    """Every rule ``body`` breaks, as OpenAI-like messages; [] for a valid request."""
    if not isinstance(body, dict):
        return ["the request body must be a JSON object"]
    problems: list[str] = []
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("'model' is required")
    tools = body.get("tools", [])
    problems += list(_tool_problems(tools))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*problems, "'messages' must be a non-empty array"]
    offered = {t["function"]["name"] for t in tools if _is_tool(t)} if rules.offered_only else None
    problems += list(_message_problems(messages, rules, offered))
    return problems


def _is_tool(tool: Any) -> bool:
    return isinstance(tool, dict) and isinstance(tool.get("function"), dict)


def _tool_problems(tools: Any) -> Iterator[str]:
    if not isinstance(tools, list):
        yield "'tools' must be an array"
        return
    names: set[str] = set()
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not _is_tool(tool) or tool.get("type") != "function":
            yield f"{where}: must be {{'type': 'function', 'function': {{...}}}}"
            continue
        name = tool["function"].get("name")
        if not isinstance(name, str) or not NAME.match(name):
            yield f"{where}.function.name: {name!r} does not match '{NAME.pattern}'"
        elif name in names:
            yield f"{where}.function.name: duplicate function name {name!r}"
        names.add(str(name))
        yield from _schema_problems(where, tool["function"].get("parameters"))


def _schema_problems(where: str, schema: Any) -> Iterator[str]:
    if schema is None:
        return
    if not isinstance(schema, dict) or schema.get("type") != "object":
        yield f"{where}.function.parameters: schema must be a JSON Schema of type 'object'"
        return
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        yield f"{where}.function.parameters: invalid JSON Schema: {exc.message}"


def _message_problems(messages: list[Any], rules: Rules, offered: set[str] | None) -> Iterator[str]:
    seen_ids: set[str] = set()
    waiting: set[str] = set()  # calls of the last assistant message not answered yet
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            yield f"{where}: role must be one of {sorted(ROLES)}"
            continue
        role = message["role"]
        extra = set(message) - FIELDS[role]
        if extra:
            yield f"{where}: unrecognized field(s) {sorted(extra)} for role {role!r}"
        if waiting and role != "tool":
            yield (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'. Missing: {sorted(waiting)}"
            )
            waiting = set()
        if "name" in message and not NAME.match(str(message["name"])):
            yield f"{where}.name: {message['name']!r} does not match '{NAME.pattern}'"
        if role == "assistant":
            calls = message.get("tool_calls")
            yield from _assistant_problems(where, message, rules, offered, seen_ids)
            waiting = {c["id"] for c in calls or () if isinstance(c, dict) and c.get("id")}
        elif role == "tool":
            yield from _tool_message_problems(where, message, waiting)
        else:
            yield from _content_problems(where, role, message.get("content"))
    if waiting:
        yield f"tool_call_ids without a response message: {sorted(waiting)}"


def _content_problems(where: str, role: str, content: Any) -> Iterator[str]:
    if isinstance(content, str):
        return
    if role == "user" and isinstance(content, list) and content:
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("text", "image_url"):
                yield f"{where}.content: parts must be text or image_url"
        return
    yield f"{where}.content: must be a string for role {role!r}, got {type(content).__name__}"


def _assistant_problems(
    where: str,
    message: dict[str, Any],
    rules: Rules,
    offered: set[str] | None,
    seen_ids: set[str],
) -> Iterator[str]:
    content, calls = message.get("content"), message.get("tool_calls")
    if content is not None and not isinstance(content, str):
        yield f"{where}.content: must be a string or null"
    if calls is None:
        if content is None:
            yield f"{where}: an assistant message needs 'content' or 'tool_calls'"
        return
    if not isinstance(calls, list) or not calls:
        yield f"{where}.tool_calls: must be a non-empty array"
        return
    for position, tool_call in enumerate(calls):
        yield from _call_problems(f"{where}.tool_calls[{position}]", tool_call, rules, offered)
        call_id = tool_call.get("id") if isinstance(tool_call, dict) else None
        if isinstance(call_id, str) and call_id:
            if call_id in seen_ids:
                yield f"Duplicate value for 'tool_call_id' of {call_id!r} in message[{where}]"
            seen_ids.add(call_id)


def _call_problems(
    where: str, tool_call: Any, rules: Rules, offered: set[str] | None
) -> Iterator[str]:
    if not isinstance(tool_call, dict) or tool_call.get("type") != "function":
        yield f"{where}: must be {{'id', 'type': 'function', 'function'}}"
        return
    if not isinstance(tool_call.get("id"), str) or not tool_call["id"]:
        yield f"{where}.id: must be a non-empty string"
    function = tool_call.get("function")
    if not isinstance(function, dict):
        yield f"{where}.function: must be an object"
        return
    name, arguments = function.get("name"), function.get("arguments")
    if not isinstance(name, str) or not NAME.match(name):
        yield f"{where}.function.name: {name!r} does not match '{NAME.pattern}'"
    elif offered is not None and name not in offered:
        yield f"{where}.function.name: {name!r} is not among the tools of the request"
    if not isinstance(arguments, str):
        yield f"{where}.function.arguments: must be a string"
    elif rules.vllm and not _is_object(arguments):
        yield f"{where}.function.arguments: not a JSON object: {arguments[:60]!r}"


def _is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _tool_message_problems(where: str, message: dict[str, Any], waiting: set[str]) -> Iterator[str]:
    call_id = message.get("tool_call_id")
    if call_id not in waiting:
        yield (
            f"{where}: messages with role 'tool' must be a response to a preceding message "
            f"with 'tool_calls' (tool_call_id {call_id!r})"
        )
    waiting.discard(str(call_id))
    content = message.get("content")
    if not isinstance(content, str) or not content:
        yield f"{where}.content: a tool result must be a non-empty string"


@dataclass
class StrictOpenAI:
    """The server: records bodies, checks each, answers 400 on a violation."""

    rules: Rules = Rules()
    brain: Brain | None = None
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    answers: deque[tuple[int, Any, dict[str, str]]] = field(default_factory=deque)
    hang: asyncio.Event = field(default_factory=asyncio.Event)  # an answer "hang" waits for it

    def answer(self, body: Any, status: int = 200, **headers: str) -> None:
        """Queue the next answer (before the brain's): a JSON body, "hang", or bytes sent as
        they are (a body that is not JSON; give its Content-Type in ``headers``)."""
        self.answers.append((status, body, headers))

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        self.headers.append(dict(request.headers))
        problems = check_request(body, self.rules)
        if problems:
            self.violations += problems
            return web.json_response(_error(problems[0]), status=400)
        status, answer, headers = self._next(body)
        if isinstance(answer, bytes):
            return web.Response(body=answer, status=status, headers=headers)
        if answer == "hang":
            await self.hang.wait()
        return web.json_response(answer, status=status, headers=headers)

    def _next(self, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        if self.answers:
            return self.answers.popleft()
        if self.brain is None:
            raise AssertionError("the strict fake got a request it has no answer for")
        answer = self.brain(body)
        if isinstance(answer, tuple):
            return answer[0], answer[1], {}
        return 200, answer, {}


def _error(message: str) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": None,
        }
    }


def tool_calls_in(bodies: Sequence[dict[str, Any]]) -> list[tuple[int, str]]:
    """(request index, function name) of every tool call in the requests' histories."""
    return [
        (index, c["function"]["name"])
        for index, body in enumerate(bodies)
        for m in body["messages"]
        if m["role"] == "assistant"
        for c in m.get("tool_calls") or ()
    ]
