"""Operation functions and pool sums: closed form vs generic construction, sums vs pointwise sums."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.fairshare import functions as fn


def _random_operations(seed: int, n: int) -> tuple[np.ndarray, ...]:
    """Usage/demand shares with ties and zeros, some limits below demand or usage, gang and guaranteed ops."""
    rng = np.random.default_rng(seed)
    per_job = rng.choice([0.0, 0.001, 0.002, 0.004], size=(n, 5))
    jobs = rng.integers(0, 50, n)[:, None]
    running = (rng.random((n, 1)) * (jobs + 1)).astype(int)
    usage = per_job * running
    demand = per_job * jobs
    limits = np.where(rng.random((n, 5)) < 0.2, rng.random((n, 5)) * 0.1, 1.0)
    at_usage = rng.random(n) < 0.05
    limits[at_usage] = np.maximum(usage[at_usage], demand[at_usage] * 0.5)
    step = rng.random(n) < 0.05
    guarantee = np.zeros((n, 5))
    guarantee[rng.random(n) < 0.03] = 0.01
    return usage, demand, step, guarantee, limits


def _random_parents(
    rng: np.random.Generator, n: int, parents: int, *, contiguous: bool
) -> tuple[np.ndarray, ...]:
    """Parent slot, scale, shift of n children and the parents' right bounds (every third parent is FIFO)."""
    slot = rng.integers(0, parents, n)
    if contiguous:
        slot = np.sort(slot)
    fifo = np.arange(parents) % 3 == 2
    scale = np.where(fifo[slot], 1.0, rng.choice([1.0, 0.5, 0.2, np.inf], n))
    rank = np.zeros(n)
    for p in np.flatnonzero(fifo):
        members = np.flatnonzero(slot == p)
        rank[members] = np.arange(len(members))
    shift = np.where(fifo[slot], rank, 0.0)
    right = np.where(fifo, np.maximum(np.bincount(slot, minlength=parents), 1).astype(float), 1.0)
    return slot, scale, shift, right


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 300))
def test_closed_form_matches_generic(seed: int, n: int) -> None:
    """The numpy closed form gives the generic construction's points bit for bit, numpy or compiled."""
    usage, demand, step, guarantee, limits = _random_operations(seed, n)
    with fn.use_compiled_kernels(False):
        closed = fn.operation_fair_share_by_suggestion(usage, demand, step, guarantee, limits)
        generic_numpy = fn.fair_share_by_suggestion(
            fn.operation_fair_share_by_fit_factor(usage, demand, step),
            guarantee,
            limits,
            merge_collinear=False,
        )
    generic_compiled = fn.operation_fair_share_by_suggestion(usage, demand, step, guarantee, limits)
    for generic in (generic_numpy, generic_compiled):
        assert np.array_equal(closed.offsets, generic.offsets)
        assert np.array_equal(closed.x, generic.x)
        assert np.array_equal(closed.y, generic.y)
        assert np.array_equal(closed.f, generic.f)


def test_limit_exactly_at_usage_and_equal_usage_demand() -> None:
    """Edge rows: the limit equals usage (cut at t = 0), demand equals usage, and a tie of top resources."""
    usage = np.array([[0.1, 0.2, 0.0, 0.2, 0.0], [0.1, 0.1, 0.0, 0.0, 0.0], [0.3, 0.3, 0.3, 0.3, 0.3]])
    demand = np.array([[0.2, 0.4, 0.0, 0.3, 0.0], [0.1, 0.1, 0.0, 0.0, 0.0], [0.5, 0.4, 0.6, 0.3, 0.3]])
    limits = np.array([[1.0, 0.2, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0, 1.0], [0.45, 1.0, 1.0, 1.0, 1.0]])
    step = np.zeros(3, dtype=bool)
    guarantee = np.zeros((3, 5))
    with fn.use_compiled_kernels(False):
        closed = fn.operation_fair_share_by_suggestion(usage, demand, step, guarantee, limits)
    generic = fn.fair_share_by_suggestion(
        fn.operation_fair_share_by_fit_factor(usage, demand, step), guarantee, limits, merge_collinear=False
    )
    assert np.array_equal(closed.offsets, generic.offsets)
    assert np.array_equal(closed.x, generic.x) and np.array_equal(closed.y, generic.y)
    # First row: cut where cpu reaches 0.2, i.e. at usage: FSBS(1) is the usage.
    values, fits = fn.evaluate(closed, np.array([0, 1, 2]), np.ones(3))
    assert np.allclose(values[0], usage[0])
    assert np.allclose(values[1], usage[1]) and fits is not None and fits[1] == 2.0
    # Third row: user_slots limit 0.45 cuts the growth at t = 0.75.
    assert np.allclose(values[2], usage[2] + 0.75 * (demand[2] - usage[2]))


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 120), st.integers(1, 8))
def test_pool_sum_equals_pointwise_sum_of_children(seed: int, n: int, parents: int) -> None:
    """FSBFF of pools (sum_functions) at random fit factors equals the sum of the children's FSBS there."""
    usage, demand, step, guarantee, limits = _random_operations(seed, n)
    children = fn.operation_fair_share_by_suggestion(usage, demand, step, guarantee, limits)
    rng = np.random.default_rng(seed + 1)
    slot, scale, shift, right = _random_parents(rng, n, parents, contiguous=True)
    pools = fn.sum_functions(children, slot, scale, shift, right)
    for p in range(parents):
        members = np.flatnonzero(slot == p)
        for f in rng.random(5) * right[p]:
            with np.errstate(invalid="ignore"):
                s = np.where(
                    np.isfinite(scale[members]), np.clip((f - shift[members]) / scale[members], 0, 1), 0
                )
            values, _ = fn.evaluate(children, members, s)
            got, _ = fn.evaluate(pools, np.array([p]), np.array([f]))
            assert np.allclose(got[0], values.sum(axis=0), atol=1e-9), (p, f)
