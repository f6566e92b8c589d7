"""The sessions some agents hold, by how long they have waited: the human-support queue.

A session waits since its last ``agent_changed`` event to its active agent (the handoff), or
since its creation when it never had one (it started with that agent). The event is the newest
of the session's log that names the agent, found by walking the log back (its one index).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .._rows import SESSION_COLUMNS, to_datetime, to_session
from .._types import AgentCount, Waiting

_UNANSWERED = "(m.role = 'user' AND json_extract(m.data, '$.outside_turns') IS 1)"

_WAITING = f"""
SELECT {SESSION_COLUMNS}, since, unanswered FROM (
    SELECT s.*,
        coalesce((SELECT e.created_at FROM session_events AS e
                  WHERE e.session_id = s.session_id AND e.kind = 'agent_changed'
                    AND json_extract(e.detail, '$.to') = s.active_agent
                  ORDER BY e.seq DESC LIMIT 1), s.created_at) AS since,
        coalesce((SELECT {_UNANSWERED} FROM messages AS m WHERE m.id = s.head_id), 0)
            AS unanswered
    FROM sessions AS s WHERE s.active_agent IN ({{marks}})
)
ORDER BY since, session_id LIMIT ? OFFSET ?
"""


def waiting_sessions(
    conn: sqlite3.Connection, agents: Sequence[str], limit: int, offset: int
) -> list[Waiting]:
    """A page of the sessions ``agents`` hold, the one waiting longest first, then by id."""
    if not agents:
        return []
    marks = ", ".join("?" for _ in agents)
    rows = conn.execute(_WAITING.format(marks=marks), (*agents, limit, offset)).fetchall()
    return [Waiting(to_session(row), to_datetime(row[10]), bool(row[11])) for row in rows]


def agent_counts(conn: sqlite3.Connection, excluding: Sequence[str]) -> list[AgentCount]:
    """Each active agent but ``excluding``, by name, with its sessions and unanswered ones."""
    marks = ", ".join("?" for _ in excluding)
    rows = conn.execute(
        f"SELECT s.active_agent, count(*), coalesce(sum({_UNANSWERED}), 0)"
        " FROM sessions AS s LEFT JOIN messages AS m ON m.id = s.head_id"
        f" WHERE s.active_agent NOT IN ({marks})"
        " GROUP BY s.active_agent ORDER BY s.active_agent",
        tuple(excluding),
    ).fetchall()
    return [AgentCount(agent, sessions, unanswered) for agent, sessions, unanswered in rows]
