"""No import circles inside the SQLite backend (including imports deferred into functions)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hermes_state"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(root: Path) -> dict[str, set[str]]:
    """Module -> the modules under ``root`` it imports, anywhere in its body."""
    files = {_module_name(path): path for path in root.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                for candidate in (f"{target}.{alias.name}", target):
                    if candidate in files and candidate != name:
                        graph[name].add(candidate)
                        break
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph``, as the path around it, or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        for target in sorted(graph[node]):
            found = visit(target, path + [node])
            if found:
                return found
        done.add(node)
        return None

    for start in sorted(graph):
        found = visit(start, [])
        if found:
            return found
    return None


def test_the_sqlite_backend_has_no_import_circle() -> None:
    graph = _imports(PACKAGE / "sqlite")
    assert "hermes_state.sqlite.schema" in graph and graph["hermes_state.sqlite.schema"]
    assert _circle(graph) is None, " -> ".join(_circle(graph) or [])


def test_the_circle_finder_finds_one() -> None:
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) is None
