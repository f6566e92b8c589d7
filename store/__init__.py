"""Persistent state: sessions, their history DAG, turns and the dedup guard."""

from ._errors import (
    InvalidSessionId,
    MessageNotFound,
    RunActive,
    SchemaTooNewError,
    SessionDeletedError,
    SessionExistsError,
    SessionNotFound,
    StoreError,
    TurnActive,
)
from ._ids import make_session_id, validate_session_id
from ._protocol import Store, Turn
from ._sqlite import SQLiteStore
from ._sqlite_turn import CommitHook, SQLiteTurn
from ._types import ROLES, SESSION_STATUSES, Message, NewMessage, Role, Session, SessionEvent
from ._url import open_store

__all__ = [
    "ROLES",
    "SESSION_STATUSES",
    "CommitHook",
    "InvalidSessionId",
    "Message",
    "MessageNotFound",
    "NewMessage",
    "Role",
    "RunActive",
    "SQLiteStore",
    "SQLiteTurn",
    "SchemaTooNewError",
    "Session",
    "SessionDeletedError",
    "SessionEvent",
    "SessionExistsError",
    "SessionNotFound",
    "Store",
    "StoreError",
    "Turn",
    "TurnActive",
    "make_session_id",
    "open_store",
    "validate_session_id",
]
