"""The two session stores behind one small interface: a turn, and a dedup check-and-claim.

- **gateway**: ``SQLiteStore`` (aiosqlite, WAL, synchronous=FULL). A turn is what the runner
  does around the model: ``store.turn(id, recent_turns=40)`` (load the last 40 whole turns,
  mark the session running), append the user message and the answer, one commit.
- **chatflow**: chatflow-agent's ``SQLiteSessionStore`` (sqlite3, a new connection per call,
  WAL, synchronous=NORMAL). A turn is what its ``Runner.run_async`` does around the engine:
  ``get_or_create`` (loads the session's stored history), ``add_message`` twice (each its own
  transaction, pruning the stored history to its ``max_turns``, 40 by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from webhook_bot_gateway.store import NewMessage, SQLiteStore

MAX_TURNS = 40  # both: the whole turns a model is given (the gateway's agents.max_turns default)
ANSWER = "Your order is on its way; it should arrive on Thursday."


class Side(Protocol):
    async def new_session(self, name: str) -> str: ...
    async def turn(self, session: str, text: str) -> None: ...
    async def claim(self, keys: Sequence[str]) -> set[str]: ...
    async def aclose(self) -> None: ...


class Gateway:
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    @classmethod
    async def open(cls, path: Path) -> Gateway:
        return cls(await SQLiteStore.open(path))

    async def new_session(self, name: str) -> str:
        session = await self.store.create_session("whatsapp", "bench", name, "echo")
        return session.session_id

    async def turn(self, session: str, text: str) -> None:
        async with self.store.turn(session, recent_turns=MAX_TURNS) as turn:
            turn.append(NewMessage("user", text))
            turn.append(NewMessage("assistant", ANSWER, agent="echo"))

    async def claim(self, keys: Sequence[str]) -> set[str]:
        return await self.store.claim(keys)

    async def aclose(self) -> None:
        await self.store.aclose()


class Chatflow:
    """chatflow-agent's store through its public calls (it has no batch claim: one per key)."""

    def __init__(self, store: Any, agent: Any) -> None:
        self.store = store
        self.agent = agent

    @classmethod
    async def open(cls, path: Path) -> Chatflow:
        from chatflow_agent import Agent, SQLiteSessionStore

        store = SQLiteSessionStore(path, default_max_turns=MAX_TURNS)
        return cls(store, Agent(name="echo", instructions="Echo."))

    async def new_session(self, name: str) -> str:
        self.store.get_or_create(name, self.agent)
        return name

    async def turn(self, session: str, text: str) -> None:
        from chatflow_agent import Message, Role

        context = self.store.get_or_create(session, self.agent)
        context.add_message(Message(role=Role.USER, content=text))
        context.add_message(Message(role=Role.MODEL, content=ANSWER))

    async def claim(self, keys: Sequence[str]) -> set[str]:
        return {key for key in keys if self.store.record_processed_message(key)}

    async def aclose(self) -> None:
        pass


async def open_side(name: str, path: Path) -> Side:
    if name == "gateway":
        return await Gateway.open(path)
    return await Chatflow.open(path)
