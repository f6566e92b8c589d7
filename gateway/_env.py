"""``${VAR}`` and ``${VAR:-default}`` substitution in config values, naming the key on failure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError

_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHELL_STYLE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")  # a whole value such as $TOKEN


def check_mistyped_reference(text: str, environ: Mapping[str, str], key: str) -> None:
    """ConfigError for a reference that would be taken as literal text (a token, a secret):
    a ``${`` that no ``}`` closes, or a whole value ``$NAME`` written as in a shell. Neither
    message repeats the value, which may be a secret; the name of a variable that is set is
    given, since it is then almost surely a reference."""
    if "${" in _REFERENCE.sub("", text):
        raise ConfigError(key, "malformed reference: a '${' with no closing '}'")
    shell = _SHELL_STYLE.fullmatch(text)
    if shell and shell.group(1) in environ:
        name = shell.group(1)
        raise ConfigError(key, f"${name} is not read from the environment: write ${{{name}}}")
    if shell:
        raise ConfigError(
            key, "a value of the form $NAME is not read from the environment: write ${NAME}"
        )


def key_path(parts: tuple[str | int, ...]) -> str:
    """``("telegram", "bots", 0, "token")`` -> ``telegram.bots[0].token``."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text or "(top level)"


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
        if not _NAME.fullmatch(name):
            raise ConfigError(key_path(path), f"malformed reference ${{{match.group(1)}}}")
        if name in environ:
            return environ[name]
        if has_default:
            return default
        raise ConfigError(key_path(path), f"environment variable {name} is not set")

    return _REFERENCE.sub(replace, text)
