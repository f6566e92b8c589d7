"""``async with store``: open on entry (closed again if opening fails), closed on exit."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class OpenClose:
    """The context-manager half of both backends; each gives ``initialize`` and ``aclose``."""

    async def initialize(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        try:
            await self.initialize()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
