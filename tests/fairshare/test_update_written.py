"""An update told which operations were written since the previous update of the same tree (``UpdateState.written``,
the period's delta of inputs) reads only their rows (``inputs.read_rows`` with rows): its results must be those of an
update of fresh copies (which reads every row), bit for bit. The tree runtime's input cache reports what it wrote
(``read_input``'s ``written``), and a write it did not report would show.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np
import pytest

from pooltree.config import parse_pool_trees
from pooltree.fairshare import Operation, Pool, UpdateState, update_fair_share
from pooltree.fairshare import inputs as inputs_module
from pooltree.fairshare import reuse as reuse_module
from pooltree.resources import vector
from pooltree.tree import PoolTree
from pooltree.tree import fair_share_input as input_module
from tests.fairshare.fairshare_random_trees import case
from tests.fairshare.test_update_reuse import _digest, _ops, _pools, matches_fresh_update
from tests.periods import InputReads

GiB = 1024.0**3


class _Reads:
    """Counts the updates that read only written rows, and the rows they read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.partial = 0
        self.rows: list[int] = []
        original = inputs_module.read_rows

        def spy(*args: Any) -> Any:
            rows = args[-1]
            if rows is not None:  # only the written rows
                self.partial += 1
                self.rows.append(len(rows))
            return original(*args)

        monkeypatch.setattr(inputs_module, "read_rows", spy)


def _told(state: UpdateState, written: list[Any], relaid: frozenset[str] = frozenset()) -> UpdateState:
    """``state`` with the caller's delta since the update that returned it: the elements written, the pools whose
    children lists were replaced."""
    return dataclasses.replace(state, written=list(written), relaid=relaid)


def _move_usage(rng: np.random.Generator, root: Pool, written: list[Any]) -> None:
    """A few operations get new usage and demand (new arrays, demand covering usage; -0.0 now and then)."""
    ops = list(_ops(root))
    for index in rng.choice(len(ops), size=min(len(ops), int(rng.integers(0, 4))), replace=False).tolist():
        op = ops[index]
        usage = op.usage * float(rng.choice([0.0, 0.5, 1.0, 2.0]))
        if rng.random() < 0.2:
            usage = -0.0 * usage
        op.usage = usage
        op.demand = np.maximum(op.demand, usage) * float(rng.choice([1.0, 1.5]))
        written.append(op)


def _arrival(rng: np.random.Generator, root: Pool, serial: int) -> frozenset[str]:
    """Now and then an operation arrives (a new element) or one leaves: the layout patches the tree. Returns the
    pool whose children list was replaced, if any."""
    pools = [p for p in _pools(root) if not p.children or isinstance(p.children[0], Operation)]
    pool = pools[int(rng.integers(len(pools)))]
    kind = rng.random()
    if kind < 0.1:
        arrived = Operation(
            f"arrived-{serial}",
            usage=np.array([1.0, 2.0, 0, 2.0**31, 0]),
            demand=np.array([3.0, 6.0, 0, 2.0**33, 0]),
        )
        pool.children = [*pool.children, arrived]
    elif kind < 0.15 and pool.children:
        pool.children = pool.children[:-1]
    else:
        return frozenset()
    return frozenset({pool.id})


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 6, 9, 31, 33])
def test_updates_told_what_was_written_match_fresh_updates_bit_for_bit(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, total, settings = case(seed)
    reads = _Reads(monkeypatch)
    monkeypatch.setattr(reuse_module, "WRITTEN_SHARE_LIMIT", 2.0)  # small trees too
    rng = np.random.default_rng(700 + seed)
    state = UpdateState()
    fresh_state = UpdateState()
    written: list[Any] = []
    relaid: frozenset[str] = frozenset()
    for step in range(16):
        if step:
            _move_usage(rng, root, written)
            relaid |= _arrival(rng, root, step)
        told = _told(state, written, relaid)
        pair = matches_fresh_update(
            root, total, settings, 5.0 * step, told, fresh_state, f"seed {seed} step {step}"
        )
        if pair is not None:  # else what changed is still to be told
            state, fresh_state = pair[0].state, pair[1].state
            written, relaid = [], frozenset()
    assert reads.partial > 0  # the written rows were used, not only the full read


def test_an_update_reads_only_the_written_operations(monkeypatch: pytest.MonkeyPatch) -> None:
    root, total, settings = case(33)
    reads = _Reads(monkeypatch)
    first = update_fair_share(root, total, settings, 0.0)
    assert reads.partial == 0
    second = update_fair_share(root, total, settings, 1.0, _told(first.state, []))
    assert reads.rows == [0]  # nothing written: no element read again
    ops = list(_ops(root))
    for op in ops[3:6]:
        op.usage = op.usage * 0.5
    ops[4].demand = ops[4].demand * 2.0
    got = update_fair_share(root, total, settings, 2.0, _told(second.state, [*ops[3:6], ops[4]]))
    assert reads.rows == [0, 3]  # written twice: read once
    fresh = copy.deepcopy((root, total, settings))
    assert _digest(got) == _digest(update_fair_share(*fresh, 2.0, second.state))
    # An operation arrives and one leaves (the layout patches the tree): the other rows are carried; the new
    # operation and the written one are read.
    pool = next(p for p in _pools(root) if p.children and isinstance(p.children[-1], Operation))
    arrived = Operation("arrived", usage=ops[3].usage * 2.0, demand=ops[3].demand * 3.0)
    pool.children = [*pool.children[:-1], arrived]
    ops[7].demand = ops[7].demand * 2.0
    again = update_fair_share(root, total, settings, 3.0, _told(got.state, [ops[7]], frozenset({pool.id})))
    assert reads.rows == [0, 3, 2]
    fresh = copy.deepcopy((root, total, settings))
    assert _digest(again) == _digest(update_fair_share(*fresh, 3.0, got.state))


def test_the_kept_guarantees_are_taken_again_unless_a_written_row_or_the_totals_moved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The guarantee steps' element inputs are compared only in the rows the caller said it wrote: usage moving
    there keeps the previous update's guarantees, a limit written there (or new totals) makes them anew, and every
    update equals an update of fresh copies."""
    root, total, settings = case(33)
    made: list[int] = []
    original = reuse_module.keep_guarantees

    def keep(tree: Any, *args: Any) -> Any:
        made.append(len(tree.elements))
        return original(tree, *args)

    monkeypatch.setattr(reuse_module, "keep_guarantees", keep)
    state = update_fair_share(root, total, settings, 0.0).state
    ops = list(_ops(root))

    def update(now: float, written: list[Any], totals: np.ndarray) -> None:
        nonlocal state
        fresh = copy.deepcopy((root, totals, settings))
        expected = update_fair_share(*fresh, now, state)
        got = update_fair_share(root, totals, settings, now, _told(state, written))
        assert _digest(got) == _digest(expected)
        state = got.state

    assert len(made) == 1
    ops[3].usage = ops[3].usage * 0.5
    update(1.0, [ops[3]], total)
    assert len(made) == 2  # only the fresh update made them
    ops[4].specified_resource_limits = (ops[4].usage + ops[4].demand) / 2.0
    update(2.0, [ops[4]], total)
    assert len(made) == 4  # the written limit: made anew (and by the fresh update)
    update(3.0, [], total * 2.0)
    assert len(made) == 6  # new totals: made anew


def test_an_update_not_told_reads_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """An update's own state, a state whose ``written`` is None, or a copy of the tree: every row is read."""
    root, total, settings = case(31)
    reads = _Reads(monkeypatch)
    first = update_fair_share(root, total, settings, 0.0)
    op = _ops(root)[0]
    op.usage = op.demand.copy()
    got = update_fair_share(root, total, settings, 1.0, first.state)
    assert reads.partial == 0 and got.elements[op.id].resource_usage.tolist() == op.usage.tolist()
    copied = copy.deepcopy(root)
    update_fair_share(copied, total, settings, 2.0, _told(got.state, []))
    assert reads.partial == 0  # another root: the previous layout is not its own


# ---- the tree runtime's input (the one writer of its model elements) ------------------------------------------

POOLS = {
    "a": {"weight": 2},
    "b": {
        "strong_guarantee_resources": {"cpu": 6},
        "pools": {"b1": {}, "b2": {"strong_guarantee_resources": {"cpu": 3}}},
    },
}


def _runtime_steps(steps: int = 30) -> list[int]:
    """Steps of a tree runtime's input (``tests.periods.InputReads``: three operations' usage and needed resources moving
    each step, now and then one arriving and one leaving), its writes handed to the update, whose update differs
    from an update of fresh copies (which reads every row)."""
    rng = np.random.default_rng(5)
    tree = PoolTree(parse_pool_trees({"t": {"pools": POOLS}})["t"])
    for index in range(24):
        tree.register_operation(f"op{index}", user="u", pool=["a", "b1", "b2"][index % 3], now=0.0)
    resources: dict[str, tuple[np.ndarray, np.ndarray]] = {
        f"op{index}": (vector(cpu=float(index % 4)), vector(cpu=float(index % 3), user_slots=1.0))
        for index in range(24)
    }
    total = vector(cpu=40.0, memory=100 * GiB, user_slots=40.0)
    cache = InputReads()
    state = UpdateState()
    differ = []
    for step in range(steps):
        if step % 7 == 6:
            gone = sorted(resources)[int(rng.integers(len(resources)))]
            tree.unregister_operation(gone)
            del resources[gone]
            arrived = f"new{step}"
            tree.register_operation(arrived, user="u", pool=["a", "b1", "b2"][step % 3], now=float(step))
            resources[arrived] = (vector(cpu=1.0), vector(cpu=2.0, user_slots=1.0))
        for op_id in rng.choice(sorted(resources), size=3, replace=False).tolist():
            usage, needed = resources[op_id]
            resources[op_id] = (
                usage + vector(cpu=float(rng.integers(0, 3))),
                needed * float(rng.integers(0, 2)),
            )
        read = cache.read(tree, resources)
        root, settings = read.root, read.settings
        fresh = copy.deepcopy((root, total, settings))
        expected = update_fair_share(*fresh, float(step), copy.deepcopy(state))
        told = dataclasses.replace(state, written=read.written, relaid=read.relaid, renewed=read.renewed)
        got = update_fair_share(root, total, settings, float(step), told)
        if _digest(got) != _digest(expected):
            differ.append(step)
        state = got.state
    return differ


def test_the_runtime_input_reports_its_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _Reads(monkeypatch)
    assert _runtime_steps() == []
    assert reads.partial >= 20 and max(reads.rows) <= 4  # the operations that moved, a changed one read once


def test_a_write_the_input_does_not_report_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unreported write (a missing notification) would leave the update with the old values of that
    operation, and the comparison catches it."""
    assert _runtime_steps() == []
    original = input_module._refresh_resources

    def unreported(operations: Any, source: Any, changed: Any = None, written: Any = None) -> None:
        original(operations, source, changed, None)

    monkeypatch.setattr(input_module, "_refresh_resources", unreported)
    assert _runtime_steps() != []


def test_the_kept_functions_compare_only_the_written_operations(monkeypatch: pytest.MonkeyPatch) -> None:
    """The functions kept by the previous update are compared with this update's inputs: the operations' usage
    and demand shares only in the rows the period's delta wrote (the other operations' inputs and the totals are
    the ones the kept functions were built from), and the result is the one of a fresh update."""
    root, total, settings = case(33)
    compared: list[int] = []
    original = reuse_module._rows_differ

    def spy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        compared.append(len(a))
        return original(a, b)

    monkeypatch.setattr(reuse_module, "_rows_differ", spy)
    first = update_fair_share(root, total, settings, 0.0)
    second = update_fair_share(root, total, settings, 1.0, _told(first.state, []))
    n = len(second.elements.ids)
    compared.clear()
    ops = list(_ops(root))
    for op in ops[3:6]:
        op.usage = op.usage * 0.5
    got = update_fair_share(root, total, settings, 2.0, _told(second.state, ops[3:6]))
    assert (
        3 in compared and compared.count(n) == 2
    )  # shares of the three written; guarantees and limits of all
    fresh = copy.deepcopy((root, total, settings))
    assert _digest(got) == _digest(update_fair_share(*fresh, 2.0, second.state))
    compared.clear()
    update_fair_share(root, total, settings, 3.0, got.state)  # not told what changed: a fresh layout
    assert not compared  # nothing kept to compare with
