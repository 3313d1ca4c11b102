"""Regression: the update reproduces the recorded results on 30 random trees (golden/*.json.gz).

The golden files were written by the element-by-element implementation before the structure-of-arrays
rewrite; ``POOLTREE_WRITE_GOLDEN=1`` rewrites them (only do that for a deliberate semantic change). Every
case runs twice: with the compiled function passes and with the numpy reference.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest
from fairshare_random_trees import CASES, run_case, snapshot

from pooltree.fairshare import functions as fn

GOLDEN = Path(__file__).parent / "golden"
TOLERANCE = 1e-9


def _compare(actual: Any, expected: Any, where: str) -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected), where
        for key in expected:
            _compare(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), where
        for k, (a, e) in enumerate(zip(actual, expected, strict=True)):
            _compare(a, e, f"{where}[{k}]")
    elif isinstance(expected, float) and not isinstance(expected, bool):
        assert isinstance(actual, int | float), where
        assert abs(actual - expected) <= TOLERANCE * max(1.0, abs(expected)), (
            f"{where}: {actual} != {expected}"
        )
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


@pytest.mark.parametrize("kernels", ["compiled", "numpy"])
@pytest.mark.parametrize("seed", range(CASES))
def test_matches_recorded_results(seed: int, kernels: str) -> None:
    path = GOLDEN / f"case_{seed:02d}.json.gz"
    with fn.use_compiled_kernels(kernels == "compiled"):
        actual = json.loads(json.dumps([snapshot(r) for r in run_case(seed)]))
    if os.environ.get("POOLTREE_WRITE_GOLDEN") == "1" and kernels == "numpy":
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(gzip.compress(json.dumps(actual, sort_keys=True).encode(), mtime=0))
    expected = json.loads(gzip.decompress(path.read_bytes()))
    _compare(actual, expected, f"case {seed}")
