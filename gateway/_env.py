"""``${VAR}`` and ``${VAR:-default}`` substitution in config values, naming the key on failure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError

_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHELL_STYLE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")  # a whole value such as $TOKEN
_KEY_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")  # one step of a key_path: [0] or a name
_UNCLOSED = "malformed reference: a '${' with no closing '}'"
_NESTED = "malformed reference: a '${' inside another reference (references do not nest)"
_NOT_A_NAME = (
    "malformed reference: a '${' is not followed by a variable name and then '}' or ':-'"
    " (the forms are ${NAME} and ${NAME:-default})"
)


def check_mistyped_reference(text: str, environ: Mapping[str, str], key: str) -> None:
    """ConfigError for a reference that would be taken as literal text (a token, a secret) or
    whose text would be echoed: a ``${`` that no ``}`` closes, a ``${`` inside a reference, a
    ``${...}`` that is not ``${NAME}`` or ``${NAME:-default}``, or a whole value ``$NAME``
    written as in a shell. No message repeats the value, which may be a secret; the name of a
    variable that is set is given, since it is then almost surely a reference."""
    problem = _reference_problem(text)
    if problem:
        raise ConfigError(key, problem)
    shell = _SHELL_STYLE.fullmatch(text)
    if shell and shell.group(1) in environ:
        name = shell.group(1)
        raise ConfigError(key, f"${name} is not read from the environment: write ${{{name}}}")
    if shell:
        raise ConfigError(
            key, "a value of the form $NAME is not read from the environment: write ${NAME}"
        )


def _reference_problem(text: str) -> str | None:
    """What is wrong with the ``${...}`` references in ``text``, in words that quote none."""
    insides = [match.group(1) for match in _REFERENCE.finditer(text)]
    # A reference ends at its first '}': ${X:-${Y}} would be read as X with the default "${Y".
    if any("${" in inside for inside in insides):
        return _NESTED
    if "${" in _REFERENCE.sub("", text):
        return _UNCLOSED
    if not all(_NAME.fullmatch(inside.partition(":-")[0]) for inside in insides):
        return _NOT_A_NAME
    return None


def key_path(parts: tuple[str | int, ...]) -> str:
    """``("telegram", "bots", 0, "token")`` -> ``telegram.bots[0].token``."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text or "(top level)"


def origin(raw: object, key: str, environ: Mapping[str, str]) -> str:
    """Where the value at ``key`` (a ``key_path``) came from, for an error's end, when ``raw``,
    the TOML document before substitution, refers to the environment there: `` (the value comes
    from ${GATEWAY_PORT})``; "" otherwise. Names variables, never a value (it may be a secret)."""
    text = _value_at(raw, key)
    names = list(dict.fromkeys(references(text))) if isinstance(text, str) else []
    if not names:
        return ""
    read = [f"${{{name}}}" for name in names if name in environ]
    unset = [name for name in names if name not in environ]
    if unset:  # substitution took their defaults, written in the file
        defaults = "the defaults of" if len(unset) > 1 else "the default of"
        read.append(f"{defaults} {_and([f'${{{name}}}' for name in unset])}")
    note = f"the value comes from {_and(read)}"
    if unset:
        note += f", as {_and(unset)} {'are' if len(unset) > 1 else 'is'} not set"
    return f" ({note})"


def _value_at(raw: object, key: str) -> object:
    """The value at ``key`` (a ``key_path``) in ``raw``, or None where there is none."""
    value = raw
    for index, name in _KEY_PART.findall(key):
        if name and isinstance(value, dict):
            value = value.get(name)
        elif index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            return None
    return value


def _and(words: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def substitute(value: Any, environ: Mapping[str, str], path: tuple[str | int, ...] = ()) -> Any:
    """Return ``value`` with every string's environment references replaced."""
    if isinstance(value, str):
        return _substitute_string(value, environ, path)
    if isinstance(value, dict):
        return {key: substitute(item, environ, (*path, key)) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute(item, environ, (*path, index)) for index, item in enumerate(value)]
    return value


def references(text: str) -> list[str]:
    """The names of the environment variables ``text`` refers to, in order."""
    return [match.group(1).partition(":-")[0] for match in _REFERENCE.finditer(text)]


def _substitute_string(text: str, environ: Mapping[str, str], path: tuple[str | int, ...]) -> str:
    check_mistyped_reference(text, environ, key_path(path))

    def replace(match: re.Match[str]) -> str:
        name, has_default, default = match.group(1).partition(":-")
        if name in environ:
            return environ[name]
        if has_default:
            return default
        raise ConfigError(key_path(path), f"environment variable {name} is not set")

    return _REFERENCE.sub(replace, text)
