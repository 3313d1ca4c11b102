"""What tests/reads' real-process tests share: the processes of one test (``live_procs.Procs``), stopped at its end."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "live"))
from live_procs import Procs


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    made = Procs(tmp_path)
    try:
        yield made
    finally:
        made.close()
