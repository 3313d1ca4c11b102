"""The per-period fast paths for a pool tree whose ``revision`` is unchanged give exactly the full build.

`build_fair_share_input` reuses the whole previous input (writing only changed usage and demand) and
`scheduling_tree_from_runtime` reuses the previous specs, re-creating only those whose published shares changed.
These tests run fair-share updates with usage moving between them, with and without structural changes (a
suspension, a parameters update, an arrival, a new config), and compare every input field and every spec field
with builds that have no cache.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from pooltree.config import OperationSpec, parse_pool_trees
from pooltree.fairshare import update_fair_share
from pooltree.resources import vector
from pooltree.strategy.build import scheduling_tree_from_runtime
from pooltree.strategy.snapshot import SchedulingTree, StrategyConfig
from pooltree.tree import PoolTree, build_fair_share_input
from tests.periods import Builds, InputReads

GiB = 1024.0**3
TOTAL = vector(user_slots=100, cpu=100, memory=400 * GiB)


def definition(weight: float = 3) -> Any:
    document = {
        "config": {"fair_share_starvation_tolerance": 0.8},
        "pools": {
            "a": {
                "strong_guarantee_resources": {"cpu": 30},
                "pools": {
                    "a1": {"fair_share_starvation_tolerance": 0.5, "resource_limits": {"cpu": 40}},
                    "a2": {"mode": "fifo"},
                },
            },
            "b": {"weight": weight},
        },
    }
    return parse_pool_trees({"physical": document})["physical"]


class Usage:
    """Operation id → (usage, needed); a new tuple whenever a value changes."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def set(self, operation_id: str, running: float, pending: float) -> None:
        self.values[operation_id] = (
            vector(user_slots=running, cpu=running, memory=running * GiB),
            vector(user_slots=pending, cpu=pending, memory=pending * GiB),
        )

    def __call__(self, operation_id: str) -> tuple[np.ndarray, np.ndarray] | None:
        return self.values.get(operation_id)


def flat_input(root: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    stack = [root]
    while stack:
        element = stack.pop()
        row: dict[str, Any] = {}
        for field in dataclasses.fields(element):
            value = getattr(element, field.name)
            if isinstance(value, np.ndarray):
                value = ["nan" if math.isnan(x) else x for x in value.tolist()]
            elif field.name == "children":
                stack.extend(value)
                value = [child.id for child in value]
            elif field.name == "integral_guarantees":
                value = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in vars(value).items()}
            row[field.name] = value
        out[element.id] = row
    return out


def comparable(tree: SchedulingTree) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for element_id, spec in tree.elements.items():
        row: dict[str, Any] = {}
        for field in dataclasses.fields(spec):
            value = getattr(spec, field.name)
            if isinstance(value, np.ndarray):
                value = [None if math.isnan(x) else x for x in value.tolist()]
            elif field.name == "scheduling_tag_filter" and value is not None:
                value = (value.matches({"gpu"}), value.matches(set()))
            row[field.name] = value
        out[element_id] = row
    return out


class Step:
    def __init__(self, tree: PoolTree, usage: Usage):
        self.tree = tree
        self.usage = usage
        self.input_cache = InputReads()
        self.build_cache = Builds()
        self.last: SchedulingTree | None = None
        self.config = StrategyConfig.from_options(tree.config)

    def run(self) -> tuple[Any, SchedulingTree]:
        tree, usage = self.tree, self.usage
        root, settings = self.input_cache.input(tree, usage)
        fresh_root, fresh_settings = build_fair_share_input(tree, usage)
        assert flat_input(root) == flat_input(fresh_root)
        assert vars(settings) == vars(fresh_settings)
        result = update_fair_share(root, TOTAL, settings, 0.0)
        fresh_result = update_fair_share(fresh_root, TOTAL, fresh_settings, 0.0)
        if self.config.fair_share_starvation_tolerance != tree.config.fair_share_starvation_tolerance:
            self.config = StrategyConfig.from_options(tree.config)
        built = self.build_cache.build(tree, result, TOTAL, self.config)
        fresh = scheduling_tree_from_runtime(
            tree, dataclasses.replace(fresh_result, elements=dict(fresh_result.elements)), TOTAL
        )
        assert comparable(built) == comparable(fresh)
        assert built.order == fresh.order
        self.last = built
        return root, built


def spec(pool: str, **extra: Any) -> OperationSpec:
    return OperationSpec.model_validate({"pool": pool, **extra})


def test_unchanged_revision_reuses_input_and_specs_exactly():
    tree = PoolTree(definition())
    usage = Usage()
    tree.register_operation("op1", user="u", pool="a1", spec=spec("a1", max_share_ratio=0.5))
    tree.register_operation("op2", user="u", pool="a2", spec=spec("a2"), now=1.0)
    tree.register_operation("op3", user="u", pool="a2", spec=spec("a2"), now=2.0)
    tree.register_operation("op4", user="v", pool="b", spec=spec("b", scheduling_tag_filter="gpu"))
    for index, op_id in enumerate(["op1", "op2", "op3", "op4"]):
        usage.set(op_id, index, 10 + index)
    step = Step(tree, usage)
    first_root, first = step.run()
    # nothing changed: the same input objects and the very same specs
    root, again = step.run()
    assert root is first_root
    assert all(again.elements[key] is first.elements[key] for key in first.elements)
    # usage moves for one operation: the input is rewritten for it; specs change where shares changed
    usage.set("op1", 8, 12)
    root, moved = step.run()
    assert root is first_root
    assert moved.elements["op1"] is not first.elements["op1"]
    assert moved.elements["op1"].fair_share.tolist() != first.elements["op1"].fair_share.tolist()
    # structural changes through the tree's API bump its revision: full builds, then fast again
    revision = tree.revision
    tree.set_operation_suspended("op2", True)
    assert tree.revision > revision
    _, suspended = step.run()
    assert suspended.elements["op2"].schedulable is False
    tree.set_operation_suspended("op2", False)
    tree.commit_parameters_update(
        tree.prepare_parameters_update("op3", weight=4.0, resource_limits={"cpu": 3})
    )
    step.run()
    tree.register_operation("op5", user="w", pool="a1", spec=spec("a1"), now=3.0)
    usage.set("op5", 0, 5)
    root, arrived = step.run()
    assert "op5" in arrived.elements and "op5" in flat_input(root)
    tree.apply_config(definition(weight=7))
    step.run()
    usage.set("op4", 0, 0)
    step.run()
    tree.unregister_operation("op1")
    step.run()
    step.run()


def test_plain_map_specs_keep_the_per_element_walk():
    """A plain-map spec may change in place without a revision: no fast path while one is in the tree."""
    tree = PoolTree(definition())
    usage = Usage()
    plain = {"pool": "b", "max_share_ratio": 1.0}
    tree.register_operation("op1", user="u", pool="b", spec=plain)
    usage.set("op1", 1, 10)
    step = Step(tree, usage)
    step.run()
    plain["max_share_ratio"] = 0.1
    root, built = step.run()
    assert flat_input(root)["op1"]["max_share_ratio"] == 0.1
    assert built.elements["op1"].fair_share.tolist()[1] <= 0.1
