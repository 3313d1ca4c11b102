"""The improved fair-share-by-fit-factor computation: YTsaurus's unit tests restated (gang operations)."""

from __future__ import annotations

import numpy as np
import pytest

from pooltree.fairshare import Operation, Pool, UpdateSettings, update_fair_share
from pooltree.fairshare import functions as fn
from pooltree.resources import vector

MB = 1024.0**2
TOTAL = vector(user_slots=100, cpu=100, memory=1000 * MB)  # CreateTotalResourceLimitsWith100CPU
UNIT = np.array([1.0, 1.0, 0.0, 1.0, 0.0])


@pytest.fixture(params=["compiled", "numpy"])
def kernels(request: pytest.FixtureRequest):
    with fn.use_compiled_kernels(request.param == "compiled"):
        yield request.param


def settings(*, improved: bool, gap: bool = False) -> UpdateSettings:
    return UpdateSettings(
        enable_step_function_for_gang_operations=True,
        enable_improved_fair_share_by_fit_factor_computation=improved,
        enable_improved_fair_share_by_fit_factor_computation_distribution_gap=gap,
    )


def gang(name: str, demand: np.ndarray, start: float = 0.0) -> Operation:
    return Operation(name, demand=demand, usage=np.zeros(5), is_gang=True, start_time=start)


def test_gang_operations_with_improved_fair_share_by_fit_factor_computation(kernels: str) -> None:
    """YTsaurus TestGangOperations (step function only) and TestGangOperationsWith...Computation."""
    demand = vector(user_slots=60, cpu=60, memory=600 * MB)

    def run(improved: bool):
        root = Pool(
            "<Root>",
            children=[
                Pool("PoolA", children=[gang("x", demand)]),
                Pool("PoolB", children=[gang("y", demand)]),
            ],
        )
        return update_fair_share(root, TOTAL, settings(improved=improved), 0.0).elements

    plain = run(improved=False)  # both gangs jump at the same fit factor: neither fits, both get nothing
    for name in ("<Root>", "PoolA", "PoolB"):
        np.testing.assert_allclose(plain[name].fair_share, 0.0, atol=1e-9)
    improved = run(improved=True)  # the jumps become steps: the first pool's gang fits
    np.testing.assert_allclose(improved["<Root>"].fair_share, [0.6, 0.6, 0, 0.6, 0], atol=1e-9)
    np.testing.assert_allclose(improved["PoolA"].fair_share, [0.6, 0.6, 0, 0.6, 0], atol=1e-9)
    np.testing.assert_allclose(improved["x"].fair_share, [0.6, 0.6, 0, 0.6, 0], atol=1e-9)
    np.testing.assert_allclose(improved["PoolB"].fair_share, 0.0, atol=1e-9)


def test_gang_operations_with_skewed_resources(kernels: str) -> None:
    """YTsaurus TestGangOperationsWithSkewedResources (its second operation's demand stays zero, as there)."""
    x = gang("x", vector(user_slots=50, cpu=60, memory=100 * MB))
    y = gang("y", np.zeros(5))
    root = Pool("<Root>", children=[Pool("PoolA", children=[x]), Pool("PoolB", children=[y])])
    r = update_fair_share(root, TOTAL, settings(improved=True), 0.0).elements
    np.testing.assert_allclose(r["<Root>"].fair_share, [0.5, 0.6, 0, 0.1, 0], atol=1e-9)
    np.testing.assert_allclose(r["PoolA"].fair_share, [0.5, 0.6, 0, 0.1, 0], atol=1e-9)
    np.testing.assert_allclose(r["PoolB"].fair_share, 0.0, atol=1e-9)


def test_multiple_gang_operations(kernels: str) -> None:
    """YTsaurus TestMultipleGangOperations: two FIFO pools of two 0.3 gangs each."""
    demand = vector(user_slots=30, cpu=30, memory=300 * MB)
    pool_a = Pool("PoolA", mode="fifo", children=[gang("a1", demand, 0.0), gang("a2", demand, 1.0)])
    pool_b = Pool("PoolB", mode="fifo", children=[gang("b1", demand, 2.0), gang("b2", demand, 3.0)])
    r = update_fair_share(
        Pool("<Root>", children=[pool_a, pool_b]), TOTAL, settings(improved=True), 0.0
    ).elements
    np.testing.assert_allclose(r["<Root>"].fair_share, UNIT * 0.9, atol=1e-9)
    np.testing.assert_allclose(r["PoolA"].fair_share, UNIT * 0.6, atol=1e-9)
    np.testing.assert_allclose(r["PoolB"].fair_share, UNIT * 0.3, atol=1e-9)
    for name, share in (("a1", 0.3), ("a2", 0.3), ("b1", 0.3), ("b2", 0.0)):
        np.testing.assert_allclose(r[name].fair_share, UNIT * share, atol=1e-9, err_msg=name)


def test_improved_mode_keeps_results_without_simultaneous_jumps(kernels: str) -> None:
    """YTsaurus runs its parametrized tests in both modes with the same expectations: TestComplexCase."""
    x = Operation("x", demand=vector(user_slots=10, cpu=10, memory=200 * MB), usage=np.zeros(5))
    y = Operation("y", demand=vector(user_slots=1000, cpu=3000, memory=10000 * MB), usage=np.zeros(5))
    z = Operation("z", demand=vector(user_slots=2000, cpu=2000, memory=100000 * MB), usage=np.zeros(5))
    root = Pool("<Root>", children=[Pool("PoolA", children=[x, y]), Pool("PoolB", children=[z])])
    for improved in (False, True):
        r = update_fair_share(root, TOTAL, settings(improved=improved), 0.0).elements
        np.testing.assert_allclose(r["PoolA"].fair_share, np.array([11, 25, 0, 15, 0]) / 40, atol=1e-7)
        np.testing.assert_allclose(r["y"].fair_share, np.array([7, 21, 0, 7, 0]) / 40, atol=1e-7)
        np.testing.assert_allclose(r["z"].fair_share, np.array([5, 5, 0, 25, 0]) / 40, atol=1e-7)


def test_the_distribution_gap_variant_gives_the_same_shares_on_these_cases() -> None:
    # A pool's target is always a step of its own function here, so the greedy gap distribution only differs
    # from taking the steps in order when a target falls between steps (it cannot in these trees).
    demand = vector(user_slots=30, cpu=30, memory=300 * MB)

    def run(gap: bool):
        pool_a = Pool("PoolA", mode="fifo", children=[gang("a1", demand, 0.0), gang("a2", demand, 1.0)])
        pool_b = Pool("PoolB", mode="fifo", children=[gang("b1", demand, 2.0), gang("b2", demand, 3.0)])
        root = Pool("<Root>", children=[pool_a, pool_b])
        return update_fair_share(root, TOTAL, settings(improved=True, gap=gap), 0.0).elements

    with_gap, without = run(True), run(False)
    for name in ("PoolA", "PoolB", "a1", "a2", "b1", "b2"):
        np.testing.assert_allclose(with_gap[name].fair_share, without[name].fair_share, atol=1e-12)
