"""Periods in which only operations changed (arrived, left, activated, suspended, moved, new parameters) under an
unchanged pool skeleton take the incremental path: the fair-share input re-makes only the changed operations'
elements and their pools' children lists, the build re-makes only their rows and derives the `SchedulingTree` from
the previous one (`with_operation_changes`), and `publish` keeps every other `_Element`. Seeded random sequences of
such changes (with pools whose running limits make operations wait and be activated) compare every input field,
every spec, the children lists, order, depths and effective settings, and every published element's state with
builds and publishes made from scratch each period.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from typing import Any

import numpy as np
import pytest

from pooltree.config import OperationSpec, parse_pool_trees
from pooltree.fairshare import update_fair_share
from pooltree.resources import vector
from pooltree.strategy.build import scheduling_tree_from_runtime
from pooltree.strategy.scheduler import TreeScheduler
from pooltree.strategy.snapshot import SchedulingTree, StrategyConfig
from pooltree.tree import PoolTree, build_fair_share_input
from tests.periods import Builds, InputReads
from tests.strategy.test_build_unchanged_structure import Usage, comparable, flat_input

GiB = 1024.0**3
TOTAL = vector(user_slots=100, cpu=100, memory=400 * GiB)
LEAVES = ["a1", "a2", "b", "c1", "c2", "a", "c"]


def definition() -> Any:
    document = {
        "config": {"fair_share_starvation_tolerance": 0.8, "max_running_operation_count_per_pool": 3},
        "pools": {
            "a": {
                "strong_guarantee_resources": {"cpu": 30},
                "max_running_operation_count": 4,
                "pools": {
                    "a1": {"fair_share_starvation_tolerance": 0.5, "resource_limits": {"cpu": 40}},
                    "a2": {"mode": "fifo", "allow_normal_preemption": False},
                },
            },
            "b": {"weight": 3, "enable_aggressive_starvation": True},
            "c": {
                "pools": {"c1": {"weight": 2}, "c2": {"non_preemptible_resource_usage_threshold": {"cpu": 5}}}
            },
        },
    }
    return parse_pool_trees({"physical": document})["physical"]


def positions(scheduler: TreeScheduler) -> dict[str, int]:
    """Each published element's position in the tree order, after checking that the elements' order keys
    (``index``, not positions: see `pooltree/strategy/order.py`) increase along that order and that every heap
    entry carries its element's key."""
    order = scheduler.tree.order
    assert sorted(scheduler.state.elements) == sorted(order)
    keys = [scheduler.state.elements[element_id].index for element_id in order]
    assert all(a < b for a, b in itertools.pairwise(keys)), "order keys do not follow the tree order"
    for element in scheduler.state.elements.values():
        for entry in element.heap:
            if entry[3] == entry[4].version and entry[4].active:
                assert entry[2] == entry[4].index, (element.id, entry[4].id)
    return {element_id: position for position, element_id in enumerate(order)}


def published(scheduler: TreeScheduler) -> list[tuple[Any, ...]]:
    """Every published element's state that a fresh publish determines, in tree order (an element's order key
    as its position in that order)."""
    rows = []
    position = positions(scheduler)
    for element_id in scheduler.tree.order:
        element = scheduler.state.elements[element_id]
        rows.append(
            (
                element_id,
                position[element_id],
                element.depth,
                None if element.parent is None else element.parent.id,
                [child.id for child in element.children],
                [limited.id for limited in element.limited],
                element.use_fifo,
                element.fair_share,
                element.demand_share,
                element.blocked,
                element.usage,
                element.limits,
                element.threshold_key,
                element.fifo_key,
                element.sat,
                element.active,
                element.status,
                element.starvation,
                element.inactive_reason,
                repr(element.settings),
                sorted(
                    (entry[0], entry[1], position[entry[4].id], entry[4].id)
                    for entry in element.heap
                    if entry[3] == entry[4].version and entry[4].active
                ),
            )
        )
    return rows


class Periods:
    """The cached path (caches kept between periods) against everything built anew, period by period."""

    def __init__(self, tree: PoolTree, usage: Usage):
        self.tree = tree
        self.usage = usage
        self.input_cache = InputReads()
        self.build_cache = Builds()
        self.config = StrategyConfig.from_options(tree.config)
        self.cached = TreeScheduler(SchedulingTree(TOTAL, [], self.config))
        self.fresh = TreeScheduler(SchedulingTree(TOTAL, [], self.config))
        self.derived = 0
        self.now = 0.0

    def run(self) -> SchedulingTree:
        tree, usage = self.tree, self.usage
        self.now += 1.0
        root, settings = self.input_cache.input(tree, usage)
        fresh_root, fresh_settings = build_fair_share_input(tree, usage)
        assert flat_input(root) == flat_input(fresh_root)
        result = update_fair_share(root, TOTAL, settings, self.now)
        fresh_result = update_fair_share(fresh_root, TOTAL, fresh_settings, self.now)
        built = self.build_cache.build(tree, result, TOTAL, self.config)
        fresh = scheduling_tree_from_runtime(tree, fresh_result, TOTAL, self.config)
        assert comparable(built) == comparable(fresh)
        assert list(built.elements) == list(fresh.elements)
        assert built.order == fresh.order
        assert built.children == fresh.children
        assert built.depth == fresh.depth
        assert built.effective.keys() == fresh.effective.keys()
        for key, settings_value in fresh.effective.items():
            assert repr(built.effective[key]) == repr(settings_value), key
        if built.delta is not None:
            self.derived += 1
        self.cached.publish(built, self.now)
        self.fresh.publish(fresh, self.now)
        assert published(self.cached) == published(self.fresh)
        assert self.cached.starvation == self.fresh.starvation
        return built


def random_changes(rng: random.Random, tree: PoolTree, usage: Usage, counter: list[int]) -> None:
    """One period's worth of operation changes through the tree's API (pools never change)."""
    registered = list(tree.operations)
    for _ in range(rng.randint(0, 3)):
        action = rng.random()
        if action < 0.4 or not registered:
            counter[0] += 1
            op_id = f"op{counter[0]}"
            pool = rng.choice(LEAVES)
            extra: dict[str, Any] = {}
            if rng.random() < 0.2:
                extra["preemption_mode"] = "graceful"
            if rng.random() < 0.2:
                extra["enable_aggressive_starvation"] = True
            try:
                tree.register_operation(
                    op_id,
                    user=f"u{counter[0] % 3}",
                    pool=pool,
                    spec=OperationSpec.model_validate({"pool": pool, **extra}),
                    weight=rng.choice([None, 1.0, 2.5]),
                    now=float(counter[0]),
                )
            except Exception:  # a full pool refuses: nothing changed
                continue
            usage.set(op_id, rng.randint(0, 4), rng.randint(0, 8))
            registered.append(op_id)
        elif action < 0.7:
            op_id = registered.pop(rng.randrange(len(registered)))
            tree.unregister_operation(op_id)  # may activate pending operations
            usage.values.pop(op_id, None)
        elif action < 0.8:
            op_id = rng.choice(registered)
            tree.set_operation_suspended(op_id, not tree.operation(op_id).suspended)
        elif action < 0.9:
            op_id = rng.choice(registered)
            try:
                update = tree.prepare_parameters_update(
                    op_id, weight=rng.choice([1.0, 4.0]), resource_limits={"cpu": rng.randint(1, 20)}
                )
            except Exception:
                continue
            tree.commit_parameters_update(update)
        else:
            op_id = rng.choice(registered)
            try:
                update = tree.prepare_parameters_update(op_id, pool=rng.choice(LEAVES))
            except Exception:  # the new pool's limits refuse the move
                continue
            tree.commit_parameters_update(update)
    for op_id in list(usage.values):
        if rng.random() < 0.3:
            usage.set(op_id, rng.randint(0, 4), rng.randint(0, 8))


@pytest.mark.parametrize("seed", range(6))
def test_operation_changes_build_and_publish_what_a_fresh_build_gives(seed):
    rng = random.Random(seed)
    tree = PoolTree(definition())
    usage = Usage()
    periods = Periods(tree, usage)
    counter = [0]
    for _ in range(40):
        random_changes(rng, tree, usage, counter)
        periods.run()
    # most periods changed operations under the same pools: the derived path ran, not the walk
    assert periods.derived >= 15


def test_a_changed_pool_or_a_lost_journal_walks_the_whole_tree():
    tree = PoolTree(definition())
    usage = Usage()
    periods = Periods(tree, usage)
    for index in range(4):
        tree.register_operation(
            f"op{index}", user="u", pool=LEAVES[index], spec=OperationSpec.model_validate({})
        )
        usage.set(f"op{index}", index, 3)
    periods.run()
    revision = tree.revision
    tree.register_operation("late", user="u", pool="b", spec=OperationSpec.model_validate({}))
    assert tree.operations_changed_since(revision) == {"late"}
    assert periods.run().delta is not None
    # an ephemeral pool is a change of the pools: the walk runs
    tree.register_operation("eph", user="newcomer", spec=OperationSpec.model_validate({}))
    revision_before = tree.revision
    assert tree.operations_changed_since(revision_before - 2) is None
    assert periods.run().delta is None
    # a revision bumped from outside the journal (a gap) is never taken for a complete list
    tree.revision += 1
    assert tree.operations_changed_since(revision_before) is None
    assert periods.run().delta is None
    tree.unregister_operation("op1")
    assert periods.run().delta is not None


def test_plain_map_spec_arriving_falls_back_to_the_walk():
    tree = PoolTree(definition())
    usage = Usage()
    periods = Periods(tree, usage)
    tree.register_operation("op1", user="u", pool="b", spec=OperationSpec.model_validate({}))
    periods.run()
    tree.register_operation("plain", user="u", pool="b", spec={"pool": "b"})
    usage.set("plain", 1, 2)
    assert periods.run().delta is None
    tree.unregister_operation("plain")
    assert periods.run().delta is None  # the previous build was not cacheable
    tree.register_operation("op2", user="u", pool="a1", spec=OperationSpec.model_validate({}))
    assert periods.run().delta is not None
    assert not math.isnan(sum(periods.run().elements["op2"].fair_share.tolist()))
    assert dataclasses.is_dataclass(periods.run().elements["op2"])
    assert np.all(np.isfinite(periods.run().elements["op1"].fair_share))
