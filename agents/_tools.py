"""Tools: typed Python functions a model may call, with a JSON schema from their signature."""

from __future__ import annotations

import inspect
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_type_hints, overload

import pydantic_core
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ._model import ToolSpec

logger = logging.getLogger("agents.tools")

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
HANDOFF_PREFIX = "transfer_to_"


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What goes back to the model: the result as text, or an error it can react to."""

    text: str
    is_error: bool = False

    @classmethod
    def error(cls, message: str) -> ToolResult:
        """An error result; the text starts with ``error:``."""
        return cls(f"error: {message}", is_error=True)


@dataclass(frozen=True, eq=False)
class Tool:
    """A callable with a name, a description and a pydantic model of its arguments."""

    name: str
    description: str
    function: Callable[..., Any]
    arguments_model: type[BaseModel]

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

    async def invoke(self, arguments: str) -> ToolResult:
        """Parse and validate ``arguments`` (JSON text), call the function, never raise."""
        try:
            values = self._validate(arguments)
        except ValueError as exc:
            return ToolResult.error(f"invalid arguments for {self.name}: {_short(exc)}")
        try:
            result = self.function(**values)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            logger.warning("tool %s raised", self.name, exc_info=True)
            return ToolResult.error(f"{self.name} failed: {type(exc).__name__}: {exc}")
        return ToolResult(_as_text(result))

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
    return Tool(tool_name, doc, function, _arguments_model(tool_name, function))


def _arguments_model(name: str, function: Callable[..., Any]) -> type[BaseModel]:
    hints = get_type_hints(function)
    fields: dict[str, Any] = {}
    for param in inspect.signature(function).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ValueError(f"tool {name!r}: parameter {param.name!r} must be passable by name")
        if param.name not in hints:
            raise ValueError(f"tool {name!r}: parameter {param.name!r} needs a type annotation")
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints[param.name], default)
    config = ConfigDict(extra="forbid")
    return create_model(f"{name}_arguments", __config__=config, **fields)


def _first_paragraph(function: Callable[..., Any]) -> str:
    doc = inspect.getdoc(function) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip()


def _as_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    return pydantic_core.to_json(result).decode()


def _short(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        parts = [f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()]
        return "; ".join(parts)
    return str(exc)
