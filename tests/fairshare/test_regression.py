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


# Exact comparisons of usage with fair share (§e.2: "u_r > FS_r"), so a difference of one rounding step in
# the fair share may flip them where usage equals fair share; every other field is compared to 1e-9.
AT_USAGE_BOUNDARY = ("satisfaction_ratio", "local_satisfaction_ratio", "scheduling_status")


def _without_boundary_fields(results: list[Any]) -> list[Any]:
    for result in results:
        for fields in result["elements"].values():
            for name in AT_USAGE_BOUNDARY:
                fields.pop(name)
    return results


@pytest.mark.parametrize("seed", range(100, 120))
def test_compiled_and_numpy_updates_agree_on_random_trees(seed: int) -> None:
    """Beyond the recorded cases: whole updates on 20 more random trees give the same results both ways.

    Fixed seeds, not hypothesis: in about 1 random tree in 600 two children's jumps land within one
    rounding step of each other, and the numpy reference (its sums accumulate over a whole level, so they
    carry ~1e-16 more noise) orders them differently from the compiled pass, which changes a pool's fair
    share there (seed 578 of ``random_case``). The compiled order is the exact one in that case.
    """
    runs = []
    for compiled in (True, False):
        with fn.use_compiled_kernels(compiled):
            runs.append(json.loads(json.dumps([snapshot(r) for r in run_case(seed, random_only=True)])))
    _compare(_without_boundary_fields(runs[0]), _without_boundary_fields(runs[1]), f"seed {seed}")
