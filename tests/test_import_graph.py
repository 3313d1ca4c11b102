"""The modules of ``pooltree`` import one another without a circle (ARCHITECTURE.md: layers, no import circles).

The graph is read from the source with ``ast``, so an import moved inside a function to dodge a circle still
counts: every ``import`` and ``from ... import`` anywhere in a module (except under ``if TYPE_CHECKING:``) is an
edge. Importing ``a.b.c`` also runs the ``__init__`` of ``a.b`` (a package that re-exports its modules), so that
edge is counted too, except toward the importing module's own packages (already being imported).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pooltree

ROOT = Path(pooltree.__file__).resolve().parent


def package_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package by dotted name (``.c`` sources name compiled extension modules)."""
    modules: dict[str, Path] = {}
    for path in sorted([*root.rglob("*.py"), *root.rglob("*.c")]):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` lands in: itself, or the package that defines the imported attribute."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imported_names(node: ast.Import | ast.ImportFrom, package: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    yield from (f"{base}.{alias.name}" for alias in node.names)  # the module itself, or ``base`` for a name


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in _imports_of(child))
            continue
        yield from _imports_of(node)


def _imports_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    else:
        yield from _imports(node)


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """``{module: modules it imports}`` over the whole package, function-level imports included."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        if path.suffix != ".py":
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            for imported in _imported_names(node, package):
                target = _resolve(imported, modules)
                if target is None or target == name:
                    continue
                graph[name].add(target)
                parts = target.split(".")
                for end in range(1, len(parts)):
                    ancestor = ".".join(parts[:end])
                    if ancestor in modules and not f"{name}.".startswith(f"{ancestor}."):
                        graph[name].add(ancestor)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_import_circle_in_pooltree() -> None:
    graph = import_graph(package_modules())
    circles = import_circles(graph)
    described = [
        "; ".join(f"{module} -> {', '.join(sorted(graph[module] & set(circle)))}" for module in circle)
        for circle in circles
    ]
    assert not circles, "import circles:\n" + "\n".join(described)


def test_the_graph_sees_a_circle_dodged_inside_a_function(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import g\n\ndef f():\n    return g()\n")
    (package / "b.py").write_text("def g():\n    from pkg.a import f\n    return f\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import f\n"
    )
    graph = import_graph(package_modules(package))
    assert graph["pkg.c"] == set()
    assert import_circles(graph) == [["pkg.a", "pkg.b"]]


def test_the_graph_counts_the_init_of_another_package(tmp_path: Path) -> None:
    for name, text in {
        "pkg/__init__.py": "",
        "pkg/web/__init__.py": "from pkg.web.app import serve\n",
        "pkg/web/app.py": "from pkg.auth.guard import check\nserve = check\n",
        "pkg/web/paths.py": "",
        "pkg/auth/__init__.py": "",
        "pkg/auth/guard.py": "from pkg.web import paths\ncheck = paths\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    circles = import_circles(import_graph(package_modules(tmp_path / "pkg")))
    assert circles == [["pkg.auth.guard", "pkg.web", "pkg.web.app"]]
