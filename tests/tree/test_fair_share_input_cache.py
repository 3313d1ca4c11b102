"""Reads kept period after period (`tests.periods.InputReads`: a `KeptState`) build exactly the input of a fresh build.

The cache keeps each element's model object while the runtime objects it was computed from are unchanged and
writes only usage, demand and pending counts into it. These tests change every such input between builds
(usage, an operation's limits in place, suspension set directly on the operation, a parameters update, a new
tree config, a frozen spec and a plain-map spec, a node set with a tag filter, arrivals and departures) and
compare every field of every element with a build without the cache.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from pooltree.config import OperationSpec, parse_pool_trees
from pooltree.fairshare.model import Operation, Pool
from pooltree.resources import vector
from pooltree.tree import PoolTree, build_fair_share_input
from tests.periods import InputReads

GiB = 1024.0**3


def definition(weight: float = 3, tolerance: float = 0.8) -> Any:
    document = {
        "config": {"fair_share_starvation_tolerance": tolerance},
        "pools": {
            "a": {
                "strong_guarantee_resources": {"cpu": 30},
                "pools": {
                    "a1": {"fair_share_starvation_tolerance": 0.5, "resource_limits": {"cpu": 40}},
                    "a2": {"mode": "fifo", "scheduling_tag_filter": "gpu"},
                },
            },
            "b": {"weight": weight},
        },
    }
    return parse_pool_trees({"physical": document})["physical"]


def flat(root: Pool) -> dict[str, dict[str, Any]]:
    """Every field of every element as plain values (children by id)."""
    out: dict[str, dict[str, Any]] = {}
    stack: list[Any] = [root]
    while stack:
        element = stack.pop()
        row: dict[str, Any] = {}
        for name in _fields(element):
            value = getattr(element, name)
            if isinstance(value, np.ndarray):
                value = ["nan" if math.isnan(x) else x for x in value.tolist()]
            elif name == "children":
                stack.extend(value)
                value = [child.id for child in value]
            elif name == "integral_guarantees":
                value = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in vars(value).items()}
            row[name] = value
        out[element.id] = row
    return out


def _fields(element: Any) -> list[str]:
    return [field.name for field in dataclasses.fields(element)]


class Usage:
    """Operation id → (usage, needed), changed by the tests between builds."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def __call__(self, operation_id: str) -> tuple[np.ndarray, np.ndarray] | None:
        return self.values.get(operation_id)


def check(tree: PoolTree, usage: Usage, cache: InputReads, nodes: Any) -> Pool:
    cached, cached_settings = cache.input(tree, usage, nodes=nodes)
    fresh, fresh_settings = build_fair_share_input(tree, usage, nodes=nodes)
    assert flat(cached) == flat(fresh)
    assert vars(cached_settings) == vars(fresh_settings)
    return cached


def test_cached_input_equals_fresh_input_through_changes():
    tree = PoolTree(definition())
    usage = Usage()
    cache = InputReads()
    nodes = {
        "n1": (frozenset({"gpu"}), vector(user_slots=8, cpu=8, memory=32 * GiB)),
        "n2": (frozenset(), vector(user_slots=8, cpu=16, memory=64 * GiB)),
    }
    frozen = OperationSpec.model_validate({"pool": "a1", "max_share_ratio": 0.5})
    tree.register_operation("op1", user="u", pool="a1", spec=frozen)
    tree.register_operation("op2", user="u", pool="a2", resource_limits={"cpu": 7})
    tree.register_operation("op3", user="u", pool="b", spec={"scheduling_tag_filter": "gpu"})
    usage.values["op1"] = (vector(user_slots=2, cpu=2), vector(user_slots=3, cpu=3))
    first = check(tree, usage, cache, nodes)
    op1 = next(child for child in first.children[0].children[0].children if child.id == "op1")
    assert isinstance(op1, Operation) and op1.max_share_ratio == 0.5
    # a plain-map spec may change in place: its operation's model element is never kept
    projected = cache.projection.operations
    assert projected["op1"].input is not None and projected["op3"].input is None
    # usage moves: the same object gets the new vectors
    usage.values["op1"] = (vector(user_slots=4, cpu=4), vector(user_slots=1, cpu=1))
    usage.values["op2"] = (vector(user_slots=1, cpu=1), vector())
    again = check(tree, usage, cache, nodes)
    assert (
        cache.projection.operations["op1"].input is op1
        and op1.usage.tolist()[1] == 4
        and op1.demand.tolist()[1] == 5
    )
    assert again.children[0] is first.children[0]
    # limits changed in place, suspension set directly, a parameters update
    tree.operation("op2").resource_limits[1] = 3.0
    check(tree, usage, cache, nodes)
    tree.operation("op1").suspended = True
    suspended = check(tree, usage, cache, nodes)
    assert flat(suspended)["op1"]["schedulable"] is False
    tree.operation("op1").suspended = False
    update = tree.prepare_parameters_update("op1", weight=5.0)
    tree.commit_parameters_update(update)
    assert flat(check(tree, usage, cache, nodes))["op1"]["weight"] == 5.0
    # the node set changes (tag-filter limits), then a new config replaces every pool config
    nodes = dict(nodes) | {"n3": (frozenset({"gpu"}), vector(user_slots=8, cpu=8, memory=32 * GiB))}
    tagged = flat(check(tree, usage, cache, nodes))
    assert tagged["a2"]["tag_filter_resource_limits"][1] == 16
    tree.apply_config(definition(weight=7, tolerance=0.6))
    changed = flat(check(tree, usage, cache, nodes))
    assert changed["b"]["weight"] == 7 and changed["<Root>"]["starvation_tolerance"] == 0.6
    # arrivals and departures: entries of gone operations are dropped
    tree.unregister_operation("op3")
    tree.register_operation("op4", user="v", pool="a1")
    check(tree, usage, cache, nodes)
    assert "op2" in cache.projection.operations and "op4" in cache.projection.operations
    tree.unregister_operation("op2")
    check(tree, usage, cache, nodes)
    assert "op2" not in cache.projection.operations
