"""A config file's number is a number: a TOML ``true`` or ``false`` where one is expected is an
error naming the key, never 1 or 0 (pydantic's lax mode reads a boolean as a number)."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Union

from pydantic import BaseModel

Path = tuple[str | int, ...]


def boolean_for_number(model: type[BaseModel], data: object) -> Path | None:
    """The key of the first boolean in ``data`` (a parsed TOML document) that ``model`` reads
    as a number, or None."""
    return _first(model, data, ())


def _first(annotation: Any, value: object, path: Path) -> Path | None:
    if isinstance(value, bool):
        return path if _is_number(annotation) else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _in_model(annotation, value, path)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _first(args[0], value, path)
    if origin in (Union, types.UnionType):
        return next((p for arg in args if (p := _first(arg, value, path))), None)
    if origin in (list, tuple, Sequence) and args and isinstance(value, list):
        items = enumerate(value)
        return next((p for i, item in items if (p := _first(args[0], item, (*path, i)))), None)
    if origin in (dict, Mapping) and len(args) == 2 and isinstance(value, dict):
        pairs = value.items()
        return next((p for k, item in pairs if (p := _first(args[1], item, (*path, k)))), None)
    return None


def _in_model(model: type[BaseModel], value: object, path: Path) -> Path | None:
    if not isinstance(value, dict):
        return None
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key in value and (found := _first(field.annotation, value[key], (*path, key))):
            return found
    return None


def _is_number(annotation: Any) -> bool:
    if annotation in (int, float):
        return True
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _is_number(args[0])
    return origin in (Union, types.UnionType) and any(_is_number(arg) for arg in args)
