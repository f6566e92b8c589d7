"""The sessions some agents hold, by how long they have waited: the human-support queue.

The SQLite backend's ``_sql_waiting`` on PostgreSQL: same names, same arguments, awaited, the
same order (ties by session id in byte order, as SQLite).
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from .._rows import SESSION_COLUMNS, to_datetime, to_session
from .._types import AgentCount, Waiting

_UNANSWERED = (
    "(m.role = 'user' AND coalesce(m.data::jsonb -> 'outside_turns' = 'true'::jsonb, false))"
)

_WAITING = f"""
SELECT {SESSION_COLUMNS}, since, unanswered FROM (
    SELECT s.*,
        coalesce((SELECT e.created_at FROM session_events AS e
                  WHERE e.session_id = s.session_id AND e.kind = 'agent_changed'
                    AND e.detail::jsonb ->> 'to' = s.active_agent
                  ORDER BY e.seq DESC LIMIT 1), s.created_at) AS since,
        coalesce((SELECT {_UNANSWERED} FROM messages AS m WHERE m.id = s.head_id), false)
            AS unanswered
    FROM sessions AS s WHERE s.active_agent = ANY($1::text[])
) AS held
ORDER BY since, session_id COLLATE "C" LIMIT $2 OFFSET $3
"""


async def waiting_sessions(
    conn: asyncpg.Connection, agents: Sequence[str], limit: int, offset: int
) -> list[Waiting]:
    """A page of the sessions ``agents`` hold, the one waiting longest first, then by id."""
    if not agents:
        return []
    rows = await conn.fetch(_WAITING, list(agents), limit, offset)
    return [Waiting(to_session(row), to_datetime(row[10]), bool(row[11])) for row in rows]


async def agent_counts(conn: asyncpg.Connection, excluding: Sequence[str]) -> list[AgentCount]:
    """Each active agent but ``excluding``, by name, with its sessions and unanswered ones."""
    rows = await conn.fetch(
        f"SELECT s.active_agent, count(*), count(*) FILTER (WHERE {_UNANSWERED})"
        " FROM sessions AS s LEFT JOIN messages AS m ON m.id = s.head_id"
        " WHERE NOT (s.active_agent = ANY($1::text[]))"
        ' GROUP BY s.active_agent ORDER BY s.active_agent COLLATE "C"',
        list(excluding),
    )
    return [AgentCount(row[0], row[1], row[2]) for row in rows]
