"""Left continuity at jumps of the fair-share functions, as YTsaurus's vector HDRF computes it.

YTsaurus builds MFFBS_r by transposing FSBFF_r, narrowing it to [guarantee_r, limit_r] and extending it to
s = 1 with its right limit at limit_r. When FSBFF_r jumps exactly onto limit_r and rises above it right
after, that right limit is the jump's own fit factor, so FSBS keeps the jump's left value up to s = 1.
"""

from __future__ import annotations

import numpy as np
import pytest

from pooltree.fairshare import Operation, Pool, UpdateSettings, update_fair_share
from pooltree.fairshare import functions as fn
from pooltree.resources import vector

GB = 1024.0**3


@pytest.fixture(params=["compiled", "numpy"])
def kernels(request: pytest.FixtureRequest):
    with fn.use_compiled_kernels(request.param == "compiled"):
        yield request.param


def test_non_continuous_fair_share_function_is_left_continuous(kernels: str) -> None:
    """YTsaurus TFairShareUpdateTest.TestNonContinuousFairShareFunctionIsLeftContinuous, restated."""
    total = vector(user_slots=100_000, cpu=100, memory=100 * GB, network=100)
    # Demand proportion <1, 1, 4>, weight 10, few jobs; and <1, 1, 0>, weight 1, many jobs; both in PoolA.
    x = Operation("x", weight=10.0, demand=vector(user_slots=10, cpu=10, memory=10 * GB, network=40))
    y = Operation("y", demand=vector(user_slots=1000, cpu=1000, memory=1000 * GB, network=0))
    pool_a = Pool("PoolA", children=[x, y])
    fake_root = Pool(
        "FakeRoot",
        children=[pool_a, Pool("PoolB")],
        specified_resource_limits=np.array([np.inf, 40.0, np.inf, np.inf, np.inf]),
    )
    r = update_fair_share(Pool("<Root>", children=[fake_root]), total, UpdateSettings(), 0.0)
    # 0.4 is a discontinuity point of the root's FSBS: the pool gets the left limit there (0.14 cpu), even
    # though the 40-cpu limit would allow the right one (0.4 cpu).
    left = [0.00014, 0.14, 0.0, 0.14, 0.4]
    for name in ("<Root>", "FakeRoot", "PoolA"):
        np.testing.assert_allclose(r.elements[name].fair_share, left, atol=1e-7, err_msg=name)
    np.testing.assert_allclose(r.elements["PoolB"].fair_share, 0.0, atol=1e-7)
    np.testing.assert_allclose(r.elements["x"].fair_share, [0.0001, 0.1, 0.0, 0.1, 0.4], atol=1e-7)
    np.testing.assert_allclose(r.elements["y"].fair_share, [0.00004, 0.04, 0.0, 0.04, 0.0], atol=1e-7)


def _fsbs_at_one(points: list[tuple[float, list[float]]], limit: list[float]) -> np.ndarray:
    x = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points], dtype=float)
    batch = fn.FunctionBatch(np.array([0, len(points)], dtype=np.int64), x, y)
    out = fn.fair_share_by_suggestion(batch, np.zeros((1, 5)), np.array([limit], dtype=float))
    values, _ = fn.evaluate(out, np.array([0]), np.array([1.0]))
    return values[0]


def test_a_jump_onto_a_limit_that_is_crossed_right_after_is_not_taken(kernels: str) -> None:
    # cpu jumps from 0.2 onto its limit 0.5 at f = 0.5 and keeps rising: MFFBS stays at 0.5.
    points = [
        (0.0, [0, 0, 0, 0, 0]),
        (0.5, [0, 0.2, 0, 0.3, 0]),
        (0.5, [0, 0.5, 0, 0.3, 0]),
        (1.0, [0, 1, 0, 0.4, 0]),
    ]
    np.testing.assert_allclose(_fsbs_at_one(points, [1, 0.5, 1, 1, 1]), [0, 0.2, 0, 0.3, 0])
    # Landing below the limit (and crossing it later), the jump is taken and the curve cut at the limit.
    np.testing.assert_allclose(_fsbs_at_one(points, [1, 0.75, 1, 1, 1]), [0, 0.75, 0, 0.35, 0])


def test_a_jump_onto_a_limit_that_stays_there_is_taken(kernels: str) -> None:
    # cpu jumps onto 0.5 and stays there while memory rises: the transposed cpu component is vertical at
    # s = 0.5, so MFFBS passes the jump and FSBS takes its right value and then the memory rise.
    points = [
        (0.0, [0, 0, 0, 0, 0]),
        (0.5, [0, 0.2, 0, 0.3, 0]),
        (0.5, [0, 0.5, 0, 0.3, 0]),
        (1.0, [0, 0.5, 0, 0.4, 0]),
    ]
    np.testing.assert_allclose(_fsbs_at_one(points, [1, 0.5, 1, 1, 1]), [0, 0.5, 0, 0.4, 0])
