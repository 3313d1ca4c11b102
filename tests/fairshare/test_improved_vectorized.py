"""The improved fit-factor computation's array passes against its point-by-point reference (issue 14).

The update builds improved FSBFF as the compiled plain sums with their jumps split into staircases
(``improved.staircase_sums``) and splits targets level by level for all pools at once
(``distribution._split_targets``). The reference here is the pool-by-pool construction it replaced
(``improved.improved_sum``: every child's left and right limits at every breakpoint; ``improved.split_target``:
one pool's bisection and jump walk): both must give the same fair shares on random trees (gangs, FIFO pools,
weights, limits, integral guarantees) and on YTsaurus's production GPU tree, with and without the distribution
gap.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from pooltree.fairshare import Operation, Pool, UpdateSettings, improved, update_fair_share
from pooltree.fairshare import building as building_module
from pooltree.fairshare import distribution as distribution_module
from pooltree.fairshare import functions as fn
from pooltree.fairshare import update as update_module
from pooltree.fairshare.elements_dump import load_elements_dump, unit_test_settings
from pooltree.resources import RESOURCE_COUNT, vector
from tests.fairshare.fairshare_random_trees import random_case

DATA = Path(__file__).parent / "data" / "gpu_tree_elements.yson.gz"


def _reference_sums(table, count, kids, slot, scale, shift, right):  # type: ignore[no-untyped-def]
    xs, ys = [], []
    for k in range(count):
        sel = np.flatnonzero(slot == k)
        children = []
        for c in kids[sel].tolist():
            batch = table.batches[int(table.batch_of[c])]
            row = int(table.row_of[c])
            lo, hi = int(batch.offsets[row]), int(batch.offsets[row + 1])
            children.append((batch.x[lo:hi], batch.y[lo:hi]))
        x, y = improved.improved_sum(children, scale[sel], shift[sel], float(right[k]))
        xs.append(x)
        ys.append(y)
    counts = np.array([len(x) for x in xs], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return fn.FunctionBatch(offsets, np.concatenate(xs), np.concatenate(ys).reshape(-1, RESOURCE_COUNT))


def _reference_distribute(tree, table, suggestions, gap):  # type: ignore[no-untyped-def]
    fs = np.zeros((len(tree.elements), RESOURCE_COUNT))
    root_value, _ = table.evaluate(np.array([0]), np.ones(1))
    stack = [(0, root_value[0])]
    while stack:
        p, target = stack.pop()
        fs[p] = target
        if tree.is_op[p] or tree.child_count[p] == 0:
            continue
        kids = np.arange(int(tree.child_start[p]), int(tree.child_start[p]) + int(tree.child_count[p]))
        parents = np.array([p])
        slot = np.zeros(len(kids), dtype=np.int64)

        def values(f: float, parents=parents, kids=kids, slot=slot) -> np.ndarray:  # type: ignore[no-untyped-def]
            return table.evaluate(
                kids, distribution_module.child_suggestions(suggestions, parents, kids, slot, np.array([f]))
            )[0]

        chosen = improved.split_target(
            values,
            target,
            float(len(kids)) if suggestions.fifo[p] else 1.0,
            update_module.EPSILON,
            distribution_gap=gap,
            inverse_lower_bound=update_module.floating_point_inverse_lower_bound,
        )
        stack.extend(zip(kids.tolist(), chosen, strict=True))
    return fs


@pytest.fixture
def reference(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def patch(*, sums: bool = True, distribute: bool = True) -> None:
        if sums:
            monkeypatch.setattr(building_module, "_improved_sums", _reference_sums)
        if distribute:
            monkeypatch.setattr(distribution_module, "distribute_improved", _reference_distribute)

    return patch


def _shares(root, total, settings) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    result = update_fair_share(root, total, settings, 100.0)
    return {name: result.elements[name].fair_share for name in result.elements}


def _improved(seed: int, gap: bool):  # type: ignore[no-untyped-def]
    root, total, settings = random_case(seed)
    return (
        root,
        total,
        dataclasses.replace(
            settings,
            enable_step_function_for_gang_operations=True,
            enable_improved_fair_share_by_fit_factor_computation=True,
            enable_improved_fair_share_by_fit_factor_computation_distribution_gap=gap,
        ),
    )


def _gang_tree(seed: int, gap: bool):  # type: ignore[no-untyped-def]
    """Pools of gangs with demands from a few sizes (so many jump at the same fit factor) and some
    continuous operations, with weights 1 or 2 and a few guarantees."""
    rng = np.random.default_rng(500 + seed)
    sizes = [
        vector(user_slots=1, cpu=c, gpu=g, memory=m) for c, g, m in ((8, 1, 20), (16, 2, 40), (4, 0, 60))
    ]

    def operation(name: str) -> Operation:
        if rng.random() < 0.7:
            return Operation(name, demand=sizes[int(rng.integers(3))] * int(rng.integers(1, 4)), is_gang=True)
        jobs = int(rng.integers(1, 30))
        per_job = sizes[int(rng.integers(3))]
        return Operation(name, demand=per_job * jobs, usage=per_job * int(rng.integers(0, jobs + 1)))

    def pool(name: str, depth: int) -> Pool:
        fifo = depth == 0 and rng.random() < 0.3
        out = Pool(name, weight=float(rng.choice([1.0, 1.0, 2.0])), mode="fifo" if fifo else "fair_share")
        if rng.random() < 0.3:
            out.strong_guarantee_resources = vector(cpu=float(rng.choice([8.0, 24.0])))
            out.specified_guarantee_resources = frozenset({"cpu"})
        for i in range(int(rng.integers(1, 6))):
            if depth == 0 or fifo or rng.random() < 0.5:
                out.children.append(operation(f"{name}.op{i}"))
            else:
                out.children.append(pool(f"{name}.{i}", depth - 1))
        return out

    root = Pool("<Root>", children=[pool(f"p{i}", 2) for i in range(int(rng.integers(2, 6)))])
    total = vector(user_slots=100, cpu=float(rng.choice([100.0, 160.0])), gpu=8, memory=1000)
    settings = UpdateSettings(
        enable_step_function_for_gang_operations=True,
        enable_improved_fair_share_by_fit_factor_computation=True,
        enable_improved_fair_share_by_fit_factor_computation_distribution_gap=gap,
    )
    return root, total, settings


CASES = [("random", seed) for seed in range(12)] + [("gangs", seed) for seed in range(12)]


def _case(kind: str, seed: int, gap: bool):  # type: ignore[no-untyped-def]
    return _improved(seed, gap) if kind == "random" else _gang_tree(seed, gap)


@pytest.mark.parametrize(("kind", "seed"), CASES)
def test_staircase_sums_are_the_point_by_point_sums(
    kind: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every pool's improved FSBFF, compared as a function: left and right limits at every breakpoint of
    either construction (the plain sum omits collinear points; rounding differs by ~1e-16)."""
    compared = []
    fast_sums = building_module._improved_sums

    def both(table, count, kids, slot, scale, shift, right):  # type: ignore[no-untyped-def]
        fast = fast_sums(table, count, kids, slot, scale, shift, right)
        slow = _reference_sums(table, count, kids, slot, scale, shift, right)
        for k in range(count):
            fx, fy, _ = fast.function(k)
            sx, sy, _ = slow.function(k)
            at = np.unique(np.concatenate([fx, sx]))
            for got, want in zip(improved._limits(fx, fy, at), improved._limits(sx, sy, at), strict=True):
                np.testing.assert_allclose(got, want, atol=1e-12)
            compared.append(len(at))
        return fast

    monkeypatch.setattr(building_module, "_improved_sums", both)
    update_fair_share(*_case(kind, seed, gap=False), 100.0)
    assert compared


@pytest.mark.parametrize(("kind", "seed"), CASES)
@pytest.mark.parametrize("gap", [False, True])
def test_level_split_is_the_pool_by_pool_split(kind: str, seed: int, gap: bool, reference) -> None:  # type: ignore[no-untyped-def]
    """The same functions split top-down for all pools of a level at once or pool by pool: the same shares."""
    fast = _shares(*_case(kind, seed, gap))
    reference(sums=False)
    slow = _shares(*_case(kind, seed, gap))
    assert fast.keys() == slow.keys()
    for name in fast:
        np.testing.assert_allclose(fast[name], slow[name], atol=1e-12, err_msg=name)


def test_the_production_tree_matches_the_reference(reference) -> None:  # type: ignore[no-untyped-def]
    """670 gang operations, many with equal demands: staircases of up to dozens of steps."""
    dump = load_elements_dump(DATA)
    settings = unit_test_settings(main_resource="gpu")
    fast = _shares(dump.root, dump.total_resources, settings)
    reference()
    slow = _shares(dump.root, dump.total_resources, settings)
    worst = max(float(np.abs(fast[name] - slow[name]).max()) for name in fast)
    assert worst < 2e-9


def test_a_jump_the_plain_sum_does_not_have_falls_back_to_the_reference() -> None:
    """``staircase_sums`` reports a pool whose sum has no vertical piece at a child's jump (the caller then
    builds that pool point by point) instead of placing a staircase somewhere else."""
    base = fn.FunctionBatch(np.array([0, 2]), np.array([0.0, 1.0]), np.zeros((2, RESOURCE_COUNT)))
    step = np.zeros((4, RESOURCE_COUNT))
    step[2:, 1] = 0.3
    children = fn.FunctionBatch(
        np.array([0, 4, 8]), np.tile([0.0, 0.5, 0.5, 1.0], 2), np.concatenate([step, step])
    )
    batch, failed = improved.staircase_sums(
        base, children, np.array([0, 0]), np.ones(2), np.zeros(2), np.ones(1)
    )
    assert failed.tolist() == [True]
    # With the sum's vertical piece where the children jump, the staircase is placed: 0 → 0.3 → 0.6.
    base = fn.FunctionBatch(
        np.array([0, 4]),
        np.array([0.0, 0.5, 0.5, 1.0]),
        np.array([[0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0.6, 0, 0, 0], [0, 0.6, 0, 0, 0]], dtype=float),
    )
    batch, failed = improved.staircase_sums(
        base, children, np.array([0, 0]), np.ones(2), np.zeros(2), np.ones(1)
    )
    assert failed.tolist() == [False]
    assert batch.x.tolist() == [0.0, 0.5, 0.5, 0.5, 1.0]
    assert batch.y[:, 1].tolist() == [0.0, 0.0, 0.3, 0.6, 0.6]
