"""Test files have unique names across ``tests/``: pytest imports them by basename (prepend mode, no packages),
so two ``test_x.py`` in different folders stop the whole run at collection ("import file mismatch"), as two did
in this session's last CI run."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_two_test_files_share_a_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if "__pycache__" not in path.parts:
            where[path.name].append(str(path.relative_to(TESTS)))
    shared = {
        name: sorted(paths) for name, paths in where.items() if len(paths) > 1 and name != "conftest.py"
    }
    assert shared == {}
