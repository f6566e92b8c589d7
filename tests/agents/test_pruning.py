"""Complete-turn pruning: examples and properties over random histories."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook_bot_gateway.agents import prune_to_turns


@dataclass(frozen=True, eq=False)
class Msg:
    role: str
    data: dict[str, Any] = field(default_factory=dict)
    label: str = ""


def user(label: str = "") -> Msg:
    return Msg("user", label=label)


def assistant(*call_ids: str, label: str = "") -> Msg:
    calls = [{"id": cid, "name": "t", "arguments": "{}"} for cid in call_ids]
    return Msg("assistant", {"tool_calls": calls} if calls else {}, label)


def tool(call_id: str) -> Msg:
    return Msg("tool", {"tool_call_id": call_id, "name": "t"})


def system(label: str = "") -> Msg:
    return Msg("system", label=label)


# --- examples -----------------------------------------------------------------------------


def test_prune_to_turns_keeps_last_whole_turns() -> None:
    history = [user("1"), assistant(), user("2"), assistant("a"), tool("a"), assistant()]
    history += [user("3"), assistant()]
    out = prune_to_turns(history, 2)
    assert out == history[2:]


def test_prune_to_turns_moves_system_messages_first() -> None:
    s1, s2 = system("s1"), system("s2")
    history = [user("1"), s1, assistant(), user("2"), s2, assistant()]
    out = prune_to_turns(history, 1)
    assert out[:2] == [s1, s2]
    assert [m.label for m in out[2:3]] == ["2"]


def test_prune_to_turns_never_starts_with_assistant_or_tool() -> None:
    history = [assistant("x"), tool("x"), assistant(), user("1"), assistant()]
    out = prune_to_turns(history, 5)
    assert out == history[3:]


def test_prune_to_turns_without_user_message_keeps_only_system() -> None:
    s = system()
    assert prune_to_turns([s, assistant(), tool("z")], 3) == [s]


def test_prune_to_turns_drops_orphaned_tool_results() -> None:
    call = assistant("old")
    history = [user("1"), call, user("2"), tool("old"), tool("missing"), assistant()]
    out = prune_to_turns(history, 1)
    assert [m.role for m in out] == ["user", "assistant"]


def test_prune_to_turns_keeps_result_of_kept_call() -> None:
    history = [user("1"), assistant("a", "b"), tool("a"), tool("b"), assistant()]
    assert prune_to_turns(history, 1) == history


def test_prune_to_turns_drops_result_before_its_call() -> None:
    history = [user("1"), tool("a"), assistant("a"), tool("a")]
    assert prune_to_turns(history, 1) == [history[0], history[2], history[3]]


def test_prune_to_turns_fewer_turns_than_limit_keeps_all() -> None:
    history = [user(), assistant(), user(), assistant()]
    assert prune_to_turns(history, 40) == history


def test_prune_to_turns_empty_history() -> None:
    assert prune_to_turns([], 1) == []


@pytest.mark.parametrize("bad", [0, -1])
def test_prune_to_turns_rejects_non_positive_max_turns(bad: int) -> None:
    with pytest.raises(ValueError, match="max_turns"):
        prune_to_turns([user()], bad)


# --- properties ---------------------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[Msg]:
    """Random histories: turns with tool calls, stray system messages, orphans, preambles."""
    counter = itertools.count()
    issued: list[str] = []
    out: list[Msg] = []
    for kind in draw(st.lists(st.sampled_from("suactoS"), max_size=40)):
        if kind == "s":
            out.append(system())
        elif kind == "u":
            out.append(user())
        elif kind == "a":
            out.append(assistant())
        elif kind == "c":
            ids = [f"c{next(counter)}" for _ in range(draw(st.integers(1, 3)))]
            issued.extend(ids)
            out.append(assistant(*ids))
            out.extend(tool(cid) for cid in ids if draw(st.integers(0, 4)) > 0)
        elif kind == "o" and issued:
            out.append(tool(draw(st.sampled_from(issued))))
        elif kind == "S":
            out.append(tool(f"never{next(counter)}"))
    return out


def _expected_suffix(history: list[Msg], max_turns: int) -> list[Msg]:
    rest = [m for m in history if m.role != "system"]
    starts = [i for i, m in enumerate(rest) if m.role == "user"]
    if not starts:
        return []
    return rest[starts[max(0, len(starts) - max_turns)] :]


@settings(max_examples=300, deadline=None)
@given(histories(), st.integers(1, 12))
def test_prune_to_turns_properties(history: list[Msg], max_turns: int) -> None:
    out = prune_to_turns(history, max_turns)
    systems = [m for m in history if m.role == "system"]
    # 1. every system message, first, in order
    assert out[: len(systems)] == systems
    body = out[len(systems) :]
    assert all(m.role != "system" for m in body)
    # 2. never starts with an assistant or tool message
    if body:
        assert body[0].role == "user"
    # 3. the last max_turns whole turns: the suffix from the first kept user message,
    #    missing nothing but orphaned tool results
    users = sum(m.role == "user" for m in history)
    assert sum(m.role == "user" for m in body) == min(users, max_turns)
    suffix = _expected_suffix(history, max_turns)
    assert [m for m in suffix if m in body] == body
    seen_calls: set[str] = set()
    for m in suffix:
        if m.role == "assistant":
            seen_calls.update(c["id"] for c in m.data.get("tool_calls", []))
        if m not in body:
            assert m.role == "tool"
            assert m.data["tool_call_id"] not in seen_calls
    # 4. no tool result without its call before it
    kept_calls: set[str] = set()
    for m in body:
        if m.role == "assistant":
            kept_calls.update(c["id"] for c in m.data.get("tool_calls", []))
        if m.role == "tool":
            assert m.data["tool_call_id"] in kept_calls
