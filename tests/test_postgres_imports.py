"""The PostgreSQL backend's modules import one another without a circle, deferred imports included."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import hermes_state.postgres

PACKAGE = Path(hermes_state.postgres.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(p for p in parts if p != "__init__")


def _imports(path: Path, known: set[str]) -> set[str]:
    """The package's own modules that *path* imports, at module level or inside a function."""
    own = _module_name(path).split(".") if _module_name(path) else []
    base = own if path.name == "__init__.py" else own[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or not node.level or node.level - 1 > len(base):
            continue  # absolute imports (unused inside the package) or one of hermes_state's own
        anchor = base[: len(base) - (node.level - 1)]
        target = ".".join([*anchor, *([node.module] if node.module else [])])
        for alias in node.names:
            sub = f"{target}.{alias.name}".lstrip(".")
            found.add(sub if sub in known else target)
    return (found & known) - {_module_name(path)}


def test_the_postgres_package_has_no_import_circle() -> None:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: _imports(path, set(files)) for name, path in files.items()}
    assert graph["migration"] >= {"layout", "schema"}  # the walk sees the edges that matter
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the circle
