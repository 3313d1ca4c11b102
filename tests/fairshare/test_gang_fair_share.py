"""Gang operations in the fair-share update: FIFO truncation of unsatisfied gangs (YTsaurus unit test restated)."""

from __future__ import annotations

import numpy as np
import pytest

from pooltree.fairshare import Operation, Pool, UpdateSettings, update_fair_share
from pooltree.fairshare import functions as fn
from pooltree.resources import vector

MB = 1024.0**2
TOTAL = vector(user_slots=100, cpu=100, memory=1000 * MB)  # CreateTotalResourceLimitsWith100CPU


@pytest.fixture(params=["compiled", "numpy"])
def kernels(request: pytest.FixtureRequest):
    with fn.use_compiled_kernels(request.param == "compiled"):
        yield request.param


def _demand() -> np.ndarray:
    return vector(user_slots=30, cpu=30, memory=300 * MB)


def test_truncate_unsatisfied_child_fair_share_in_fifo_pools(kernels: str) -> None:
    """YTsaurus TFairShareUpdateTest.TestTruncateUnsatisfiedChildFairShareInFifoPools, restated."""
    a_first = Operation("aFirst", demand=_demand(), usage=np.zeros(5), start_time=0.0)
    a_second = Operation("aSecond", demand=_demand(), usage=np.zeros(5), start_time=1.0, is_gang=True)
    b_first = Operation("bFirst", demand=_demand(), usage=np.zeros(5), start_time=2.0)
    b_second = Operation("bSecond", demand=_demand(), usage=np.zeros(5), start_time=3.0)
    pool_a = Pool(
        "poolA", mode="fifo", children=[a_first, a_second], enable_fair_share_truncation_in_fifo_pool=True
    )
    pool_b = Pool(
        "poolB", mode="fifo", children=[b_first, b_second], enable_fair_share_truncation_in_fifo_pool=True
    )
    r = update_fair_share(Pool("<Root>", children=[pool_a, pool_b]), TOTAL, UpdateSettings(), 0.0)
    unit = np.array([1.0, 1.0, 0.0, 1.0, 0.0])
    for name in ("aFirst", "aSecond", "bFirst", "bSecond"):
        np.testing.assert_allclose(r.elements[name].demand_share, unit * 0.3, atol=1e-9)
    np.testing.assert_allclose(r.elements["aFirst"].fair_share, unit * 0.3, atol=1e-9)
    np.testing.assert_allclose(r.elements["aSecond"].fair_share, unit * 0.0, atol=1e-9)  # a gang, truncated
    np.testing.assert_allclose(r.elements["bFirst"].fair_share, unit * 0.3, atol=1e-9)
    np.testing.assert_allclose(r.elements["bSecond"].fair_share, unit * 0.2, atol=1e-9)  # not a gang: kept
    np.testing.assert_allclose(r.elements["poolA"].fair_share, unit * 0.3, atol=1e-9)
    np.testing.assert_allclose(r.elements["poolB"].fair_share, unit * 0.5, atol=1e-9)
    np.testing.assert_allclose(r.elements["<Root>"].fair_share, unit * 0.8, atol=1e-9)
    # The truncated share is weight-proportional share that is gone: the detailed parts still add up.
    detailed = r.elements["poolA"].detailed_fair_share
    np.testing.assert_allclose(
        detailed.strong_guarantee + detailed.integral_guarantee + detailed.weight_proportional, unit * 0.3
    )


def test_without_truncation_the_unsatisfied_gang_keeps_its_share(kernels: str) -> None:
    a_first = Operation("aFirst", demand=_demand(), usage=np.zeros(5), start_time=0.0)
    a_second = Operation("aSecond", demand=_demand(), usage=np.zeros(5), start_time=1.0, is_gang=True)
    pool_a = Pool("poolA", mode="fifo", children=[a_first, a_second])
    other = Pool("poolB", mode="fifo", children=[Operation("b", demand=_demand() * 2, usage=np.zeros(5))])
    r = update_fair_share(Pool("<Root>", children=[pool_a, other]), TOTAL, UpdateSettings(), 0.0)
    assert r.elements["aSecond"].fair_share[1] == pytest.approx(0.2)


def test_gang_operations_step_function(kernels: str) -> None:
    """YTsaurus TFairShareUpdateTest.TestGangOperations, restated (step function, no improved computation)."""

    def run(y_demand: np.ndarray, total: np.ndarray, step: bool):
        x = Operation(
            "x", demand=vector(user_slots=60, cpu=60, memory=600 * MB), usage=np.zeros(5), is_gang=True
        )
        y = Operation("y", demand=y_demand, usage=np.zeros(5), is_gang=True)
        root = Pool("<Root>", children=[Pool("PoolA", children=[x]), Pool("PoolB", children=[y])])
        settings = UpdateSettings(enable_step_function_for_gang_operations=step)
        return update_fair_share(root, total, settings, 0.0).elements

    unit = np.array([1.0, 1.0, 0.0, 1.0, 0.0])
    big = vector(user_slots=60, cpu=60, memory=600 * MB)
    r = run(big, TOTAL, step=False)  # without the step, gangs are ordinary operations: half each
    np.testing.assert_allclose(r["<Root>"].fair_share, unit, atol=1e-9)
    np.testing.assert_allclose(r["PoolA"].fair_share, unit * 0.5, atol=1e-9)
    r = run(big, TOTAL, step=True)  # both jump at the same point and do not fit together: nothing
    np.testing.assert_allclose(r["<Root>"].fair_share, 0.0, atol=1e-9)
    r = run(big, TOTAL * 2.0, step=True)  # twice the cluster: both fit
    np.testing.assert_allclose(r["PoolA"].fair_share, unit * 0.3, atol=1e-9)
    np.testing.assert_allclose(r["PoolB"].fair_share, unit * 0.3, atol=1e-9)
    r = run(vector(user_slots=45, cpu=45, memory=450 * MB), TOTAL, step=True)  # the smaller gang jumps first
    np.testing.assert_allclose(r["<Root>"].fair_share, unit * 0.45, atol=1e-9)
    np.testing.assert_allclose(r["PoolA"].fair_share, 0.0, atol=1e-9)
    np.testing.assert_allclose(r["PoolB"].fair_share, unit * 0.45, atol=1e-9)
