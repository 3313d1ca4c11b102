"""docs/RULES.md leads from each rule to one short function: every `path` `name` pair of its tables resolves to a
function (or class) of at most `LONGEST` lines, and every rule row above the unsupported ones names one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "docs" / "RULES.md"
LONGEST = 80
"""The project's bound on a function's length (docstring included)."""
UNSUPPORTED = "## What pooltree reports as unsupported"


def _defined(path: Path) -> dict[str, ast.AST]:
    """``name`` and ``Class.name`` of every function and class defined in the module → its node."""
    names: dict[str, ast.AST] = {}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    names[f"{node.name}.{member.name}"] = member
    return names


def _function_cell(line: str) -> str:
    return line.rstrip("|").rsplit("|", 1)[-1]


def cited_functions(text: str) -> list[tuple[str, str]]:
    """(path, name) pairs of the tables' Function cells: `path` followed by one or more `name`s."""
    pairs = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cell = _function_cell(line)
        for group in cell.split(";"):
            found = re.findall(r"`([^`]+)`", group)
            if found and found[0].endswith(".py"):
                pairs.extend((found[0], name) for name in found[1:])
    return pairs


def test_every_function_named_in_rules_exists() -> None:
    pairs = cited_functions(RULES.read_text(encoding="utf-8"))
    assert len(pairs) > 80
    missing = [
        f"{path} {name}"
        for path, name in pairs
        if not (ROOT / path).is_file() or name not in _defined(ROOT / path)
    ]
    assert not missing, "docs/RULES.md names functions that do not exist: " + ", ".join(missing)


def test_every_function_named_in_rules_is_short() -> None:
    long = []
    for path, name in set(cited_functions(RULES.read_text(encoding="utf-8"))):
        node = _defined(ROOT / path)[name]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if lines > LONGEST:
                long.append(f"{path} {name} ({lines} lines)")
    assert not long, f"docs/RULES.md leads to functions over {LONGEST} lines: " + ", ".join(sorted(long))


def test_every_rule_names_a_function() -> None:
    rules = RULES.read_text(encoding="utf-8").split(UNSUPPORTED)[0]
    rows = [
        line
        for line in rules.splitlines()
        if line.startswith("|") and not line.startswith(("|---", "| Rule |"))
    ]
    assert len(rows) > 80
    bare = [row for row in rows if not cited_functions(row)]
    assert not bare, "rules of docs/RULES.md without a function: " + "; ".join(bare)
