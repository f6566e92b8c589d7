"""The console in headless Chromium (Debian's /usr/bin/chromium, driven by Playwright) against
the real ``gateway serve`` started as ``make run`` starts it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect

from tests.e2e.gateway_proc import Gateway, free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_CONFIG = REPO / "config.example.toml"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LAPTOP = {"width": 1280, "height": 800}

expect.set_options(timeout=10_000)


class ConsoleGateway(Gateway):
    """``python -m webhook_bot_gateway serve --config config.example.toml`` as ``make run``
    starts it, in its own working directory, with a port of its own and no GATEWAY_ADMIN_TOKEN:
    the admin token is the one its first start made in data/admin-token, as a newcomer finds it."""

    def __init__(self, directory: Path, config: Path = EXAMPLE_CONFIG) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.token = ""  # known once started
        env = {"GATEWAY_PORT": str(port)}
        text = config.read_text(encoding="utf-8")
        super().__init__(directory, text, port, directory / "data" / "gateway.db", env)

    async def start(self) -> None:
        await super().start()
        self.token = (self.directory / "data" / "admin-token").read_text(encoding="utf-8").strip()
        assert self.token in self.log(), "the first start prints the token it made"

    async def call(self, method: str, path: str, body: object | None = None) -> object:
        """The admin API (or the sandbox's) from the test itself, with the bearer token."""
        headers = {"Authorization": f"Bearer {self.token}"}
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
            http.request(method, self.url + path, json=body, headers=headers) as response,
        ):
            assert response.status < 300, f"{method} {path}: {await response.text()}"
            return await response.json() if response.status != 204 else None


@pytest.fixture
def chromium() -> Path:
    """Debian's chromium: missing fails under CI and skips elsewhere."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    return CHROMIUM


StartGateway = Callable[..., Awaitable[ConsoleGateway]]


@pytest.fixture
async def start_gateway(tmp_path: Path) -> AsyncIterator[StartGateway]:
    """Start gateways (each in its own working directory); all are stopped at the end."""
    started: list[ConsoleGateway] = []

    async def start(config: Path = EXAMPLE_CONFIG, name: str = "run") -> ConsoleGateway:
        gateway = ConsoleGateway(tmp_path / name, config)
        started.append(gateway)
        await gateway.start()
        return gateway

    yield start
    for gateway in started:
        if gateway.process is not None and gateway.process.returncode is None:
            assert await gateway.stop() == 0, gateway.log()


@pytest.fixture
async def browser(chromium: Path) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(chromium), args=CHROMIUM_ARGS
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def context(start_gateway: StartGateway, browser: Browser) -> AsyncIterator[BrowserContext]:
    """A laptop-sized browser window, closed before any gateway stops."""
    made = await browser.new_context(viewport=LAPTOP)
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
async def page(context: BrowserContext) -> AsyncIterator[Page]:
    """A tab whose uncaught script errors fail the test."""
    errors: list[str] = []
    tab = await context.new_page()
    tab.on("pageerror", lambda error: errors.append(str(error)))
    yield tab
    assert not errors, f"script errors in the console page: {errors}"


@pytest.fixture
async def gateway(start_gateway: StartGateway) -> ConsoleGateway:
    """The gateway of ``make run``: config.example.toml, its demo agents and its sandbox."""
    return await start_gateway()
