"""Tools: typed Python functions a model may call, with a JSON schema from their signature."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import re
import time
import types
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Union, get_args, get_origin, get_type_hints, overload

import pydantic_core
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from webhook_bot_gateway.store import storable_text

from ._model import ToolSpec
from ._tool_threads import TOOL_THREADS

logger = logging.getLogger("agents.tools")

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
HANDOFF_PREFIX = "transfer_to_"


class ToolError(Exception):
    """Raised by a tool to tell the model what went wrong, in words meant for it: the result
    is ``error: <tool> failed: <message>``. Any other exception gives the model only its type
    (``error: <tool> failed: raised ConnectionError``): its message is whatever the code below
    the tool wrote, which may hold a password, and the model's provider receives and the
    history keeps every tool result."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What goes back to the model: the result as text, or an error it can react to.

    ``failure``: what went wrong, in words safe for a log line or a stored error (the
    exception's type, the fields that failed validation), never the exception's message,
    which is the tool author's text and may hold anything (a database URL with its password).
    """

    text: str
    is_error: bool = False
    failure: str = field(default="", compare=False)

    @classmethod
    def error(cls, message: str, failure: str = "") -> ToolResult:
        """An error result; the text starts with ``error:``."""
        return cls(f"error: {message}", is_error=True, failure=failure or message)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What the runner tells a tool about the call; a tool asks for it with a parameter
    annotated ``ToolContext`` (or ``ToolContext | None``), which the model never sees.

    A turn may run more than once: the dispatcher retries a failed turn, and a turn that a
    crash or a shutdown interrupted runs again. Its tools then run again too. A tool with a
    side effect passes ``idempotency_key`` on (a payment API's ``Idempotency-Key`` header) or
    records it with the effect, and does nothing twice for one key.
    """

    session_id: str
    agent: str  # the agent whose tool this is
    idempotency_key: str  # the same on every run of this turn for this call; see turn_key
    turn_key: str  # the same on every run of this turn: from its inbox rows (or the head)
    inbox_ids: tuple[int, ...]  # the inbox rows the turn answers; () when started without
    call_id: str  # the id of the call (the model's, or one made unique): differs between runs


@dataclass(frozen=True, eq=False)
class Tool:
    """A callable with a name, a description and a pydantic model of its arguments.

    ``context_parameter`` names the parameter that takes a ``ToolContext``, if there is one;
    it is not among the arguments the model sends.
    """

    name: str
    description: str
    function: Callable[..., Any]
    arguments_model: type[BaseModel]
    context_parameter: str | None = None
    context_required: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly, as if it were not a tool."""
        return self.function(*args, **kwargs)

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments object."""
        schema = self.arguments_model.model_json_schema()
        schema.pop("title", None)
        return schema

    def spec(self) -> ToolSpec:
        """What a model is told about this tool."""
        return ToolSpec(self.name, self.description, self.parameters)

    async def invoke(
        self, arguments: str, context: ToolContext | Callable[[], ToolContext] | None = None
    ) -> ToolResult:
        """Parse and validate ``arguments`` (JSON text), call the function, never raise.

        ``context`` is what a ``ToolContext`` parameter receives; a callable is called once the
        arguments are valid, right before the function (the runner numbers only calls that
        reach their tool). A result that cannot be sent to the model (see ``_as_text``) is an
        error result like an exception: the tool has run, and a failed turn would run it again.
        """
        try:
            values = self._validate(arguments)
        except ValueError as exc:
            return ToolResult.error(
                f"invalid arguments for {self.name}: {_short(exc)}",
                f"invalid arguments ({_fields_at_fault(exc)})",
            )
        given = context() if callable(context) else context
        if self.context_parameter is not None:
            if given is not None:
                values[self.context_parameter] = given
            elif self.context_required:
                logger.error("tool %s needs a ToolContext and was invoked without one", self.name)
                return ToolResult.error(f"{self.name} needs a ToolContext and got none")
        try:
            result = await self._call(values)
        except ToolError as exc:  # the tool's own words for the model
            logger.info("tool %s reported an error to the model", self.name)
            return ToolResult.error(f"{self.name} failed: {exc}", "raised ToolError")
        except (Exception, SystemExit, asyncio.CancelledError) as exc:
            # SystemExit (a CLI library's sys.exit, argparse's on bad input) and a
            # CancelledError of the tool's own (a cancelled future it awaited) are its failures
            # too: the first would stop the whole process, the second would look like the
            # turn's own cancel (a shutdown), so the turn would run again, tool and all, with
            # no try counted. Only a cancel of the turn itself goes on up.
            if isinstance(exc, asyncio.CancelledError) and _stopping():
                raise
            # The exception's message is the tool author's text (it may hold a password): the
            # line and the model's result name its type; the traceback, message included, is
            # logged at DEBUG only.
            logger.warning("tool %s raised %s", self.name, type(exc).__name__)
            logger.debug("tool %s raised", self.name, exc_info=True)
            raised = f"raised {type(exc).__name__}"
            return ToolResult.error(f"{self.name} failed: {raised}", raised)
        try:
            return ToolResult(_as_text(result))
        except Exception as exc:
            kind = type(result).__name__
            logger.warning("tool %s returned a result that cannot be sent (%s)", self.name, kind)
            logger.debug("tool %s returned a result that cannot be sent", self.name, exc_info=True)
            return ToolResult.error(
                f"{self.name} returned a result that cannot be sent: {type(exc).__name__}: {exc}",
                f"returned a result that cannot be sent ({kind}: {type(exc).__name__})",
            )

    @property
    def is_async(self) -> bool:
        """Whether the function is a coroutine function (or an object whose ``__call__`` is
        one): it runs on the event loop. Any other runs in a thread (see ``_call``)."""
        return _is_async(self.function)

    async def _call(self, values: dict[str, Any]) -> Any:
        """The function's result: an async one's awaited on the loop, a sync one's from one of
        ``TOOL_THREADS`` (the loop serves everything else meanwhile), with a copy of the
        caller's context variables (the log's fields), as a task would get them.

        When the caller stops waiting (its turn timed out or was cancelled), a call still
        waiting for a thread never starts; one that runs cannot be stopped: it keeps its thread
        until it returns, and its result is dropped (logged when it comes). A sync function
        that returns an awaitable (a sync wrapper of a coroutine function) has it awaited here.
        """
        if self.is_async:
            result = self.function(**values)
        else:
            if TOOL_THREADS.busy >= TOOL_THREADS.size:
                logger.warning(
                    "tool %s waits for a thread: all %d threads for sync tools are busy",
                    self.name,
                    TOOL_THREADS.size,
                )
            context = contextvars.copy_context()
            job = TOOL_THREADS.submit(partial(context.run, self.function, **values))
            try:
                result = await asyncio.wrap_future(job)
            except asyncio.CancelledError:
                # The turn stopped waiting and the call runs: its result, when it comes, goes
                # nowhere. (Not stopping: the function raised CancelledError itself.)
                if _stopping() and not job.cancel():
                    job.add_done_callback(partial(_dropped, self.name, context, time.monotonic()))
                raise
        if inspect.isawaitable(result):
            result = await result
        return result

    def _validate(self, arguments: str) -> dict[str, Any]:
        raw = json.loads(arguments) if arguments.strip() else {}
        if not isinstance(raw, dict):
            raise ValueError("arguments must be a JSON object")
        model = self.arguments_model.model_validate(raw)
        return {name: getattr(model, name) for name in type(model).model_fields}


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function (sync or async) into a ``Tool``; usable bare or with options."""

    def wrap(fn: Callable[..., Any]) -> Tool:
        return make_tool(fn, name=name, description=description)

    return wrap(function) if function is not None else wrap


def make_tool(
    function: Callable[..., Any], *, name: str | None = None, description: str | None = None
) -> Tool:
    """Build a ``Tool`` from ``function``'s signature and docstring."""
    tool_name = name or function.__name__
    if not TOOL_NAME.fullmatch(tool_name) or tool_name.startswith(HANDOFF_PREFIX):
        raise ValueError(
            f"tool name {tool_name!r} must match {TOOL_NAME.pattern} "
            f"and not start with {HANDOFF_PREFIX!r}"
        )
    doc = description if description is not None else _first_paragraph(function)
    model, context = _arguments_model(tool_name, function)
    required = context is not None and (
        inspect.signature(function).parameters[context].default is inspect.Parameter.empty
    )
    return Tool(tool_name, doc, function, model, context, required)


def _arguments_model(name: str, function: Callable[..., Any]) -> tuple[type[BaseModel], str | None]:
    """The model of the arguments, and the name of the ``ToolContext`` parameter if any."""
    hints = get_type_hints(function)
    fields: dict[str, Any] = {}
    context: str | None = None
    for param in inspect.signature(function).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ValueError(f"tool {name!r}: parameter {param.name!r} must be passable by name")
        if param.name not in hints:
            raise ValueError(f"tool {name!r}: parameter {param.name!r} needs a type annotation")
        if _is_context(hints[param.name]):
            if context is not None:
                raise ValueError(f"tool {name!r}: more than one ToolContext parameter")
            context = param.name
            continue
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints[param.name], default)
    config = ConfigDict(extra="forbid")
    return create_model(f"{name}_arguments", __config__=config, **fields), context


def _is_context(hint: Any) -> bool:
    """``ToolContext`` or ``ToolContext | None``."""
    if hint is ToolContext:
        return True
    if get_origin(hint) in (Union, types.UnionType):
        return set(get_args(hint)) == {ToolContext, type(None)}
    return False


def _is_async(function: Callable[..., Any]) -> bool:
    call = getattr(function, "__call__", None)  # noqa: B004 - an object's async __call__
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call)


def _stopping() -> bool:
    """Whether the running task is being cancelled (its turn timed out, was cancelled or is
    shut down), rather than handed a CancelledError by the code it awaited."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _dropped(name: str, context: contextvars.Context, since: float, job: Future[Any]) -> None:
    """Log (in the call's context: the turn's log fields) that a sync tool whose turn stopped
    waiting for it has returned, or raised, and that what it gave went nowhere."""
    if job.cancelled():
        return
    ended = "raised " + type(job.exception()).__name__ if job.exception() else "returned"
    context.run(
        logger.warning,
        "tool %s %s %.1f s after its turn stopped waiting for it: the result was dropped",
        name,
        ended,
        time.monotonic() - since,
    )


def _first_paragraph(function: Callable[..., Any]) -> str:
    doc = inspect.getdoc(function) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip()


def _as_text(result: Any) -> str:
    """A str as it is, anything else as JSON; raises when that is not possible.

    The text must also be storable and sendable: text with lone surrogates cannot be encoded
    (raises), and NUL characters, which PostgreSQL refuses in text, become U+FFFD.
    """
    text = result if isinstance(result, str) else pydantic_core.to_json(result).decode()
    text.encode("utf-8")  # UnicodeEncodeError on lone surrogates
    return storable_text(text)


def _fields_at_fault(exc: ValueError) -> str:
    """The arguments that failed and how (``number: missing``), without their values: safe to
    log. Text that is not a JSON object is just that."""
    if isinstance(exc, json.JSONDecodeError):
        return "not JSON"
    if not isinstance(exc, ValidationError):
        return "not a JSON object"
    parts = [f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['type']}" for e in exc.errors()]
    return "; ".join(parts)


def _short(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        parts = [f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()]
        return "; ".join(parts)
    return str(exc)
