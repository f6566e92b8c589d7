"""The lease's renewal loop: it renews until stopped, whatever a renewal raises.

A renewal that raised anything but a StoreError ended the loop's task with nobody awaiting it:
the process kept running turns with a lease that ran out, so the other processes took its
sessions over and ran them again, and nothing in the log said why.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest

from webhook_bot_gateway.gateway._pipeline._lease import Lease
from webhook_bot_gateway.store import Store, StoreError


class Renewals:
    """A store whose renewals raise the given errors in turn, then succeed."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.renewed = 0
        self.released = False
        self.renewed_again = asyncio.Event()

    async def renew_lease(self, seconds: float) -> None:
        if self.errors and self.renewed:  # the first (at start) succeeds
            self.renewed += 1
            raise self.errors.pop(0)
        self.renewed += 1
        if self.renewed > 1 and not self.errors:
            self.renewed_again.set()

    async def release_lease(self) -> None:
        self.released = True


@pytest.mark.parametrize(
    "error",
    [StoreError("the store did not answer"), RuntimeError("an asyncpg error it did not know")],
)
async def test_the_lease_is_renewed_after_a_renewal_that_raised(
    error: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    store = Renewals(error)
    lease = Lease(cast(Store, cast(Any, store)), 0.03)
    caplog.set_level(logging.WARNING, logger="gateway.lease")
    await lease.start()
    try:
        await asyncio.wait_for(store.renewed_again.wait(), 5)
    finally:
        await lease.stop()
    assert store.released
    [record] = caplog.records
    assert record.getMessage().startswith("could not renew the store lease:")
    assert str(error) in record.getMessage()
