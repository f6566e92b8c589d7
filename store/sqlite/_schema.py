"""Schema versions: ``PRAGMA user_version`` and forward-only migrations applied at open.

``MIGRATIONS[n]`` takes the schema from version ``n`` to ``n + 1``. Add new migrations at the
end; never edit one that has shipped. Each runs in its own ``BEGIN IMMEDIATE`` transaction
together with the version bump, so a crash leaves the file at one version or the next.
"""

from __future__ import annotations

import sqlite3

from .._errors import SchemaTooNewError

_V1 = (
    """
    CREATE TABLE sessions (
        session_id   TEXT PRIMARY KEY,
        channel      TEXT NOT NULL,
        account      TEXT NOT NULL,
        chat_id      TEXT NOT NULL,
        active_agent TEXT NOT NULL,
        status       TEXT NOT NULL DEFAULT 'idle'
                     CHECK (status IN ('idle', 'running', 'interrupted')),
        head_id      INTEGER REFERENCES messages (id),
        metadata     TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
        created_at   REAL NOT NULL,
        updated_at   REAL NOT NULL
    )
    """,
    "CREATE INDEX sessions_updated ON sessions (updated_at DESC, session_id)",
    "CREATE INDEX sessions_status ON sessions (status)",
    # Deleting a message checks that no session points at it; without this, a full scan each.
    "CREATE INDEX sessions_head ON sessions (head_id)",
    """
    CREATE TABLE messages (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
        -- NO ACTION, checked at the end of the statement: a session's whole tree goes in the
        -- one DELETE that cascades from it, without one trigger level per generation.
        parent_id  INTEGER REFERENCES messages (id),
        role       TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
        text       TEXT,
        agent      TEXT,
        data       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(data)),
        created_at REAL NOT NULL
    )
    """,
    "CREATE INDEX messages_session ON messages (session_id, id)",
    "CREATE INDEX messages_parent ON messages (parent_id)",
    """
    CREATE TABLE session_events (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
        kind       TEXT NOT NULL,
        detail     TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(detail)),
        created_at REAL NOT NULL
    )
    """,
    "CREATE INDEX session_events_session ON session_events (session_id, id)",
    """
    CREATE TABLE processed_messages (
        key     TEXT PRIMARY KEY,
        seen_at REAL NOT NULL
    ) WITHOUT ROWID
    """,
    "CREATE INDEX processed_messages_seen_at ON processed_messages (seen_at)",
)

# The gateway pipeline (docs/store.md "Pipeline tables").
_V2 = (
    """
    CREATE TABLE deliveries (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        channel     TEXT NOT NULL,
        account     TEXT,
        body        BLOB NOT NULL,
        keys        TEXT NOT NULL CHECK (json_valid(keys)),
        received_at REAL NOT NULL
    )
    """,
    """
    CREATE TABLE quarantine (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        channel     TEXT NOT NULL,
        account     TEXT,
        body        BLOB NOT NULL,
        reason      TEXT NOT NULL,
        received_at REAL NOT NULL,
        replayed_at REAL
    )
    """,
    """
    CREATE TABLE inbox (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id      TEXT NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
        dedup_key       TEXT NOT NULL UNIQUE,
        event           TEXT NOT NULL CHECK (json_valid(event)),
        state           TEXT NOT NULL DEFAULT 'pending'
                        CHECK (state IN ('pending', 'done', 'dead')),
        attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
        error           TEXT,
        next_attempt_at REAL NOT NULL,
        created_at      REAL NOT NULL,
        finished_at     REAL
    )
    """,
    "CREATE INDEX inbox_session ON inbox (session_id, state, id)",
    "CREATE INDEX inbox_due ON inbox (state, next_attempt_at)",
    """
    CREATE TABLE outbox (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id      TEXT REFERENCES sessions (session_id) ON DELETE CASCADE,
        channel         TEXT NOT NULL,
        account         TEXT NOT NULL,
        chat_id         TEXT NOT NULL,
        payload         TEXT NOT NULL CHECK (json_valid(payload)),
        state           TEXT NOT NULL DEFAULT 'pending'
                        CHECK (state IN ('pending', 'sent', 'failed', 'dead', 'uncertain')),
        attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
        next_attempt_at REAL NOT NULL,
        error           TEXT,
        platform_ids    TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(platform_ids)),
        delivery_state  TEXT CHECK (delivery_state IN ('sent', 'delivered', 'read', 'failed')),
        created_at      REAL NOT NULL,
        sent_at         REAL
    )
    """,
    "CREATE INDEX outbox_due ON outbox (state, next_attempt_at)",
    "CREATE INDEX outbox_session ON outbox (session_id, id)",
    # Status webhooks name a platform message id; this makes their match one index lookup.
    # Telegram message ids repeat across chats, so the key includes channel and account and a
    # later row takes an id over (statuses come from WhatsApp, whose ids are global).
    """
    CREATE TABLE outbox_platform_ids (
        channel     TEXT NOT NULL,
        account     TEXT NOT NULL,
        platform_id TEXT NOT NULL,
        outbox_id   INTEGER NOT NULL REFERENCES outbox (id) ON DELETE CASCADE,
        PRIMARY KEY (channel, account, platform_id)
    ) WITHOUT ROWID
    """,
    "CREATE INDEX outbox_platform_ids_outbox ON outbox_platform_ids (outbox_id)",
)

# A chat's replies leave in order even across restarts: only the oldest pending row of a chat
# is ever due, which this index makes one probe per candidate row.
_V3 = (
    "CREATE INDEX outbox_pending_chat ON outbox (channel, account, chat_id, id)"
    " WHERE state = 'pending'",
)

# The session event log (docs/store.md "Event log"): a gap-free ``seq`` per session, so a
# watcher resumes after the last one it saw; and the attachments of web and platform media.
_V4 = (
    "ALTER TABLE session_events ADD COLUMN seq INTEGER NOT NULL DEFAULT 0",
    """
    UPDATE session_events SET seq = (SELECT count(*) FROM session_events AS earlier
        WHERE earlier.session_id = session_events.session_id AND earlier.id <= session_events.id)
    """,
    "CREATE UNIQUE INDEX session_events_seq ON session_events (session_id, seq)",
    """
    CREATE TABLE attachments (
        id           TEXT PRIMARY KEY CHECK (length(id) = 32),
        session_id   TEXT NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
        name         TEXT NOT NULL,
        content_type TEXT NOT NULL,
        size         INTEGER NOT NULL DEFAULT 0 CHECK (size >= 0),
        state        TEXT NOT NULL CHECK (state IN ('ready', 'pending', 'failed')),
        source       TEXT NOT NULL CHECK (source IN ('upload', 'whatsapp', 'telegram')),
        message_key  TEXT,
        media_ref    TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(media_ref)),
        error        TEXT,
        created_at   REAL NOT NULL
    ) WITHOUT ROWID
    """,
    "CREATE INDEX attachments_session ON attachments (session_id, created_at)",
    "CREATE INDEX attachments_message ON attachments (message_key)",
    "CREATE INDEX attachments_pending ON attachments (state) WHERE state = 'pending'",
)

# A turn loads only its recent turns plus the branch's system messages (docs/store.md "What a
# turn loads"); this finds the older system messages without scanning the session's history.
_V5 = ("CREATE INDEX messages_system ON messages (session_id, id) WHERE role = 'system'",)

# The log is read by (session_id, seq), and a session's events are deleted through that index's
# first column too: the older (session_id, id) index only cost every event an insert.
_V6 = ("DROP INDEX session_events_session",)

# Ownership across processes (docs/deployment.md): each store renews a lease while it lives; a
# running turn names its store (``sessions.owner``), and a sender claims the outbox row it is
# sending. Another process takes over a session or a row only once its owner's lease or claim
# has run out. Leases are looked up by owner only (the primary key): the table holds one row
# per live process, and ``interrupt_running`` deletes the rows that ran out a day ago.
_V7 = (
    "CREATE TABLE leases (owner TEXT PRIMARY KEY, expires_at REAL NOT NULL) WITHOUT ROWID",
    "ALTER TABLE sessions ADD COLUMN owner TEXT",
    "ALTER TABLE outbox ADD COLUMN claimed_by TEXT",
    "ALTER TABLE outbox ADD COLUMN claimed_until REAL",
)

# An operator's reply has its own role (it was an assistant message of agent "operator"). SQLite
# cannot alter a CHECK constraint: the documented way for a change that leaves every stored row
# valid is to edit the table's SQL in sqlite_schema (https://sqlite.org/lang_altertable.html,
# "otherwise"), then bump the schema cookie so that every connection parses it again.
SCHEMA_CHANGED = "-- bump the schema cookie"  # _step runs PRAGMA schema_version = cookie + 1
_ROLES_V1 = "CHECK (role IN ('system', 'user', 'assistant', 'tool'))"
_ROLES_V8 = "CHECK (role IN ('system', 'user', 'assistant', 'tool', 'operator'))"
_V8 = (
    "PRAGMA writable_schema = ON",
    "UPDATE sqlite_schema SET sql = replace(sql, '{old}', '{new}')"
    " WHERE type = 'table' AND name = 'messages'".format(
        old=_ROLES_V1.replace("'", "''"), new=_ROLES_V8.replace("'", "''")
    ),
    SCHEMA_CHANGED,
    "PRAGMA writable_schema = RESET",
    "UPDATE messages SET role = 'operator' WHERE role = 'assistant' AND agent = 'operator'",
)

# Random keys of the database, shared by its processes (``Store.secret``); not copied by
# migrate-store: a new database makes its own.
_V9 = ("CREATE TABLE secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",)

# A cancel accepted for a turn is kept with its inbox rows (``Store.cancel_inbox``): a process
# killed before the cancelled turn commits leaves the rows marked, and the next run of their
# turn ends cancelled instead of answering. Pending marked rows are found by a partial index.
_V10 = (
    "ALTER TABLE inbox ADD COLUMN cancelled_at REAL",
    "CREATE INDEX inbox_cancelled ON inbox (session_id, id)"
    " WHERE cancelled_at IS NOT NULL AND state = 'pending'",
)

MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10)
LATEST = len(MIGRATIONS)


def schema_version(conn: sqlite3.Connection) -> int:
    """The file's schema version (0 for a new file)."""
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    return version


def check_version(conn: sqlite3.Connection) -> None:
    """Raise SchemaTooNewError if the file was written by a newer version of the code."""
    found = schema_version(conn)
    if found > LATEST:
        raise SchemaTooNewError(found, LATEST)


def migrate(conn: sqlite3.Connection) -> None:
    """Apply every migration the file lacks, each in its own transaction."""
    while schema_version(conn) < LATEST:
        conn.execute("BEGIN IMMEDIATE")
        try:
            _step(conn)
            conn.commit()
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise


def _step(conn: sqlite3.Connection) -> None:
    # Read again under the write lock: another process may have migrated meanwhile.
    version = schema_version(conn)
    if version > LATEST:
        raise SchemaTooNewError(version, LATEST)
    if version == LATEST:
        return
    for statement in MIGRATIONS[version]:
        if statement == SCHEMA_CHANGED:
            cookie: int = conn.execute("PRAGMA schema_version").fetchone()[0]
            conn.execute(f"PRAGMA schema_version = {cookie + 1}")
        else:
            conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {version + 1}")
