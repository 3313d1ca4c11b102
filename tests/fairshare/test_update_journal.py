"""An update of a journaled model reads only the operations written since the last update of the same tree
(``pooltree.fairshare.journal``, ``inputs._read_written``): its results must be those of an update of fresh
copies (which reads every row), bit for bit, whatever was written; writes the journal cannot see fail loudly (arrays
are read-only) or make the operation volatile; and a write that misses the journal must show.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import numpy as np
import pytest

from pooltree.config import parse_pool_trees
from pooltree.fairshare import IntegralGuarantees, Operation, Pool, UpdateState, update_fair_share
from pooltree.fairshare import inputs as inputs_module
from pooltree.fairshare import journal as journal_module
from pooltree.fairshare.journal import (
    InputJournal,
    JournaledOperation,
    JournaledPool,
    SealedIntegralGuarantees,
)
from pooltree.resources import vector
from pooltree.tree import FairShareInputCache, PoolTree, build_fair_share_input
from tests.fairshare.fairshare_random_trees import case
from tests.fairshare.test_update_diff import _small_change
from tests.fairshare.test_update_reuse import _digest, _ops, _pools, matches_fresh_update

GiB = 1024.0**3


def _fields(element: Any) -> dict[str, Any]:
    values = {f.name: getattr(element, f.name) for f in dataclasses.fields(element)}
    return {name: value.copy() if isinstance(value, np.ndarray) else value for name, value in values.items()}


def _journaled(element: Any, journal: InputJournal) -> Any:
    """A journaled copy of a plain model tree (every operation and pool, integral guarantees sealed), all in
    ``journal``, as the tree runtime's input builds it."""
    values = _fields(element)
    if isinstance(element, Pool):
        values["children"] = [_journaled(child, journal) for child in element.children]
        values["integral_guarantees"] = SealedIntegralGuarantees(**_fields(element.integral_guarantees))
        return JournaledPool(**values, journal=journal)
    return JournaledOperation(**values, journal=journal)


class _Reads:
    """Counts the updates that read only written rows, and the operation rows they read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.partial = 0
        self.rows: list[int] = []
        original = inputs_module._read_written

        def spy(upd: Any, last: Any, rows: np.ndarray, journal: InputJournal) -> None:
            self.partial += 1
            self.rows.append(len(rows))
            original(upd, last, rows, journal)

        monkeypatch.setattr(inputs_module, "_read_written", spy)


def _arrival(rng: np.random.Generator, root: Pool, journal: InputJournal) -> None:
    """Now and then a journaled operation arrives or one leaves (a new structure: the next update reads all)."""
    pools = [p for p in _pools(root) if not p.children or isinstance(p.children[0], Operation)]
    pool = pools[int(rng.integers(len(pools)))]
    kind = rng.random()
    if kind < 0.08:
        arrived = JournaledOperation(
            f"arrived-{rng.integers(1 << 30)}",
            usage=np.array([1.0, 2.0, 0, 2.0**31, 0]),
            demand=np.array([3.0, 6.0, 0, 2.0**33, 0]),
            journal=journal,
        )
        pool.children = [*pool.children, arrived]
    elif kind < 0.12 and pool.children:
        pool.children = pool.children[:-1]


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 6, 9, 31, 33])
def test_journaled_updates_match_fresh_updates_bit_for_bit(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain, total, settings = case(seed)
    journal = InputJournal()
    root = _journaled(plain, journal)
    reads = _Reads(monkeypatch)
    monkeypatch.setattr(
        inputs_module, "WRITTEN_SHARE_LIMIT", 2.0
    )  # small trees too: every write through the journal
    rng = np.random.default_rng(700 + seed)
    state = UpdateState()
    fresh_state = UpdateState()
    for step in range(16):
        if step:
            # usage, demand, weights, limits, guarantees, gangs, -0.0; plain operations arriving, leaving
            _small_change(rng, root)
            _arrival(rng, root, journal)
        pair = matches_fresh_update(
            root, total, settings, 5.0 * step, state, fresh_state, f"seed {seed} step {step}"
        )
        if pair is not None:
            state, fresh_state = pair[0].state, pair[1].state
    assert reads.partial > 0  # the journal was used, not only the full read


def test_an_update_reads_only_the_written_operations(monkeypatch: pytest.MonkeyPatch) -> None:
    plain, total, settings = case(33)
    journal = InputJournal()
    root = _journaled(plain, journal)
    reads = _Reads(monkeypatch)
    first = update_fair_share(root, total, settings, 0.0)
    assert reads.partial == 0
    update_fair_share(root, total, settings, 1.0, first.state)
    assert reads.rows == [0]  # nothing written: no element read again
    ops = _ops(root)
    for op in ops[3:6]:
        op.usage = op.usage * 0.5
    ops[4].demand = ops[4].demand * 2.0  # written twice: read once
    got = update_fair_share(root, total, settings, 2.0, first.state)
    assert reads.rows == [0, 3]
    fresh = copy.deepcopy((root, total, settings))
    assert _digest(got) == _digest(update_fair_share(*fresh, 2.0, first.state))
    # An operation arrives and one leaves (the layout patches the tree): the other rows are carried; the new
    # operation, the written one and the pool (its children were set) are read.
    pool = next(p for p in _pools(root) if p.children and isinstance(p.children[-1], Operation))
    arrived = JournaledOperation(
        "arrived", usage=ops[3].usage * 2.0, demand=ops[3].demand * 3.0, journal=journal
    )
    pool.children = [*pool.children[:-1], arrived]
    ops[7].demand = ops[7].demand * 2.0
    got = update_fair_share(root, total, settings, 3.0, first.state)
    assert reads.rows == [0, 3, 3]
    fresh = copy.deepcopy((root, total, settings))
    assert _digest(got) == _digest(update_fair_share(*fresh, 3.0, first.state))
    # A plain operation arrives: only a full read may vouch for it.
    pool.children = [*pool.children, Operation("plain", usage=ops[3].usage, demand=ops[3].demand)]
    update_fair_share(root, total, settings, 4.0, first.state)
    assert reads.rows == [0, 3, 3]


def test_arrays_of_journaled_operations_cannot_be_written_in_place() -> None:
    journal = InputJournal()
    op = JournaledOperation("op", usage=np.array([1.0, 2.0, 0.0, 3.0, 0.0]), journal=journal)
    with pytest.raises(ValueError, match="read-only"):
        op.usage[1] = 5.0
    with pytest.raises(ValueError, match="read-only"):
        op.demand += 1.0
    base = np.zeros((2, 5))
    op.usage = base[0]  # a view: its base could still be written, so the operation keeps a copy
    base[0, 1] = 7.0
    assert op.usage[1] == 0.0 and not op.usage.flags.writeable


def test_written_pools_are_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    plain, total, settings = case(33)
    root = _journaled(plain, InputJournal())
    reads = _Reads(monkeypatch)
    pool = next(p for p in _pools(root) if p.children and isinstance(p.children[0], Operation))
    state = fresh_state = UpdateState()
    changes: list[tuple[str, Any]] = [
        ("mode", "fifo"),
        ("weight", 3.0),
        ("strong_guarantee_resources", pool.strong_guarantee_resources + 1.0),
        ("mode", "bogus"),  # both updates raise the same error
        ("mode", "fair_share"),
        ("max_share_ratio", 0.5),
    ]
    for step, (name, value) in enumerate(changes):
        setattr(pool, name, value)
        pair = matches_fresh_update(
            root, total, settings, float(step), state, fresh_state, f"{name}={value!r}"
        )
        if pair is not None:
            state, fresh_state = pair[0].state, pair[1].state
    assert reads.partial >= len(changes) - 2 and set(reads.rows) == {1}  # the pool alone
    with pytest.raises(AttributeError, match="cannot be changed in place"):
        pool.integral_guarantees.guarantee_type = "burst"
    pool.integral_guarantees = IntegralGuarantees()  # a plain one can change in place: the pool is volatile
    assert pool in root.journal.volatile


def test_a_mutable_value_is_read_by_every_update(monkeypatch: pytest.MonkeyPatch) -> None:
    plain, total, settings = case(31)
    journal = InputJournal()
    root = _journaled(plain, journal)
    op = _ops(root)[7]
    op.usage = op.usage.tolist()  # a list can change in place without an attribute write
    assert op in journal.volatile
    first = update_fair_share(root, total, settings, 0.0)
    op.usage[1] = op.usage[1] * 0.5
    got = update_fair_share(root, total, settings, 1.0, first.state)
    fresh = copy.deepcopy((root, total, settings))
    assert _digest(got) == _digest(update_fair_share(*fresh, 1.0, first.state))
    assert got.elements[op.id].resource_usage[1] == op.usage[1]


def test_an_operation_outside_the_journal_turns_the_hint_off(monkeypatch: pytest.MonkeyPatch) -> None:
    plain, total, settings = case(31)
    journal = InputJournal()
    root = _journaled(plain, journal)
    pool = next(p for p in _pools(root) if p.children and isinstance(p.children[0], Operation))
    stranger = Operation(
        "stranger", usage=np.array([1.0, 1.0, 0, GiB, 0]), demand=np.array([2.0, 2.0, 0, GiB, 0])
    )
    pool.children = [*pool.children, stranger]
    reads = _Reads(monkeypatch)
    first = update_fair_share(root, total, settings, 0.0)
    stranger.usage = stranger.demand.copy()  # not journaled: only a full read sees it
    got = update_fair_share(root, total, settings, 1.0, first.state)
    assert reads.partial == 0
    fresh = copy.deepcopy((root, total, settings))
    assert _digest(got) == _digest(update_fair_share(*fresh, 1.0, first.state))


def test_copies_and_forgetful_journals_read_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    plain, total, settings = case(31)
    journal = InputJournal()
    root = _journaled(plain, journal)
    reads = _Reads(monkeypatch)
    first = update_fair_share(root, total, settings, 0.0)
    for copied in (copy.deepcopy(root), pickle.loads(pickle.dumps(root))):
        assert copied.journal is not journal and not copied.journal.written_since(copied.journal.position)
        assert isinstance(_ops(copied)[0], JournaledOperation) and _ops(copied)[0].journal is copied.journal
        update_fair_share(copied, total, settings, 1.0, first.state)
        assert reads.partial == 0
    # More writes than the journal keeps: it forgets them all, and the next update reads every row.
    monkeypatch.setattr(journal_module, "JOURNAL_LIMIT", 4)
    for op in _ops(root)[:5]:
        op.usage = op.usage * 0.0
    assert journal.written_since(0) is None
    got = update_fair_share(root, total, settings, 2.0, first.state)
    assert reads.partial == 0
    fresh = copy.deepcopy((root, total, settings))
    assert _digest(got) == _digest(update_fair_share(*fresh, 2.0, first.state))


# ---- the tree runtime's input (the one builder of journaled models) -----------------------------------------

POOLS = {
    "a": {"weight": 2},
    "b": {
        "strong_guarantee_resources": {"cpu": 6},
        "pools": {"b1": {}, "b2": {"strong_guarantee_resources": {"cpu": 3}}},
    },
}


def _runtime_steps(steps: int = 30) -> list[int]:
    """Steps of a tree runtime's input (``FairShareInputCache``: three operations' usage and needed resources moving
    each step, now and then one arriving and one leaving) whose update differs from an update of fresh copies (which
    reads every row)."""
    rng = np.random.default_rng(5)
    tree = PoolTree(parse_pool_trees({"t": {"pools": POOLS}})["t"])
    for index in range(24):
        tree.register_operation(f"op{index}", user="u", pool=["a", "b1", "b2"][index % 3], now=0.0)
    resources: dict[str, tuple[np.ndarray, np.ndarray]] = {
        f"op{index}": (vector(cpu=float(index % 4)), vector(cpu=float(index % 3), user_slots=1.0))
        for index in range(24)
    }
    total = vector(cpu=40.0, memory=100 * GiB, user_slots=40.0)
    cache = FairShareInputCache()
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
        root, settings = build_fair_share_input(tree, resources, cache=cache)
        assert root.journal is cache.journal
        fresh = copy.deepcopy((root, total, settings))
        expected = update_fair_share(*fresh, float(step), copy.deepcopy(state))
        got = update_fair_share(root, total, settings, float(step), state)
        if _digest(got) != _digest(expected):
            differ.append(step)
        state = got.state
    return differ


def test_the_runtime_input_journals_its_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _Reads(monkeypatch)
    assert _runtime_steps() == []
    assert reads.partial >= 20 and max(reads.rows) <= 4  # the operations that moved, a changed one read once


def test_a_write_that_misses_the_journal_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The builder's writes reach the journal through the elements themselves; one that did not (a missing
    notification) would leave the update with the old values of that operation, and the comparison catches it."""

    def unrecorded(self: Any, name: str, value: Any) -> None:
        if isinstance(value, np.ndarray):
            value = value.copy()
            value.flags.writeable = False
        object.__setattr__(self, name, value)  # set, but not recorded

    first = _runtime_steps()
    monkeypatch.setattr(JournaledOperation, "__setattr__", unrecorded)
    assert first == [] and _runtime_steps() != []
