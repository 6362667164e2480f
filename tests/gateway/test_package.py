"""The gateway package's own shape: no import circles, and tracing depends on nothing above it."""

from __future__ import annotations

import ast
from pathlib import Path

import inferstack_gateway

PACKAGE = Path(inferstack_gateway.__file__).parent


def imports_of(module: Path) -> set[str]:
    """Every inferstack_gateway module a module imports, TYPE_CHECKING and function-level imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "inferstack_gateway":
                found.update(alias.name for alias in node.names)
            elif node.module.startswith("inferstack_gateway."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("inferstack_gateway."))
    return found - {"__init__"}


def graph() -> dict[str, set[str]]:
    return {path.stem: imports_of(path) for path in PACKAGE.glob("*.py")}


def test_the_gateway_package_has_no_import_circles() -> None:
    edges = graph()
    circles: list[list[str]] = []

    def visit(name: str, path: list[str]) -> None:
        for target in sorted(edges.get(name, ())):
            if target in path:
                circles.append([*path[path.index(target) :], target])
            elif target in edges:
                visit(target, [*path, target])

    for name in sorted(edges):
        visit(name, [name])
    assert circles == []


def test_tracing_depends_only_on_config_and_the_exchange_record() -> None:
    assert imports_of(PACKAGE / "tracing.py") == {"config", "exchange"}
    assert imports_of(PACKAGE / "exchange.py") == set()
