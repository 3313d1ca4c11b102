"""docs/RULES.md names only functions that exist: every `path` `name` pair of its tables resolves."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "docs" / "RULES.md"


def _defined_names(path: Path) -> set[str]:
    """``name`` and ``Class.name`` of every function and class defined in the module."""
    names: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}.{member.name}")
    return names


def cited_functions(text: str) -> list[tuple[str, str]]:
    """(path, name) pairs of the tables' Function cells: `path` followed by one or more `name`s."""
    pairs = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cell = line.rstrip("|").rsplit("|", 1)[-1]
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
        if not (ROOT / path).is_file() or name not in _defined_names(ROOT / path)
    ]
    assert not missing, "docs/RULES.md names functions that do not exist: " + ", ".join(missing)
