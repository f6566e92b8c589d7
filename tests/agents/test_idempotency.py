"""Tools get an idempotency key, the same on every run of the same turn.

The dispatcher retries a failed turn and re-runs one a crash interrupted: the turn's tools then
run again. A tool with a side effect passes ``ToolContext.idempotency_key`` on (a payment API's
Idempotency-Key header) so the effect happens once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from webhook_bot_gateway.agents import (
    Agent,
    ModelBackendError,
    ModelResponse,
    Registry,
    Runner,
    ToolContext,
    UserInput,
    tool,
)
from webhook_bot_gateway.agents.testing import Hang, ScriptedModel, call, reply, tool_call
from webhook_bot_gateway.store import DeliveryIn, InboxIn, ParsedDelivery, SQLiteStore

CHAT = ("test", "bot", "42")  # channel, account, chat_id of the session_id fixture


async def inbox_rows(store: SQLiteStore, *texts: str) -> list[int]:
    """Pending inbox rows of the test session, as the intake records them; their ids."""
    keys = tuple(f"key-{text}" for text in texts)
    [stored] = await store.ingest([DeliveryIn(CHAT[0], CHAT[1], b"{}", keys)])
    assert stored.delivery_id is not None
    rows = tuple(
        InboxIn(*CHAT, key, {"text": text, "chat_id": CHAT[2]})
        for key, text in zip(keys, texts, strict=True)
    )
    await store.record_parsed(stored.delivery_id, ParsedDelivery(inbox=rows), starting_agent="a")
    return [row.id for row in await store.pending_inbox("test-bot-42") if row.dedup_key in keys]


class Charges:
    """A card-charging tool that records the context of each call."""

    def __init__(self) -> None:
        self.seen: list[ToolContext] = []

        @tool
        def charge_card(cents: int, call: ToolContext) -> str:
            """Charge the card on file."""
            self.seen.append(call)
            return f"charged {cents}"

        self.tool = charge_card

    @property
    def keys(self) -> list[str]:
        return [c.idempotency_key for c in self.seen]


def runner(store: SQLiteStore, model: ScriptedModel, charges: Charges) -> Runner:
    agent = Agent("triage", "You bill.", [charges.tool], model=model)
    return Runner(store, Registry([agent], "triage"))


def test_the_context_parameter_is_not_in_the_schema() -> None:
    charges = Charges()
    assert charges.tool.parameters["properties"].keys() == {"cents"}
    assert charges.tool.parameters["required"] == ["cents"]


async def test_a_retried_turn_gives_its_tools_the_same_keys(
    store: SQLiteStore, session_id: str
) -> None:
    ids = await inbox_rows(store, "pay")
    charges = Charges()
    failing = ModelBackendError("fake", "HTTP 500", 500)
    model = ScriptedModel(call("charge_card", {"cents": 100}, id="a1"), failing)
    with pytest.raises(ModelBackendError):  # the tool ran, then the turn failed: rolled back
        await runner(store, model, charges).run_turn(session_id, UserInput("pay"), inbox_ids=ids)
    await store.fail_inbox(ids, "ModelBackendError", next_attempt_at=0, dead=False)
    # the retry: the model's call ids differ, the key does not
    model.add(call("charge_card", {"cents": 100}, id="b1"), reply("Paid."))
    await runner(store, model, charges).run_turn(session_id, UserInput("pay"), inbox_ids=ids)
    model.assert_done()
    first, again = charges.seen
    assert first.idempotency_key == again.idempotency_key
    assert (first.call_id, again.call_id) == ("a1", "b1")
    assert first.session_id == session_id
    assert first.agent == "triage"
    assert first.inbox_ids == tuple(ids)


async def test_a_turn_stopped_at_shutdown_re_runs_with_the_same_keys(
    db_path: Path, session_id: str, store: SQLiteStore
) -> None:
    """Shutdown cancels a running turn (rolled back); the next process runs it again."""
    ids = await inbox_rows(store, "pay")
    charges = Charges()
    hang = Hang()
    stopped = ScriptedModel(call("charge_card", {"cents": 100}), hang)
    task = asyncio.create_task(
        runner(store, stopped, charges).run_turn(session_id, UserInput("pay"), inbox_ids=ids)
    )
    await hang.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with SQLiteStore(db_path) as restarted:  # a new process on the same file
        model = ScriptedModel(call("charge_card", {"cents": 100}), reply("Paid."))
        await runner(restarted, model, charges).run_turn(
            session_id, UserInput("pay"), inbox_ids=ids
        )
    assert len(charges.keys) == 2
    assert len(set(charges.keys)) == 1


async def test_different_turns_and_calls_get_different_keys(
    store: SQLiteStore, session_id: str
) -> None:
    charges = Charges()
    two_at_once = ModelResponse(
        tool_calls=(
            tool_call("charge_card", {"cents": 1}),
            tool_call("charge_card", {"cents": 2}),
        )
    )
    model = ScriptedModel(
        two_at_once, call("charge_card", {"cents": 3}), reply("Paid thrice."),  # turn 1
        call("charge_card", {"cents": 4}), reply("Paid."),  # turn 2
    )  # fmt: skip
    first, second = await inbox_rows(store, "pay", "more")
    await runner(store, model, charges).run_turn(session_id, UserInput("p"), inbox_ids=[first])
    await runner(store, model, charges).run_turn(session_id, UserInput("m"), inbox_ids=[second])
    model.assert_done()
    assert len(charges.keys) == 4
    assert len(set(charges.keys)) == 4
    assert charges.seen[0].turn_key == charges.seen[2].turn_key != charges.seen[3].turn_key


async def test_without_inbox_rows_the_key_is_stable_across_a_retry(
    store: SQLiteStore, session_id: str
) -> None:
    """A turn the caller starts without inbox rows: the key comes from the session's head."""
    charges = Charges()
    model = ScriptedModel(reply("Hi."))
    await runner(store, model, charges).run_turn(session_id, UserInput("hello"))
    model.add(call("charge_card", {"cents": 100}), RuntimeError("model broke"))
    with pytest.raises(RuntimeError):
        await runner(store, model, charges).run_turn(session_id, UserInput("pay"))
    model.add(call("charge_card", {"cents": 100}), reply("Paid."))
    await runner(store, model, charges).run_turn(session_id, UserInput("pay"))
    model.add(call("charge_card", {"cents": 100}), reply("Paid again."))
    await runner(store, model, charges).run_turn(session_id, UserInput("pay again"))
    model.assert_done()
    retried, retry, next_turn = charges.keys
    assert retried == retry != next_turn


async def test_calls_that_never_reached_the_tool_do_not_shift_the_numbering(
    store: SQLiteStore, session_id: str
) -> None:
    """A retry whose model gets the arguments right at once gives the charge the same key."""
    ids = await inbox_rows(store, "pay")
    charges = Charges()
    model = ScriptedModel(
        call("charge_card", {"cents": "lots"}),  # invalid: refused before the call
        call("charge_card", {"cents": 100}),
        RuntimeError("model broke"),
        call("charge_card", {"cents": 100}),
        reply("Paid."),
    )
    for _ in range(2):
        try:
            await runner(store, model, charges).run_turn(
                session_id, UserInput("pay"), inbox_ids=ids
            )
        except RuntimeError:
            pass
    model.assert_done()
    assert len(charges.keys) == 2
    assert charges.keys[0] == charges.keys[1]


async def test_a_tool_that_needs_a_context_invoked_without_one_is_an_error() -> None:
    result = await Charges().tool.invoke('{"cents": 1}')
    assert result.is_error
    assert "needs a ToolContext" in result.text


async def test_an_optional_context_parameter_may_be_left_out() -> None:
    @tool
    def look(number: str, call: ToolContext | None = None) -> str:
        """Look something up."""
        return f"{number} {call.idempotency_key if call else 'no key'}"

    assert look.parameters["properties"].keys() == {"number"}
    assert (await look.invoke('{"number": "1"}')).text == "1 no key"
    context = ToolContext("s", "a", "k", "t", (), "c")
    assert (await look.invoke('{"number": "1"}', context)).text == "1 k"
    assert look(number="2") == "2 no key"


async def test_the_demo_tool_answers_a_key_it_has_seen_without_running_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from webhook_bot_gateway.agents import demo

    context = ToolContext("s", "billing", "turn-x:lookup_invoice:0", "turn-x", (7,), "c1")
    first = await demo.lookup_invoice.invoke('{"number": "inv-1002"}', context)
    assert first.text == "Invoice INV-1002: 120.50 EUR, open, due 2024-07-15."
    assert demo.ANSWERED[context.idempotency_key] == first.text
    paid = {"amount": "120.50 EUR", "status": "paid", "due": "2024-07-15"}
    monkeypatch.setitem(demo._INVOICES, "INV-1002", paid)  # a second run would see this
    again = await demo.lookup_invoice.invoke('{"number": "inv-1002"}', context)
    assert again == first
    other = await demo.lookup_invoice.invoke('{"number": "inv-1002"}', None)
    assert other.text == "Invoice INV-1002: 120.50 EUR, paid, due 2024-07-15."
    del demo.ANSWERED[context.idempotency_key]
