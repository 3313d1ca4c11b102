"""A publish derived from the one before (the same structure, or operations added and removed) goes to shard
processes as its changes (`increments.published_changes`, `replica.PublishedChanges`): the replica derives the
tree from its own published one, so that its publish takes the incremental path, and ends where the truth's
publish ends; a replica holding another base refuses the changes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pooltree.shards.increments import published_changes
from pooltree.shards.pickling import dumps, loads, snapshot_of
from pooltree.shards.replica import Published, PublishedChanges, ReplicaBehind, TreeReplica
from pooltree.strategy.scheduler import TreeScheduler
from pooltree.strategy.snapshot import ROOT_ID, ElementSpec, SchedulingTree, SpecRows

TOTAL = np.array([10.0, 1e10, 0.0, 0.0, 10.0])


def _first() -> SchedulingTree:
    return SchedulingTree(
        TOTAL,
        [
            ElementSpec("a", ROOT_ID, fair_share=np.full(5, 0.5), demand_share=np.full(5, 0.6)),
            ElementSpec("b", ROOT_ID, fair_share=np.full(5, 0.5), demand_share=np.full(5, 0.4)),
            ElementSpec("c", "b", fair_share=np.full(5, 0.25), demand_share=np.full(5, 0.2)),
        ],
    )


def _derived(base: SchedulingTree, hinted: bool = True) -> SchedulingTree:
    """``base`` with new shares for ``a`` and ``c``, as the builder derives it (`SchedulingTree.with_shares`)."""
    rows = SpecRows()
    rows.base = base
    rows.replaced = [
        dataclasses.replace(base.elements["a"], fair_share=np.full(5, 0.3)),
        dataclasses.replace(base.elements["c"], demand_share=np.full(5, 0.35)),
    ]
    tree = base.with_shares(TOTAL * 2, rows)
    if not hinted:
        tree.respecced = None
    return tree


def _settings(tree: SchedulingTree, now: float) -> Published:
    return Published(tree, now, frozenset(), frozenset(), False)


def _replica(truth: TreeScheduler, published: int | None) -> TreeReplica:
    replica = TreeReplica(
        "default",
        lambda claim: pytest.fail("no claim"),
        lambda *args: None,
        lambda address: True,
        lambda query: pytest.fail("no class query"),
    )
    replica.load(snapshot_of(truth, lambda operation_id: pytest.fail("no operation")), published)
    return replica


def _assert_shares_as_truth(strategy: TreeScheduler, truth: TreeScheduler) -> None:
    """Every element of the replica's strategy has the truth's fair share, demand share and usage."""
    for element_id, element in truth.state.elements.items():
        copied = strategy.state.elements[element_id]
        assert (copied.fair_share, copied.demand_share, copied.usage) == (
            element.fair_share,
            element.demand_share,
            element.usage,
        )


@pytest.mark.parametrize("hinted", [True, False])
def test_the_replica_derives_the_tree_from_its_own_and_ends_as_the_truth(hinted: bool) -> None:
    first = _first()
    truth = TreeScheduler(first)
    truth.publish(first, 1.0)
    replica = _replica(truth, 1)
    second = _derived(first, hinted)
    changes = published_changes(_settings(second, 2.0), first, 1, 2)
    assert changes is not None
    assert sorted(spec.id for spec in changes.replaced) == ["a", "c"]
    own = replica.strategy.state.tree  # type: ignore[union-attr]
    replica.apply([loads(dumps(changes))])
    truth.publish(second, 2.0)
    strategy = replica.strategy
    assert strategy is not None
    derived = strategy.state.tree
    # the structure and the unchanged spec are the replica's own objects: its publish was incremental
    assert derived.skeleton is own.skeleton and derived.children is own.children
    assert derived.elements["b"] is own.elements["b"]
    assert strategy.publisher.skeleton is own.skeleton
    assert replica.published_serial == 2 and replica.published_changes == 1
    assert np.array_equal(derived.total_resources, second.total_resources)
    _assert_shares_as_truth(strategy, truth)
    for element_id in truth.state.elements:
        assert np.array_equal(derived.elements[element_id].fair_share, second.elements[element_id].fair_share)


def test_a_replica_holding_another_base_refuses_the_changes() -> None:
    first = _first()
    truth = TreeScheduler(first)
    truth.publish(first, 1.0)
    changes = published_changes(_settings(_derived(first), 2.0), first, 1, 2)
    assert isinstance(changes, PublishedChanges)
    for held in (None, 7):
        replica = _replica(truth, held)
        with pytest.raises(ReplicaBehind):
            replica.apply([changes])


def test_operations_added_and_removed_are_derived_from_the_replicas_own_tree() -> None:
    first = SchedulingTree(
        TOTAL,
        [
            ElementSpec("a", ROOT_ID, fair_share=np.full(5, 0.5)),
            ElementSpec("b", ROOT_ID, fair_share=np.full(5, 0.5)),
            ElementSpec(
                "o1", "a", kind="operation", fair_share=np.full(5, 0.2), demand_share=np.full(5, 0.3)
            ),
            ElementSpec(
                "o2", "b", kind="operation", fair_share=np.full(5, 0.3), demand_share=np.full(5, 0.3)
            ),
        ],
    )
    truth = TreeScheduler(first)
    truth.publish(first, 1.0)
    replica = _replica(truth, 1)
    own = replica.strategy.state.tree  # type: ignore[union-attr]
    o3 = ElementSpec("o3", "a", kind="operation", fair_share=np.full(5, 0.1), demand_share=np.full(5, 0.4))
    o2 = dataclasses.replace(first.elements["o2"], fair_share=np.full(5, 0.25))
    kept = [first.elements[i] for i in (ROOT_ID, "a", "b")]
    second = first.with_operation_changes(TOTAL, [*kept, o2, o3], {"o1"}, ["o3"])
    changes = published_changes(_settings(second, 2.0), first, 1, 2)
    assert changes is not None and changes.operations is not None
    assert sorted(spec.id for spec in changes.replaced) == ["o2", "o3"]
    replica.apply([loads(dumps(changes))])
    truth.publish(second, 2.0)
    strategy = replica.strategy
    assert strategy is not None
    derived = strategy.state.tree
    # derived from the replica's own tree: its delta names the replica's skeleton (the publish's delta path), the
    # untouched parent's children and the unchanged elements' settings are its objects
    assert derived.delta is not None and derived.delta.base is own.skeleton
    assert strategy.publisher.skeleton is derived.skeleton
    assert derived.children["b"] is own.children["b"] and derived.effective["b"] is own.effective["b"]
    assert derived.elements["a"] is own.elements["a"]
    assert list(derived.elements) == list(second.elements) and derived.order == second.order
    assert derived.children == second.children and derived.depth == second.depth
    assert set(strategy.state.elements) == set(truth.state.elements) == {ROOT_ID, "a", "b", "o2", "o3"}
    _assert_shares_as_truth(strategy, truth)


def test_a_tree_of_another_structure_goes_whole() -> None:
    first = _first()
    rebuilt = SchedulingTree(TOTAL, [first.elements[i] for i in ("a", "b", "c")])
    assert published_changes(_settings(rebuilt, 2.0), first, 1, 2) is None
