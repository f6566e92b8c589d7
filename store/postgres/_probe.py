"""Whether a PostgreSQL database holds a gateway store, read without writing anything
(``gateway migrate-store`` asks before it opens a source, which would make one there)."""

from __future__ import annotations

from ._db import connect


async def why_no_store(url: str, connect_timeout: float) -> str:
    """Why the database (its search_path's schema) holds no gateway store ("" if it holds one):
    its version is the row of ``gateway_schema``."""
    conn = await connect(url, connect_timeout=connect_timeout)
    try:
        async with conn.transaction(readonly=True):
            schema = await conn.fetchval("SELECT current_schema()")
            if not await conn.fetchval("SELECT to_regclass('gateway_schema') IS NOT NULL"):
                if schema is None:
                    return "no schema of its search_path exists"
                return f"no gateway_schema table in schema {schema}"
            version = await conn.fetchval("SELECT max(version) FROM gateway_schema")
    finally:
        await conn.close()
    return "" if version is not None and version > 0 else "no version in gateway_schema"
