"""The server backend: PostgreSQL through an asyncpg pool, for several gateway processes."""

from ._store import DEFAULT_POOL_SIZE, PostgresStore

__all__ = ["DEFAULT_POOL_SIZE", "PostgresStore"]
