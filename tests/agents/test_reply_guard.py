"""The runner's reply guard: a text the session cannot take now is kept, not sent, and the
model is told why and may answer once more (e.g. with a template tool)."""

from __future__ import annotations

from webhook_bot_gateway.agents import NOT_SENT, Agent, Registry, Reply, Runner, UserInput, tool
from webhook_bot_gateway.agents.testing import ScriptedModel, call, reply
from webhook_bot_gateway.store import Session, SQLiteStore

CLOSED = "the window is closed: use send_template"


def closed(session: Session) -> str | None:
    return CLOSED


@tool
def send_template(name: str) -> str:
    """Send an approved template."""
    return f"queued {name}"


def registry(model: ScriptedModel) -> Registry:
    return Registry([Agent("triage", "You help.", [send_template], model=model)], "triage")


async def test_refused_reply_is_kept_unsent_and_the_model_acts_on_the_error(
    store: SQLiteStore, session_id: str
) -> None:
    model = ScriptedModel(reply("Hi again!"), call("send_template", {"name": "follow_up"}))
    model.add(reply("Sent the template."))  # refused too: the turn ends there
    runner = Runner(store, registry(model))
    result = await runner.run_turn(session_id, UserInput("hello"), reply_guard=closed)
    model.assert_done()
    assert result.replies == ()
    told = model.calls[1].messages[-1]
    assert (told.role, told.text) == ("system", f"error: your reply was not sent: {CLOSED}")
    branch = await store.get_branch(session_id)
    assert [(m.role, m.text, m.data.get(NOT_SENT)) for m in branch] == [
        ("user", "hello", None),
        ("assistant", "Hi again!", CLOSED),
        ("assistant", None, None),
        ("tool", "queued follow_up", None),
        ("assistant", "Sent the template.", CLOSED),
    ]


async def test_second_refusal_without_a_tool_call_ends_the_turn(
    store: SQLiteStore, session_id: str
) -> None:
    model = ScriptedModel(reply("one"), reply("two"))
    runner = Runner(store, registry(model))
    result = await runner.run_turn(session_id, UserInput("hello"), reply_guard=closed)
    model.assert_done()
    assert result.replies == ()
    assert len(model.calls) == 2


async def test_the_note_is_not_stored_so_later_turns_do_not_see_it(
    store: SQLiteStore, session_id: str
) -> None:
    model = ScriptedModel(reply("one"), reply("two"), reply("open again"))
    runner = Runner(store, registry(model))
    await runner.run_turn(session_id, UserInput("hello"), reply_guard=closed)
    result = await runner.run_turn(session_id, UserInput("back"), reply_guard=lambda s: None)
    assert result.replies == (Reply("open again", "triage"),)
    assert all(m.role != "system" or m.text == "You help." for m in model.calls[2].messages)


async def test_a_handoff_notice_the_session_cannot_take_is_kept_unsent(
    store: SQLiteStore, session_id: str
) -> None:
    """The bot hands over to a person where no text can go (WhatsApp's window closed): the
    handoff is made, and its notice stays in the history marked, as an operator's handoff
    keeps it, not sent to be refused by the platform."""
    person = Agent("human", kind="human", handoff_reply="A person will answer.")
    bot = Agent(
        "triage", "You route.", handoffs=["human"], model=ScriptedModel(call("transfer_to_human"))
    )
    runner = Runner(store, Registry([bot, person], "triage"))
    result = await runner.run_turn(session_id, UserInput("a person please"), reply_guard=closed)
    assert result.replies == ()
    assert result.agent_after == "human"
    [notice] = [m for m in await store.get_branch(session_id) if m.agent == "human"]
    assert (notice.text, notice.data.get(NOT_SENT)) == ("A person will answer.", CLOSED)
