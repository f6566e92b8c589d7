"""Fixtures of the end-to-end tests: fake platforms in this process, the gateway as a process,
a fresh PostgreSQL schema."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from pytest_aiohttp import AiohttpServer

from tests.pg import fresh_schema

from .fakes import FakeGraph, FakeTelegram
from .gateway_proc import Gateway, config_text, demo_agents, free_port

MakeGateway = Callable[..., Awaitable[Gateway]]


@dataclass
class Platforms:
    telegram: FakeTelegram
    graph: FakeGraph
    telegram_url: str
    graph_url: str


@pytest.fixture
async def platforms(aiohttp_server: AiohttpServer) -> AsyncIterator[Platforms]:
    telegram, graph = FakeTelegram(), FakeGraph()
    tg_server = await aiohttp_server(telegram.app(), host="127.0.0.1")
    graph_server = await aiohttp_server(graph.app(), host="127.0.0.1")
    yield Platforms(
        telegram,
        graph,
        str(tg_server.make_url("")).rstrip("/"),
        str(graph_server.make_url("")).rstrip("/"),
    )
    telegram.release.set()
    graph.release.set()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


@pytest.fixture
async def make_gateway(tmp_path: Path, platforms: Platforms) -> AsyncIterator[MakeGateway]:
    """Write a config (demo agents unless ``agents`` is given) and start the gateway."""
    started: list[Gateway] = []

    async def make(
        agents: str | None = None,
        sections: Mapping[str, Mapping[str, Any]] | None = None,
        **accounts: Sequence[Mapping[str, Any]],
    ) -> Gateway:
        port, db = free_port(), tmp_path / "gateway.db"
        text = config_text(
            port=port,
            db=db,
            telegram_url=platforms.telegram_url,
            graph_url=platforms.graph_url,
            agents=agents if agents is not None else demo_agents(),
            sections=sections,
            bots=accounts.get("bots"),
            numbers=accounts.get("numbers"),
        )
        gateway = Gateway(tmp_path, text, port, db)
        started.append(gateway)
        await gateway.start()
        return gateway

    yield make
    for gateway in started:
        await gateway.ensure_stopped()


@pytest.fixture
async def postgres() -> AsyncIterator[tuple[str, Query]]:
    """A fresh schema's url and a function reading it."""
    async with fresh_schema() as url:
        yield url, postgres_query(url)


Query = Callable[[str], Awaitable[list[tuple[Any, ...]]]]


def postgres_query(url: str) -> Query:
    """A function reading the PostgreSQL store at ``url`` (a connection per call)."""

    async def query(sql: str) -> list[tuple[Any, ...]]:
        conn = await asyncpg.connect(url)
        try:
            return [tuple(row) for row in await conn.fetch(sql)]
        finally:
            await conn.close()

    return query
