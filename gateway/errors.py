"""Gateway exception hierarchy (the store, channels and agents keep their own trees).

* GatewayError
  + ConfigError(key, problem)    the config file is missing, not TOML, or a key is wrong
"""

from __future__ import annotations


class GatewayError(Exception):
    """Base of the gateway's own errors."""


class ConfigError(GatewayError):
    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem
