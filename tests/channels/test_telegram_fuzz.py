"""Random JSON and random mutations of the fixtures: parse raises ChannelError or nothing."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.channels.telegram_fakes import config, fixture_bytes, fixture_names
from webhook_bot_gateway.channels import ChannelError, ParseResult
from webhook_bot_gateway.channels.telegram import TelegramAdapter

ADAPTER = TelegramAdapter(config())  # parsing makes no request: nothing to close
FIXTURES = [json.loads(fixture_bytes(name)) for name in fixture_names()]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
# Values that hit PTB's parsing where it is weakest: near-valid shapes with wrong types.
mutants = json_values | st.sampled_from([0, -1, 2**63, "", "x", [], {}, [{}], {"id": "1"}, 1e300])


def parses_or_refuses(body: bytes) -> None:
    try:
        result = ADAPTER.parse(body, "support")
    except ChannelError:
        return
    assert isinstance(result, ParseResult)
    for event in result.events:
        assert event.dedup_key.startswith("telegram:support:")


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_parse_random_json_raises_only_channel_error(value: Any) -> None:
    parses_or_refuses(json.dumps(value).encode())


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64))
def test_parse_random_bytes_raises_only_channel_error(body: bytes) -> None:
    parses_or_refuses(body)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into a JSON value, the root included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


def mutate(document: Any, path: tuple[Any, ...], action: str, replacement: Any) -> Any:
    if not path:
        return replacement
    *parents, last = path
    parent = document
    for key in parents:
        parent = parent[key]
    if action == "delete":
        del parent[last]
    else:
        parent[last] = replacement
    return document


@st.composite
def mutated_fixtures(draw: st.DrawFn) -> Any:
    document = json.loads(json.dumps(draw(st.sampled_from(FIXTURES))))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        # Not the root: random JSON covers that, and it would crowd out the deep mutations.
        inner = paths(document)[1:]
        if not inner:
            break
        path = draw(st.sampled_from(inner))
        action = draw(st.sampled_from(["replace", "delete"]))
        # A copy: sampled constants are shared, and a later mutation may reach inside one.
        document = mutate(document, path, action, copy.deepcopy(draw(mutants)))
    return document


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_fixtures())
def test_parse_mutated_fixtures_raise_only_channel_error(document: Any) -> None:
    parses_or_refuses(json.dumps(document).encode())
