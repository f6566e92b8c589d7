"""Store exception hierarchy.

* StoreError                      (code ``store_error``)
  + SchemaTooNewError             the file was written by a newer version of the gateway
  + UnusableSQLiteFile            (code ``unusable_store``) not a SQLite database, a folder, ...
  + SessionNotFound               (code ``unknown_session``)
  + SessionExistsError            (code ``session_exists``)
  + SessionDeletedError           the session was deleted while a turn ran; nothing written
  + MessageNotFound               (code ``unknown_message``) not a message of that session
  + RunActive                     (code ``run_active``) a HEAD move while a turn runs
  + TurnActive                    (code ``turn_active``) a second concurrent turn of one session
    + TurnTakenOver               its commit: another process took the session over meanwhile
  + DeliveryNotFound              (code ``unknown_delivery``)
  + InboxNotFound                 (code ``unknown_inbox``) inbox rows that do not exist
  + InboxNotPending               (code ``inbox_not_pending``) inbox rows already done or dead
  + OutboxNotFound                (code ``unknown_outbox``)
  + OutboxNotPending              (code ``outbox_not_pending``) already sent, failed, dead...
  + QuarantineNotFound            (code ``unknown_quarantine``)
* InvalidSessionId(ValueError)    (code ``invalid_session_id``)
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of every error the store raises on purpose."""

    code = "store_error"


class SchemaTooNewError(StoreError):
    code = "schema_too_new"

    def __init__(self, found: int, known: int) -> None:
        super().__init__(
            f"store schema version {found} is newer than this gateway knows ({known}); "
            "upgrade the gateway or point it at another database"
        )
        self.found = found
        self.known = known


class UnusableSQLiteFile(StoreError):
    """The path of a SQLite store names something SQLite cannot use as a database: a file that
    is not one, a folder, a path whose folder cannot be made or opened."""

    code = "unusable_store"

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path} cannot be used as a SQLite store: {reason}")
        self.path = path
        self.reason = reason


class SessionNotFound(StoreError):
    code = "unknown_session"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r}")
        self.session_id = session_id


class SessionExistsError(StoreError):
    code = "session_exists"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} exists already")
        self.session_id = session_id


class SessionDeletedError(StoreError):
    code = "session_deleted"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} was deleted during the turn; nothing was written")
        self.session_id = session_id


class MessageNotFound(StoreError):
    code = "unknown_message"

    def __init__(self, session_id: str, message_id: int) -> None:
        super().__init__(f"session {session_id!r} has no message {message_id}")
        self.session_id = session_id
        self.message_id = message_id


class RunActive(StoreError):
    code = "run_active"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} has a turn running; try again when it ends")
        self.session_id = session_id


class TurnActive(StoreError):
    code = "turn_active"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} already has a turn open in this process")
        self.session_id = session_id


class TurnTakenOver(TurnActive):
    """The commit of a turn whose session another process took over while it ran (this
    store's lease ran out): nothing was written. A TurnActive, as the session is another
    turn's now."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.args = (
            f"session {session_id!r} was taken over by another process (this store's lease ran"
            " out) while its turn ran; nothing was written",
        )


class DeliveryNotFound(StoreError):
    code = "unknown_delivery"

    def __init__(self, delivery_id: int) -> None:
        super().__init__(f"no delivery {delivery_id} (already parsed?)")
        self.delivery_id = delivery_id


class OlderDeliveries(StoreError):
    """``record_parsed_many(..., oldest_first=True)``: an older delivery is stored, not given."""

    code = "older_deliveries"

    def __init__(self, delivery_id: int) -> None:
        super().__init__(f"delivery {delivery_id} is stored and older: record it first")
        self.delivery_id = delivery_id


class InboxNotFound(StoreError):
    code = "unknown_inbox"

    def __init__(self, ids: tuple[int, ...]) -> None:
        super().__init__(f"no inbox rows {list(ids)}")
        self.ids = ids


class InboxNotPending(StoreError):
    code = "inbox_not_pending"

    def __init__(self, ids: tuple[int, ...]) -> None:
        super().__init__(f"inbox rows {list(ids)} are not pending; nothing was written")
        self.ids = ids


class OutboxNotFound(StoreError):
    code = "unknown_outbox"

    def __init__(self, outbox_id: int) -> None:
        super().__init__(f"no outbox row {outbox_id}")
        self.outbox_id = outbox_id


class OutboxNotPending(StoreError):
    code = "outbox_not_pending"

    def __init__(self, outbox_id: int, state: str) -> None:
        super().__init__(f"outbox row {outbox_id} is {state}, not pending")
        self.outbox_id = outbox_id
        self.state = state


class QuarantineNotFound(StoreError):
    code = "unknown_quarantine"

    def __init__(self, quarantine_id: int) -> None:
        super().__init__(f"no quarantined delivery {quarantine_id}")
        self.quarantine_id = quarantine_id


class AttachmentNotFound(StoreError):
    """No attachment with this id (in this session)."""

    def __init__(self, attachment_id: str) -> None:
        super().__init__(f"attachment {attachment_id!r} not found")
        self.attachment_id = attachment_id


class InvalidSessionId(ValueError):
    code = "invalid_session_id"
