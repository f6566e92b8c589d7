"""The plain-Python model the store's state machine (test_store_model.py) is checked against.

It holds what must be true of a few chats after any sequence of pipeline steps: which messages
were acknowledged, which are pending (with their tries), which committed turn answered each,
which went dead, and which were erased with their session. ``View`` is the same picture, read
from a real store; the state machine asserts that the two are equal after every step.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

MAX_ATTEMPTS = 3  # the dispatcher's max_attempts: the third failed try makes the rows dead

Status = Literal["idle", "interrupted"]


@dataclass(frozen=True)
class TurnView:
    """One committed turn as the history shows it: the messages it answered, and whether it
    has an answer (a turn cancelled by the user commits the message alone)."""

    keys: tuple[str, ...]
    answered: bool


@dataclass
class ChatView:
    """One chat's session: absent (never written, or erased), or its rows."""

    exists: bool = False
    status: Status = "idle"
    turns: list[TurnView] = field(default_factory=list)
    pending: list[tuple[str, int]] = field(default_factory=list)  # (key, attempts), inbox order
    dead: list[str] = field(default_factory=list)
    outbox: list[tuple[str, ...]] = field(default_factory=list)  # the keys each reply answers


@dataclass
class View:
    """Everything the invariants compare: each chat's session, and rows of no session."""

    chats: dict[str, ChatView]
    orphans: int = 0  # rows of a session id that has no session row (messages, inbox, ...)
    unparsed: int = 0  # deliveries stored and not yet turned into inbox rows


class Model:
    """What the store must hold; every method is one pipeline step that succeeded."""

    def __init__(self, chats: tuple[str, ...]) -> None:
        self.chats = {chat: ChatView() for chat in chats}
        self.acked: dict[str, str] = {}  # every acknowledged key -> its chat
        self.lost: dict[str, str] = {}  # keys whose ingest crashed: never acknowledged
        self.erased: set[str] = set()  # acknowledged keys whose session was deleted
        self._next = 0

    def new_key(self, chat: str) -> str:
        self._next += 1
        return f"whatsapp:wamid.{chat}.{self._next}"

    # steps

    def acknowledge(self, key: str, chat: str) -> None:
        """The store answered 'new' for ``key``: it is durable, and pending once parsed."""
        assert key not in self.acked, f"{key} acknowledged twice"
        self.lost.pop(key, None)
        self.acked[key] = chat
        view = self.chats[chat]
        if not view.exists:
            self.chats[chat] = view = ChatView(exists=True)
        view.pending.append((key, 0))

    def commit(self, chat: str, *, answered: bool = True) -> tuple[str, ...]:
        """A turn took every pending row of ``chat`` and committed."""
        view = self.chats[chat]
        keys = tuple(key for key, _ in view.pending)
        view.turns.append(TurnView(keys, answered))
        if answered:
            view.outbox.append(keys)
        view.pending.clear()
        view.status = "idle"
        return keys

    def fail(self, chat: str) -> bool:
        """A turn of every pending row raised: one more try each; True if they went dead."""
        view = self.chats[chat]
        dead = max(attempts for _, attempts in view.pending) + 1 >= MAX_ATTEMPTS
        if dead:
            view.dead += [key for key, _ in view.pending]
            view.pending.clear()
        else:
            view.pending = [(key, attempts + 1) for key, attempts in view.pending]
        return dead

    def interrupt(self, chat: str) -> None:
        """A turn of ``chat`` was under way when its process died."""
        self.chats[chat].status = "interrupted"

    def delete(self, chat: str) -> None:
        """The session was erased: its rows go, its keys stay remembered by the dedup guard."""
        view = self.chats[chat]
        self.erased |= {key for key, _ in view.pending} | set(view.dead)
        self.erased |= {key for turn in view.turns for key in turn.keys}
        self.chats[chat] = ChatView()

    # what must hold

    def expected(self) -> View:
        return View({chat: _copy(view) for chat, view in self.chats.items()})

    def check(self) -> None:
        """The model's own bookkeeping: every acknowledged key is in exactly one place."""
        places: Counter[str] = Counter(self.erased)
        for view in self.chats.values():
            places.update(key for key, _ in view.pending)
            places.update(view.dead)
            places.update(key for turn in view.turns for key in turn.keys)
        assert places == Counter(self.acked.keys()), (
            "model bookkeeping: a key is in no or two places"
        )


def _copy(view: ChatView) -> ChatView:
    return ChatView(
        view.exists, view.status, list(view.turns), list(view.pending), list(view.dead),
        list(view.outbox),
    )  # fmt: skip


def answered_once(view: View) -> Counter[str]:
    """How many committed turns each key is in, over every session of the store."""
    return Counter(key for chat in view.chats.values() for t in chat.turns for key in t.keys)
