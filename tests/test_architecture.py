"""The arrows between packages go one way, as DESIGN.md draws them, and public names resolve."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOT_PACKAGE = "webhook_bot_gateway"
PACKAGES = ("gateway", "channels", "agents", "store")
ALLOWED = {
    "gateway": {"channels", "agents", "store"},
    "agents": {"store"},
    "channels": set(),
    "store": set(),
}


def imported_names(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports, relative imports resolved."""
    parts = [ROOT_PACKAGE, *path.relative_to(ROOT).parent.parts]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = parts[: len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def project_packages(names: set[str]) -> set[str]:
    """The project's packages among ``names``: ``webhook_bot_gateway.X...`` gives X."""
    prefix = ROOT_PACKAGE + "."
    found = {name.removeprefix(prefix).split(".")[0] for name in names if name.startswith(prefix)}
    return found & set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_what_design_allows(package: str) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        forbidden = project_packages(imported_names(path)) - ALLOWED[package] - {package}
        assert not forbidden, f"{path.relative_to(ROOT)} imports {sorted(forbidden)}"


@pytest.mark.parametrize("folder", [*PACKAGES, "tests", "bench"])
def test_no_code_imports_the_old_top_level_names(folder: str) -> None:
    """``import agents`` would be whatever else owns that name (the OpenAI Agents SDK does)."""
    for path in sorted((ROOT / folder).rglob("*.py")):
        old = {name for name in imported_names(path) if name.split(".")[0] in PACKAGES}
        assert not old, f"{path.relative_to(ROOT)} imports {sorted(old)}; use {ROOT_PACKAGE}.*"


def test_the_checkout_links_each_folder_into_the_import_package() -> None:
    for package in PACKAGES:
        link = ROOT / ROOT_PACKAGE / package
        assert link.is_symlink(), link
        assert link.resolve() == ROOT / package, link


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_exists(package: str) -> None:
    module = importlib.import_module(f"{ROOT_PACKAGE}.{package}")
    for name in getattr(module, "__all__", []):
        assert hasattr(module, name), f"{package}.__all__ names missing {name}"


# Inside gateway/: the pipeline's stages serve the HTTP surfaces and the CLI, never the reverse;
# the admin API reads the store, not the stages' modules.
GATEWAY_GROUPS = {"_pipeline": {"_cli", "_admin"}, "_admin": {"_pipeline", "_cli"}}


@pytest.mark.parametrize("group", sorted(GATEWAY_GROUPS))
def test_gateway_sub_packages_import_one_way(group: str) -> None:
    prefix = f"{ROOT_PACKAGE}.gateway."
    for path in sorted((ROOT / "gateway" / group).rglob("*.py")):
        groups = {
            name.removeprefix(prefix).split(".")[0]
            for name in imported_names(path)
            if name.startswith(prefix)
        }
        forbidden = groups & GATEWAY_GROUPS[group]
        assert not forbidden, f"{path.relative_to(ROOT)} imports gateway {sorted(forbidden)}"
