"""The configured store, opened; a failure to open it is an error naming ``store.url``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from webhook_bot_gateway.store import Store, StoreError, open_store

from .config import Settings


@contextmanager
def naming_store_url() -> Iterator[None]:
    """A StoreError raised inside (a file that is not a database, a refused login, a server
    that does not answer) again, its message led by ``store.url: ``."""
    try:
        yield
    except StoreError as exc:
        raise StoreError(f"store.url: {exc}") from exc


async def open_configured_store(settings: Settings) -> Store:
    """``open_store`` with the settings' url, dedup TTL and pool size."""
    with naming_store_url():
        store = await open_store(
            settings.store.url,
            dedup_ttl_hours=settings.dedup.ttl_hours,
            pool_size=settings.store.pool_size,
        )
    return store
