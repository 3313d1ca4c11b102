"""Updates of the same model objects reuse the previous update's tree, checked inputs and guarantees
(``reuse.flatten``, ``inputs._KeptInputs``, ``reuse._StaticGuarantees``): every result must be the one an
update of fresh copies of the same inputs gives, bit for bit, whatever changed in between (usage, a vector
written in place, a weight, a mode, the priority tier, the structure, an id, the totals, the settings)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from pooltree.fairshare import (
    FairShareResult,
    Operation,
    Pool,
    UpdateSettings,
    UpdateState,
    update_fair_share,
)
from pooltree.resources import vector
from tests.fairshare.fairshare_random_trees import case


def walk(root: Pool) -> list[Any]:
    """The tree's elements, root first, breadth first."""
    out: list[Any] = [root]
    for element in out:
        if isinstance(element, Pool):
            out.extend(element.children)
    return out


def _ops(root: Pool) -> list[Operation]:
    return [e for e in walk(root) if isinstance(e, Operation)]


def _pools(root: Pool) -> list[Pool]:
    return [e for e in walk(root) if isinstance(e, Pool)]


def _value(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if hasattr(value, "__slots__") and not isinstance(value, str):
        return tuple(_value(getattr(value, name)) for name in value.__slots__)
    return repr(value)


def _digest(result: FairShareResult) -> Any:
    elements = result.elements
    rows = [(name, _value(elements[name])) for name in elements]
    state = result.state
    return (
        rows,
        repr(state.previous_update_time),
        sorted((k, _value(v)) for k, v in state.accumulated_resource_volume.items()),
        sorted(state.last_integral_share_ratio.items()),
        [(error.code, str(error), repr(error.attributes)) for error in result.errors],
    )


def _new_usage(rng: np.random.Generator, root: Pool, total: np.ndarray, settings: UpdateSettings) -> None:
    for op in _ops(root):
        if rng.random() < 0.3:
            op.usage = op.usage * float(rng.choice([0.0, 0.5, 1.0]))
            op.demand = op.usage + rng.choice([0.0, 1.0]) * np.abs(op.demand - op.usage)


def _usage_in_place(
    rng: np.random.Generator, root: Pool, total: np.ndarray, settings: UpdateSettings
) -> None:
    ops = _ops(root)
    if ops:
        op = ops[int(rng.integers(len(ops)))]
        op.usage[1] += 1.0  # the same array object, new values
        op.demand[1] += 2.0


def _guarantee_in_place(
    rng: np.random.Generator, root: Pool, total: np.ndarray, settings: UpdateSettings
) -> None:
    pool = _pools(root)[int(rng.integers(len(_pools(root))))]
    if pool is not root and pool.integral_guarantees.guarantee_type == "none":
        pool.strong_guarantee_resources[1] += 1.0
        pool.specified_guarantee_resources = pool.specified_guarantee_resources | {"cpu"}


def _weights(rng: np.random.Generator, root: Pool, total: np.ndarray, settings: UpdateSettings) -> None:
    elements = walk(root)[1:]
    element = elements[int(rng.integers(len(elements)))]
    element.weight = [None, 0.0, -0.0, 2.0, float(rng.integers(1, 4))][int(rng.integers(5))]


def _scalars(rng: np.random.Generator, root: Pool, total: np.ndarray, settings: UpdateSettings) -> None:
    elements = walk(root)[1:]
    element = elements[int(rng.integers(len(elements)))]
    element.max_share_ratio = float(rng.choice([1.0, 0.5]))
    element.starvation_tolerance = float(rng.choice([0.8, 0.3]))
    if isinstance(element, Operation):
        element.schedulable = not element.schedulable
        element.is_gang = not element.is_gang
        element.start_time = float(rng.integers(0, 50))
        element.pending_allocation_count += 3


def _modes(rng: np.random.Generator, root: Pool, total: np.ndarray, settings: UpdateSettings) -> None:
    leaves = [p for p in _pools(root)[1:] if all(isinstance(c, Operation) for c in p.children)]
    if leaves:
        pool = leaves[int(rng.integers(len(leaves)))]
        pool.mode = "fifo" if pool.mode == "fair_share" else "fair_share"
        pool.fifo_sort_parameters = [("start_time",), ("pending_allocation_count",)][int(rng.integers(2))]


def _priority(rng: np.random.Generator, root: Pool, total: np.ndarray, settings: UpdateSettings) -> None:
    pools = _pools(root)
    pool = pools[int(rng.integers(len(pools)))]
    if rng.random() < 0.5:
        pool.enable_priority_strong_guarantee_adjustment = (
            not pool.enable_priority_strong_guarantee_adjustment
        )
    else:
        pool.enable_priority_strong_guarantee_adjustment_donorship = (
            not pool.enable_priority_strong_guarantee_adjustment_donorship
        )


def _structure(rng: np.random.Generator, root: Pool, total: np.ndarray, settings: UpdateSettings) -> None:
    pools = _pools(root)
    pool = pools[int(rng.integers(len(pools)))]
    kind = int(rng.integers(3))
    if kind == 0:
        pool.children.append(
            Operation(f"new-{rng.integers(1 << 30)}", usage=vector(cpu=1.0), demand=vector(cpu=3.0))
        )
    elif kind == 1 and pool.children:
        pool.children.pop(int(rng.integers(len(pool.children))))
    elif len(pool.children) > 1:
        pool.children.reverse()


def _ids(rng: np.random.Generator, root: Pool, total: np.ndarray, settings: UpdateSettings) -> None:
    ops = _ops(root)
    if ops:
        ops[int(rng.integers(len(ops)))].id += "-renamed"


def _totals(rng: np.random.Generator, root: Pool, total: np.ndarray, settings: UpdateSettings) -> None:
    total[1] *= float(rng.choice([0.5, 2.0]))  # the caller's array, written in place


def _settings(rng: np.random.Generator, root: Pool, total: np.ndarray, settings: UpdateSettings) -> None:
    settings.infer_weight_from_guarantees_share_multiplier = [None, 1.0, 3.0][int(rng.integers(3))]
    settings.main_resource = str(rng.choice(["cpu", "memory"]))


CHANGES: list[Callable[[np.random.Generator, Pool, np.ndarray, UpdateSettings], None]] = [
    _new_usage,
    _usage_in_place,
    _guarantee_in_place,
    _weights,
    _scalars,
    _modes,
    _priority,
    _structure,
    _ids,
    _totals,
    _settings,
]


def matches_fresh_update(
    root: Pool,
    total: np.ndarray,
    settings: UpdateSettings,
    now: float,
    state: Any,
    fresh_state: Any,
    label: str,
) -> tuple[FairShareResult, FairShareResult] | None:
    """Update ``root`` (whose objects earlier updates saw, with their ``state``) and deep copies of it (with a copy
    of ``fresh_state``): the results must be equal bit for bit, or both updates raise the same error (a change may
    make the input invalid), then None. Returns (reused, fresh)."""
    fresh = copy.deepcopy((root, total, settings))
    try:
        expected = update_fair_share(*fresh, now, copy.deepcopy(fresh_state))
    except Exception as error:
        with pytest.raises(type(error)) as raised:
            update_fair_share(root, total, settings, now, state)
        assert str(raised.value) == str(error)
        return None
    got = update_fair_share(root, total, settings, now, state)
    assert _digest(got) == _digest(expected), label
    return got, expected


@pytest.mark.parametrize("seed", [*range(12), 30])
def test_updates_of_the_same_objects_match_updates_of_fresh_copies(seed: int) -> None:
    root, total, settings = case(seed)
    total = total.copy()
    rng = np.random.default_rng(seed)
    state = UpdateState()
    fresh_state = UpdateState()
    kept: list[tuple[FairShareResult, Any]] = []
    for step in range(12):
        if step:
            # Usage moves every step (the common case); now and then something else changes too.
            _new_usage(rng, root, total, settings)
            if step % 2 == 0:
                CHANGES[int(rng.integers(len(CHANGES)))](rng, root, total, settings)
        pair = matches_fresh_update(root, total, settings, 10.0 * step, state, fresh_state, f"step {step}")
        if pair is None:
            continue
        got, expected = pair
        state, fresh_state = got.state, expected.state
        kept.append((got, _digest(got)))
    # Results share arrays with later updates only read-only: the earlier results are unchanged.
    for result, digest in kept:
        assert _digest(result) == digest


def test_a_reused_update_is_one_of_the_same_tree() -> None:
    """Two trees updated in turn keep their own reusable state; a result's arrays cannot be written."""
    first, total, settings = case(1)
    second, total2, settings2 = case(2)
    results = [
        update_fair_share(first, total, settings, 0.0),
        update_fair_share(second, total2, settings2, 0.0),
    ]
    again = [
        update_fair_share(first, total, settings, 0.0),
        update_fair_share(second, total2, settings2, 0.0),
    ]
    for before, after in zip(results, again, strict=True):
        assert _digest(before) == _digest(after)
    weight = again[0].elements.arrays["weight"]
    with pytest.raises(ValueError):
        weight[0] = 5.0
