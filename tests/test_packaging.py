"""The distribution as a user installs it: one top-level import package, beside the OpenAI
Agents SDK (which owns ``agents``) in one fresh environment, run from outside the checkout.

Offline: the wheels come from the wheelhouse that ``make test``'s set-up downloads into the
virtual environment (the Makefile's ``NEIGHBOURS``).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.gateway_proc import REPO, Gateway, eventually, free_port

IMPORT_PACKAGE = "webhook_bot_gateway"
FOLDERS = ("gateway", "channels", "agents", "store")
WHEELHOUSE = Path(sys.prefix) / "wheelhouse"
ADMIN_TOKEN = "packaging-admin-token"

USER_MODULE = '''
from agents import Agent as SDKAgent, function_tool  # the OpenAI Agents SDK

from webhook_bot_gateway.agents import Agent, Rule, RulesModel, tool


@function_tool
def sdk_tool(order: str) -> str:
    """A tool of the SDK's, to show that its package works beside the gateway."""
    return order


SDK_AGENT = SDKAgent(name="sdk-side", tools=[sdk_tool])


@tool
def order_status(order: str) -> str:
    """Look up an order."""
    return f"order {order} ships tomorrow ({SDK_AGENT.name} and {SDK_AGENT.tools[0].name} too)"


AGENTS = [
    Agent(
        "orders",
        "You answer order questions.",
        tools=[order_status],
        model=RulesModel(
            [
                Rule(match="(?P<o>A-[0-9]+)", tool="order_status", arguments={"order": "{o}"},
                     reply="{result}"),
                Rule(reply="Send an order number such as A-7."),
            ]
        ),
    )
]
'''


def run(*command: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built offline from the wheelhouse's setuptools."""
    if not (WHEELHOUSE / ".complete").exists():
        pytest.fail(f"{WHEELHOUSE} is missing: `make test` downloads it before running pytest")
    out = tmp_path_factory.mktemp("dist")
    pip = (sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index")
    run(*pip, "--find-links", WHEELHOUSE, "--wheel-dir", out, REPO)
    [built] = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def environment(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding the gateway's wheel and ``openai-agents``."""
    env = tmp_path_factory.mktemp("env")
    run(sys.executable, "-m", "venv", env)
    pip = (env / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-index")
    run(*pip, "--find-links", WHEELHOUSE, wheel, "openai-agents")
    return env


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's folder outside the checkout: a config and an agents module using both packages."""
    folder = tmp_path_factory.mktemp("site")
    assert not folder.resolve().is_relative_to(REPO)
    (folder / "my_agents.py").write_text(USER_MODULE, encoding="utf-8")
    example = (REPO / "config.example.toml").read_text(encoding="utf-8")
    agents = '\n[agents]\nstarting_agent = "orders"\nmodule = "my_agents"\n'
    (folder / "config.toml").write_text(example[: example.index("\n[agents]")] + agents)
    return folder


def test_the_wheel_holds_one_top_level_import_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    dist_info = {top for top in tops if top.endswith(".dist-info")}
    assert tops - dist_info == {IMPORT_PACKAGE}
    [info] = dist_info
    assert zipfile.ZipFile(wheel).read(f"{info}/top_level.txt").decode().split() == [IMPORT_PACKAGE]
    entry_points = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert f"gateway = {IMPORT_PACKAGE}.gateway.cli:main" in entry_points


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_file_of_the_checkouts_folders_is_in_the_wheel(wheel: Path, folder: str) -> None:
    """A package folder missing from pyproject's ``packages`` list would be left out."""
    names = set(zipfile.ZipFile(wheel).namelist())
    files = [
        path.relative_to(REPO).as_posix()
        for path in (REPO / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    ]
    assert files
    missing = [f for f in files if f"{IMPORT_PACKAGE}/{f}" not in names]
    assert not missing, f"not in the wheel (add the package to pyproject.toml): {missing}"


def test_the_installed_distribution_owns_one_top_level_name(environment: Path, site: Path) -> None:
    """From the installed RECORD, as ``pip show -f`` lists it (outside the checkout, whose
    egg-info would answer instead); scripts go to bin/."""
    probe = (
        "from importlib.metadata import distribution;"
        "files = distribution('webhook-bot-gateway').files;"
        "print(*sorted({f.parts[0] for f in files if not f.parts[0].startswith('..')}))"
    )
    tops = run(environment / "bin" / "python", "-c", probe, cwd=site).stdout.split()
    assert [top for top in tops if not top.endswith(".dist-info")] == [IMPORT_PACKAGE]


def test_agents_is_the_sdks_and_the_gateway_is_under_its_own_name(
    environment: Path, site: Path
) -> None:
    probe = (
        "import agents, webhook_bot_gateway.agents as ours;"
        "print(agents.__file__); print(ours.__file__); print(agents.Runner.__name__)"
    )
    sdk, gateway, runner = run(environment / "bin" / "python", "-c", probe, cwd=site).stdout.split()
    packages = next((environment / "lib").glob("python3.*/site-packages"))
    assert Path(sdk) == packages / "agents" / "__init__.py"
    assert Path(gateway) == packages / IMPORT_PACKAGE / "agents" / "__init__.py"
    assert runner == "Runner"


def test_check_config_from_outside_the_checkout(environment: Path, site: Path) -> None:
    done = subprocess.run(
        [environment / "bin" / "gateway", "check-config", "--config", "config.toml"],
        cwd=site,
        env={"PYTHONPATH": str(site), "GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "agents declared: orders" in done.stdout
    module = run(environment / "bin" / "python", "-m", IMPORT_PACKAGE, "--help", cwd=site)
    assert "check-config" in module.stdout


@pytest.fixture
async def installed(environment: Path, site: Path) -> AsyncIterator[Gateway]:
    """``gateway serve`` of the fresh environment, in the user's folder, on the sandbox."""
    port = free_port()
    config = (site / "config.toml").read_text(encoding="utf-8")
    env = {"GATEWAY_PORT": str(port), "GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN, "PYTHONPATH": str(site)}
    command = [str(environment / "bin" / "gateway")]
    gateway = Gateway(site, config, port, site / "data" / "gateway.db", env, command)
    await gateway.start()
    yield gateway
    await gateway.ensure_stopped()


async def test_a_round_trip_through_the_installed_gateway_and_a_module_using_the_sdk(
    installed: Gateway,
) -> None:
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    simulate = {"channel": "telegram", "chat_id": "4242", "text": "where is A-7?"}
    async with aiohttp.ClientSession(headers=auth) as http:
        async with http.post(f"{installed.url}/sandbox/api/simulate", json=simulate) as r:
            assert r.status == 200, await r.text()
            assert (await r.json())["webhook_status"] == 200

        async def replies() -> list[str]:
            query = {"channel": "telegram", "chat_id": "4242"}
            async with http.get(f"{installed.url}/sandbox/api/sent", params=query) as r:
                sent = (await r.json())["sent"]
            return [c["text"] for c in sent if c["method"] == "sendMessage"]

        await eventually(replies, "the reply to the simulated message")
        assert await replies() == ["order A-7 ships tomorrow (sdk-side and sdk_tool too)"]
