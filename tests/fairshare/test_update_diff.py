"""Updates of the same tree rebuild only the fair-share functions whose inputs changed (``reuse._KeptFunctions``).

A sequence of updates with a few operations' usage and demand replaced between them (as the tree runtime's input
does), now and then a weight, a guarantee or a limit, must give bit for bit what an update of fresh copies gives;
and the build must actually be proportional: only the changed operations' functions are computed again.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np
import pytest

from pooltree.fairshare import Operation, Pool, UpdateState, update_fair_share
from pooltree.fairshare import building as building_module
from pooltree.fairshare import functions as fn
from pooltree.fairshare import reuse as reuse_module
from pooltree.fairshare.compiled import COMPILED_KERNELS_AVAILABLE, use_compiled_kernels
from tests.fairshare.fairshare_random_trees import case
from tests.fairshare.test_update_reuse import _digest, _ops, _pools, matches_fresh_update

needs_compiled = pytest.mark.skipif(
    not COMPILED_KERNELS_AVAILABLE, reason="the compiled passes are not built"
)


def _small_change(rng: np.random.Generator, root: Pool) -> None:
    """A few operations get new usage and demand arrays (a job starts or ends); now and then something else."""
    ops = _ops(root)
    for index in rng.choice(len(ops), size=min(len(ops), int(rng.integers(1, 4))), replace=False).tolist():
        op = ops[index]
        delta = np.array([1.0, float(rng.integers(1, 4)), 0.0, 2.0**30, 0.0])
        kind = rng.random()
        if kind < 0.3:
            op.demand = op.demand + delta  # a job is queued: demand alone moves
        elif kind < 0.65 or not np.all(op.usage >= delta):
            op.usage = op.usage + delta
            op.demand = np.maximum(op.demand, op.usage) + delta * float(rng.integers(0, 2))
        else:
            op.usage = op.usage - delta
    _structure_change(rng, root)
    kind = rng.random()
    if kind < 0.15:
        element = [*ops, *_pools(root)[1:]][int(rng.integers(len(ops) + len(_pools(root)) - 1))]
        element.weight = [None, 0.0, -0.0, 2.0, 3.0][int(rng.integers(5))]
    elif kind < 0.25:
        element = [*ops, *_pools(root)[1:]][int(rng.integers(len(ops) + len(_pools(root)) - 1))]
        # Half way between usage and demand (an operation's), or a tenth of the cpu (a pool's): a limit that cuts.
        if isinstance(element, Operation):
            element.specified_resource_limits = (element.usage + element.demand) / 2.0 + 0.5
        else:
            element.specified_resource_limits = np.array(
                [np.inf, 10.0 * float(rng.integers(1, 5)), np.inf, np.inf, np.inf]
            )
    elif kind < 0.35:
        pool = _pools(root)[int(rng.integers(len(_pools(root))))]
        if pool is not root and pool.integral_guarantees.guarantee_type == "none":
            pool.strong_guarantee_resources = pool.strong_guarantee_resources + np.array([0, 1.0, 0, 0, 0])
            pool.specified_guarantee_resources = pool.specified_guarantee_resources | {"cpu"}
    elif kind < 0.4:
        op = ops[int(rng.integers(len(ops)))]
        op.is_gang = not op.is_gang
    elif kind < 0.45:
        op = ops[int(rng.integers(len(ops)))]
        op.usage = op.usage * -0.0 if not np.any(op.usage) else op.usage  # -0.0 is a change of bits


def _structure_change(rng: np.random.Generator, root: Pool) -> None:
    """Now and then an operation arrives or leaves, or a pool's children come in another order."""
    kind = rng.random()
    pools = _pools(root)
    pool = pools[int(rng.integers(len(pools)))]
    if kind < 0.1 and (not pool.children or isinstance(pool.children[0], Operation)):
        arrived = Operation(
            f"arrived-{rng.integers(1 << 30)}",
            usage=np.array([1.0, 2.0, 0, 2.0**31, 0]),
            demand=np.array([3.0, 6.0, 0, 2.0**33, 0]),
        )
        pool.children = [*pool.children, arrived]  # a fresh list, as the tree runtime hands them
    elif kind < 0.2 and pool.children and isinstance(pool.children[-1], Operation):
        pool.children = pool.children[:-1]
    elif kind < 0.25 and len(pool.children) > 1:
        pool.children = pool.children[::-1]


def _run_sequence(seed: int, steps: int) -> None:
    root, total, settings = case(seed)
    rng = np.random.default_rng(500 + seed)
    state = UpdateState()
    fresh_state = UpdateState()
    for step in range(steps):
        if step:
            _small_change(rng, root)
        pair = matches_fresh_update(
            root, total, settings, 5.0 * step, state, fresh_state, f"seed {seed} step {step}"
        )
        if pair is None:
            continue
        got, expected = pair
        state, fresh_state = got.state, expected.state


@pytest.mark.parametrize("seed", [0, 1, 2, 4, 6, 33])
def test_small_changes_match_fresh_updates_bit_for_bit(seed: int) -> None:
    _run_sequence(seed, 20)


def test_small_changes_match_fresh_updates_with_the_numpy_passes() -> None:
    with use_compiled_kernels(False):
        _run_sequence(2, 8)


class _Recorder:
    """Counts the operations whose functions ``build_functions`` computes (wraps the operations' pass)."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.original = fn.operation_fair_share_by_suggestion

    def __call__(self, usage: np.ndarray, *args: Any) -> fn.FunctionBatch:
        self.sizes.append(len(usage))
        return self.original(usage, *args)


def _told(state: UpdateState, written: list[Any], relaid: frozenset[str] = frozenset()) -> UpdateState:
    """``state`` with the caller's delta since the update that returned it (``UpdateState.written``, ``.relaid``)."""
    return dataclasses.replace(state, written=list(written), relaid=relaid)


@needs_compiled
def test_only_changed_operations_are_built_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Told what changed since the previous update (the elements written, the pools whose children lists were
    replaced), an update builds again only the functions of the changed operations."""
    root, total, settings = case(33)  # a bench tree: no integral pools, one full build per update
    recorder = _Recorder()
    monkeypatch.setattr(building_module.fn, "operation_fair_share_by_suggestion", recorder)
    ops = _ops(root)

    def update(now: float, written: list[Any], relaid: frozenset[str] = frozenset()) -> Any:
        nonlocal state
        told = _told(state, written, relaid)
        got = update_fair_share(root, total, settings, now, told)
        built = list(recorder.sizes)
        fresh = copy.deepcopy((root, total, settings))
        assert _digest(got) == _digest(update_fair_share(*fresh, now, state))
        recorder.sizes[:] = built  # the fresh update's builds are not counted
        state = got.state
        return got

    state = update_fair_share(root, total, settings, 0.0).state
    assert recorder.sizes == [len(ops)]
    recorder.sizes.clear()
    # Nothing changed: nothing is built.
    update(1.0, [])
    assert sum(recorder.sizes) == 0
    # Two operations get new vectors with the same values: the same bits, nothing to build either.
    for op in ops[:2]:
        op.usage, op.demand = op.usage.copy(), op.demand.copy()
    update(2.0, ops[:2])
    assert sum(recorder.sizes) == 0
    # Three operations' usage moves: exactly those three are built again, and the result is a fresh update's.
    changed: list[Operation] = [ops[5], ops[17], ops[-1]]
    for op in changed:
        op.usage = op.usage * 0.5
    update(3.0, changed)
    assert recorder.sizes == [3]
    # A limit that cuts one operation's demand: that operation alone, as a fresh update.
    limited = ops[9]
    limited.specified_resource_limits = (limited.usage + limited.demand) / 2.0
    recorder.sizes.clear()
    update(3.5, [limited])
    assert recorder.sizes == [1]
    # An operation arrives and one leaves: the new tree takes the functions of the elements still there.
    parent = next(p for p in _pools(root) if p.children and isinstance(p.children[0], Operation))
    arrived = Operation("arrived", usage=ops[3].usage * 2.0, demand=ops[3].demand * 3.0)
    parent.children = [*parent.children[1:], arrived]
    recorder.sizes.clear()
    update(3.7, [], frozenset({parent.id}))
    assert recorder.sizes == [1]
    # A changed operation's function is not taken from the previous build: its fair share moved with it.
    before = update(4.0, []).elements[changed[0].id]
    changed[0].usage = changed[0].usage * 0.0
    changed[0].demand = changed[0].demand * 0.0
    after = update(5.0, [changed[0]]).elements[changed[0].id]
    assert np.all(after.fair_share == 0.0) and np.any(before.fair_share != 0.0)


@needs_compiled
def test_the_kept_build_stays_in_a_few_batches() -> None:
    """Every reusing update adds small batches; dead ones are dropped and a spread table is copied together."""
    root, total, settings = case(31)
    rng = np.random.default_rng(7)
    state = UpdateState()
    for step in range(40):
        _small_change(rng, root)
        try:
            state = update_fair_share(root, total, settings, float(step), state).state
        except Exception:
            continue
        kept = reuse_module._KeptFunctions
        functions = state.layout.functions
        assert isinstance(functions, kept)
        assert len(functions.table.batches) <= reuse_module._KEPT_BATCHES_LIMIT
