"""No module of the ortops package imports, directly or through others, a module that imports it.

Imports inside functions count: a circle hidden behind a late import still ties the modules
together (and "avoids an import cycle" comments marked one in ortops.torch). Imports under
``if TYPE_CHECKING:`` do not run and do not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "ortops"


def _module_name(root: Path, path: Path) -> str:
    parts = (root.name, *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except those under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of the package at ``root`` it imports. ``from package import name``
    is an import of the submodule when ``name`` is one, else of the package (its ``__init__``)."""
    files = {_module_name(root, p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names if alias.name in files}
                continue
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1 more
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                edges.add(target if target in files else base)
        graph[module] = {m for m in edges if m in files and m != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One import path per circle, e.g. [a, b, a] (one per strongly connected group of modules)."""
    found, done = [], set()
    for start in sorted(graph):
        if start in done:
            continue
        # Depth-first from start; a path back to start is a circle through it.
        stack = [(start, [start])]
        seen = {start}
        while stack:
            module, path = stack.pop()
            for target in sorted(graph[module]):
                if target == start:
                    found.append([*path, start])
                    done.update(path)
                    stack.clear()
                    break
                if target not in seen:
                    seen.add(target)
                    stack.append((target, [*path, target]))
    return found


def test_the_analysis_sees_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_holds_late_imports_and_leaves_out_type_checking_ones(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("from pkg.a import f\n")
    (root / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import b\n"
        "def f():\n    from pkg import g  # late\n    from .sub import c\n"
    )
    (root / "b.py").write_text("import pkg.a\n")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "c.py").write_text("from .. import b\n")
    graph = import_graph(root)
    assert graph == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg", "pkg.sub.c"},
        "pkg.b": {"pkg.a"},
        "pkg.sub": set(),
        "pkg.sub.c": {"pkg.b"},
    }
    assert circles(graph) == [["pkg", "pkg.a", "pkg"], ["pkg.b", "pkg.a", "pkg.sub.c", "pkg.b"]]


@pytest.mark.parametrize("package", ["ortops.torch"])
def test_no_import_circle(package: str) -> None:
    graph = import_graph()
    inside = [c for c in circles(graph) if any(m == package or m.startswith(f"{package}.") for m in c)]
    assert not inside, "import circles: " + "; ".join(" -> ".join(c) for c in inside)
