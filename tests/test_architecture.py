"""The arrows between packages go one way, as DESIGN.md draws them, and public names resolve."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "channels", "agents", "store")
ALLOWED = {
    "gateway": {"channels", "agents", "store"},
    "agents": {"store"},
    "channels": set(),
    "store": set(),
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names & set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_what_design_allows(package: str) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        forbidden = imported_packages(path) - ALLOWED[package] - {package}
        assert not forbidden, f"{path.relative_to(ROOT)} imports {sorted(forbidden)}"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_exists(package: str) -> None:
    module = importlib.import_module(package)
    for name in getattr(module, "__all__", []):
        assert hasattr(module, name), f"{package}.__all__ names missing {name}"
