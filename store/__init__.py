"""Persistent state: sessions, their history DAG, turns and the dedup guard."""

from ._errors import (
    InvalidSessionId,
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
from ._types import ROLES, SESSION_STATUSES, Message, NewMessage, Role, Session, SessionEvent

__all__ = [
    "ROLES",
    "SESSION_STATUSES",
    "InvalidSessionId",
    "Message",
    "NewMessage",
    "Role",
    "RunActive",
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
    "validate_session_id",
]
