"""The same-structure build re-makes exactly the specs whose published values changed, and nothing else.

Seeded runs on a three-level tree: in most periods a few operations' usage moves (what a 1 s period of the
simulated day sees), in some operations arrive, leave or are suspended. Each build of the cached path
(`tests.periods.Builds` kept between periods, results read in bulk) is compared field by field, and in key order, with a
build from scratch of the same result read element by element; in periods under the same structure, an element's
spec must be the previous tree's very object exactly when its published values (shares, status, weight, FIFO
index) are unchanged. A changed row that the incremental build skipped shows as a stale spec; a row re-made
without a change shows as a new object.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import numpy as np
import pytest

from pooltree.config import OperationSpec, parse_pool_trees
from pooltree.fairshare import update_fair_share
from pooltree.resources import vector
from pooltree.strategy.build import scheduling_tree_from_runtime
from pooltree.strategy.snapshot import ROOT_ID, ElementSpec, SchedulingTree, SpecRows, StrategyConfig
from pooltree.tree import PoolTree
from tests.periods import Builds, InputReads
from tests.strategy.test_build_unchanged_structure import Usage, comparable

GiB = 1024.0**3
TOTAL = vector(user_slots=200, cpu=200, memory=800 * GiB)


def definition(seed: int) -> tuple[Any, list[str]]:
    rng = random.Random(seed)
    pools: dict[str, Any] = {}
    leaves: list[str] = []
    for top in range(4):
        children: dict[str, Any] = {}
        for mid in range(3):
            name = f"p{top}-{mid}"
            config: dict[str, Any] = {"weight": rng.choice([1, 2, 3])}
            if rng.random() < 0.25:
                config["mode"] = "fifo"
            if rng.random() < 0.25:
                config["resource_limits"] = {"cpu": rng.randint(10, 60)}
            children[name] = config
            leaves.append(name)
        pools[f"p{top}"] = {
            "weight": rng.choice([1, 2]),
            "strong_guarantee_resources": {"cpu": rng.choice([0, 10, 30])},
            "pools": children,
        }
    config = {"fair_share_starvation_tolerance": 0.8, "max_running_operation_count_per_pool": 40}
    document = {"config": config, "pools": pools}
    return parse_pool_trees({"physical": document})["physical"], leaves


def published_values(spec: ElementSpec) -> tuple[Any, ...]:
    return (
        spec.fair_share.tolist(),
        None if spec.demand_share is None else spec.demand_share.tolist(),
        spec.scheduling_status,
        spec.weight,
        spec.fifo_index,
    )


class Periods:
    def __init__(self, tree: PoolTree, usage: Usage):
        self.tree = tree
        self.usage = usage
        self.input_cache = InputReads()
        self.build_cache = Builds()
        self.config = StrategyConfig.from_options(tree.config)
        self.last: SchedulingTree | None = None
        self.same_structure = 0
        self.respecced = 0
        self.derived = 0
        self.now = 0.0

    def run(self) -> SchedulingTree:
        self.now += 1.0
        root, settings = self.input_cache.input(self.tree, self.usage)
        result = update_fair_share(root, TOTAL, settings, self.now)
        built = self.build_cache.build(self.tree, result, TOTAL, self.config)
        # the same result read element by element (no arrays), without a cache: the full walk
        fresh = scheduling_tree_from_runtime(
            self.tree, dataclasses.replace(result, elements=dict(result.elements)), TOTAL, self.config
        )
        assert comparable(built) == comparable(fresh)
        assert list(built.elements) == list(fresh.elements)
        assert built.order == fresh.order
        assert built.children == fresh.children
        assert built.depth == fresh.depth
        assert {key: repr(value) for key, value in built.effective.items()} == {
            key: repr(value) for key, value in fresh.effective.items()
        }
        self.derived += built.delta is not None
        last = self.last
        if last is not None and built.skeleton is last.skeleton:
            self.same_structure += 1
            for key, spec in built.elements.items():
                unchanged = published_values(spec) == published_values(last.elements[key])
                assert (spec is last.elements[key]) == unchanged, key
                self.respecced += not unchanged
        self.last = built
        return built


def move_usage(rng: random.Random, usage: Usage, count: int) -> None:
    for op_id in rng.sample(sorted(usage.values), min(count, len(usage.values))):
        running = float(usage.values[op_id][0][1])
        pending = float(usage.values[op_id][1][1])
        if pending >= 1 and (running < 1 or rng.random() < 0.5):
            usage.set(op_id, running + 1, pending - 1)  # a job starts
        elif running >= 1:
            usage.set(op_id, running - 1, pending)  # a job ends (demand falls)
        else:
            usage.set(op_id, 0, rng.randint(1, 6))  # new work


def change_operations(
    rng: random.Random, tree: PoolTree, usage: Usage, leaves: list[str], counter: list[int]
):
    action = rng.random()
    registered = list(tree.operations)
    if action < 0.5 or len(registered) < 10:
        counter[0] += 1
        op_id = f"late{counter[0]}"
        pool = rng.choice(leaves)
        tree.register_operation(
            op_id,
            user="u",
            pool=pool,
            spec=OperationSpec.model_validate({"pool": pool}),
            now=1000.0 + counter[0],
        )
        usage.set(op_id, rng.randint(0, 3), rng.randint(0, 6))
    elif action < 0.8:
        op_id = rng.choice(registered)
        tree.unregister_operation(op_id)
        usage.values.pop(op_id, None)
    else:
        op_id = rng.choice(registered)
        tree.set_operation_suspended(op_id, not tree.operation(op_id).suspended)


@pytest.mark.parametrize("seed", range(3))
def test_incremental_build_equals_a_build_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    tree_config, leaves = definition(seed)
    tree = PoolTree(tree_config)
    usage = Usage()
    for index in range(120):
        pool = rng.choice(leaves)
        op_id = f"op{index:03d}"
        tree.register_operation(
            op_id,
            user=f"u{index % 7}",
            pool=pool,
            spec=OperationSpec.model_validate({"pool": pool}),
            now=index,
        )
        usage.set(op_id, rng.randint(0, 4), rng.randint(0, 8))
    periods = Periods(tree, usage)
    counter = [0]
    periods.run()
    for period in range(45):
        if period % 5 == 3:
            change_operations(rng, tree, usage, leaves, counter)
        move_usage(rng, usage, rng.choice([1, 2, 3, 10]))
        periods.run()
    assert periods.same_structure >= 30
    assert periods.derived >= 5  # operation changes took the derived path (`with_operation_changes`)
    assert periods.respecced > 0


def test_spec_rows_hint_gives_the_tree_of_the_plain_list() -> None:
    specs = [
        ElementSpec(id=ROOT_ID, parent=None, fair_share=np.ones(5)),
        ElementSpec(id="a", parent=ROOT_ID, fair_share=np.full(5, 0.5)),
        ElementSpec(id="op", parent="a", kind="operation", fair_share=np.full(5, 0.25)),
    ]
    base = SchedulingTree(TOTAL, specs)
    moved = dataclasses.replace(specs[2], fair_share=np.full(5, 0.125))
    rows = SpecRows([specs[0], specs[1], moved])
    rows.base = base
    rows.replaced = [moved]
    hinted = base.with_shares(TOTAL, rows)
    plain = base.with_shares(TOTAL, [specs[0], specs[1], moved])
    assert list(hinted.elements.items()) == list(plain.elements.items())
    assert hinted.elements is not base.elements and base.elements["op"] is specs[2]
    # a hint from another tree is not taken: the map is made from the list
    other = SchedulingTree(TOTAL, specs)
    rows.base = other
    assert base.with_shares(TOTAL, rows).elements["op"] is moved
    rows.base = base
    rows.replaced = [ElementSpec(id="stranger", parent="a")]
    with pytest.raises(ValueError, match="stranger"):
        base.with_shares(TOTAL, rows)


class PartialResult:
    """A result's elements with the rows of ``keep`` (result rows, in this order) only: what the bulk build reads
    (``arrays``, ``ids``, ``index``), and the mapping the element walk reads."""

    def __init__(self, elements: Any, keep: list[int]):
        arrays = elements.arrays
        new_row = {old: new for new, old in enumerate(keep)}
        self.arrays = {
            key: np.asarray(arrays[key])[keep] for key in ("fair_share", "demand_share", "below", "weight")
        }
        self.arrays["fifo_index"] = {
            new_row[old]: value for old, value in arrays["fifo_index"].items() if old in new_row
        }
        self.ids = [elements.ids[old] for old in keep]
        self.index = {element_id: row for row, element_id in enumerate(self.ids)}
        self.walk = {element_id: elements[element_id] for element_id in self.ids}


@pytest.mark.parametrize("seed", range(2))
def test_moved_and_missing_result_rows_give_a_build_from_scratch(seed: int) -> None:
    """Results whose rows are in another order (or lack an element) than the previous result's take the path
    that gathers every row in build order: the same specs as a build from scratch, unchanged ones kept."""
    rng = random.Random(seed)
    tree_config, leaves = definition(seed)
    tree = PoolTree(tree_config)
    usage = Usage()
    for index in range(40):
        pool = rng.choice(leaves)
        op_id = f"op{index:03d}"
        spec = OperationSpec.model_validate({"pool": pool})
        tree.register_operation(op_id, user="u", pool=pool, spec=spec, now=index)
        usage.set(op_id, rng.randint(0, 4), rng.randint(0, 8))
    input_cache = InputReads()
    cache = Builds()
    config = StrategyConfig.from_options(tree.config)
    last: SchedulingTree | None = None
    for period in range(12):
        move_usage(rng, usage, 2)
        root, settings = input_cache.input(tree, usage)
        result = update_fair_share(root, TOTAL, settings, float(period))
        count = len(result.elements.ids)
        keep = list(range(count))
        if period % 3 == 1:
            rng.shuffle(keep)
        elif period % 3 == 2:
            del keep[rng.randrange(1 + count // 2, count)]  # an operation missing from the result
        rows = PartialResult(result.elements, keep)
        built = cache.build(tree, dataclasses.replace(result, elements=rows), TOTAL, config)
        fresh = scheduling_tree_from_runtime(
            tree, dataclasses.replace(result, elements=rows.walk), TOTAL, config
        )
        assert comparable(built) == comparable(fresh)
        assert list(built.elements) == list(fresh.elements)
        if last is not None:
            assert built.skeleton is last.skeleton
            for key, spec in built.elements.items():
                unchanged = published_values(spec) == published_values(last.elements[key])
                if unchanged:
                    assert spec is last.elements[key], key
        last = built
