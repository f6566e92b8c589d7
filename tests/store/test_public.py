"""The public surface: exports, and each backend matching the Store protocol."""

from __future__ import annotations

import inspect

import pytest

from webhook_bot_gateway import store
from webhook_bot_gateway.store import SQLiteStore, SQLiteTurn, Store, Turn
from webhook_bot_gateway.store.postgres import PostgresStore
from webhook_bot_gateway.store.postgres._turn import PostgresTurn


def test_store_exports_every_public_name() -> None:
    for name in store.__all__:
        assert hasattr(store, name), name
    assert sorted(store.__all__) == sorted(set(store.__all__))


def _members(protocol: type) -> list[str]:
    return [n for n in vars(protocol) if not n.startswith("_") and n not in {"mro"}]


@pytest.mark.parametrize(
    ("protocol", "impl"),
    [(Store, SQLiteStore), (Turn, SQLiteTurn), (Store, PostgresStore), (Turn, PostgresTurn)],
)
def test_backend_matches_protocol_signatures(protocol: type, impl: type) -> None:
    for name in _members(protocol):
        expected, actual = getattr(protocol, name), getattr(impl, name)
        if isinstance(expected, property):
            assert isinstance(actual, property), name
            continue
        want = inspect.signature(expected).parameters
        got = inspect.signature(actual).parameters
        assert list(got) == list(want), name
        for param in want:
            assert got[param].kind == want[param].kind, (name, param)
            assert got[param].default == want[param].default, (name, param)
