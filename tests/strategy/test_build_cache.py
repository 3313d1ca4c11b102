"""Builds kept period after period (`tests.periods.Builds`: a `KeptState`) with array reads equal a fresh, per-element build.

The cache keeps each element's static spec part keyed by the objects it was computed from; these tests change
each of those inputs between builds (a new tree config, a pool's threshold and limits, an operation's limits in
place, suspension, a spec with a tag filter, arrivals and departures) and compare every spec field with a build
that has no cache and reads the result through the plain mapping of `ElementResult`s.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from pooltree.config import parse_pool_trees
from pooltree.fairshare import update_fair_share
from pooltree.resources import vector
from pooltree.strategy.build import scheduling_tree_from_runtime
from pooltree.strategy.snapshot import SchedulingTree
from pooltree.tree import PoolTree, build_fair_share_input
from tests.periods import Builds

GiB = 1024.0**3
TOTAL = vector(user_slots=100, cpu=100, memory=400 * GiB)


def pools(threshold_cpu: float, limit_cpu: float) -> dict[str, Any]:
    return {
        "a": {
            "strong_guarantee_resources": {"cpu": 30},
            "non_preemptible_resource_usage_threshold": {"cpu": threshold_cpu},
            "pools": {
                "a1": {"fair_share_starvation_tolerance": 0.5, "resource_limits": {"cpu": limit_cpu}},
                "a2": {"mode": "fifo", "allow_normal_preemption": False},
            },
        },
        "b": {"weight": 3, "enable_aggressive_starvation": True, "fair_share_starvation_timeout": 20000},
    }


def definition(threshold_cpu: float = 5, limit_cpu: float = 40, tolerance: float = 0.8) -> Any:
    document = {
        "config": {"fair_share_starvation_tolerance": tolerance},
        "pools": pools(threshold_cpu, limit_cpu),
    }
    return parse_pool_trees({"physical": document})["physical"]


def usage(_operation_id: str) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(5), vector(user_slots=10, cpu=10, memory=10 * GiB)


def fair_share(tree: PoolTree) -> Any:
    root, settings = build_fair_share_input(tree, usage)
    return update_fair_share(root, TOTAL, settings, 0.0)


def comparable(tree: SchedulingTree) -> dict[str, dict[str, Any]]:
    """Every spec field as plain values (vectors as lists, tag filters by the tags they accept)."""
    out: dict[str, dict[str, Any]] = {}
    for element_id, spec in tree.elements.items():
        row: dict[str, Any] = {}
        for field in dataclasses.fields(spec):
            value = getattr(spec, field.name)
            if isinstance(value, np.ndarray):
                value = [None if math.isnan(x) else x for x in value.tolist()]
            elif field.name == "scheduling_tag_filter" and value is not None:
                value = (value.matches({"gpu"}), value.matches({"ssd"}), value.matches(set()))
            row[field.name] = value
        out[element_id] = row
    return out


def check(tree: PoolTree, cache: Builds) -> SchedulingTree:
    result = fair_share(tree)
    cached = cache.build(tree, result, TOTAL)
    fresh = scheduling_tree_from_runtime(
        tree, dataclasses.replace(result, elements=dict(result.elements)), TOTAL
    )
    assert comparable(cached) == comparable(fresh)
    assert cached.order == fresh.order
    assert {k: dataclasses.asdict(v) for k, v in cached.effective.items()}.keys() == fresh.effective.keys()
    for element_id, settings in cached.effective.items():
        other = fresh.effective[element_id]
        assert settings.starvation_tolerance == other.starvation_tolerance
        assert settings.allow_aggressive_preemption == other.allow_aggressive_preemption
        mine, theirs = settings.non_preemptible_threshold, other.non_preemptible_threshold
        assert (mine is None) == (theirs is None)
        if mine is not None:
            assert mine.tolist() == theirs.tolist()
    return cached


def test_cached_build_equals_fresh_build_through_changes():
    tree = PoolTree(definition())
    cache = Builds()
    tree.register_operation("op1", user="u", pool="a1", spec={"scheduling_tag_filter": "gpu"})
    tree.register_operation("op2", user="u", pool="a2", resource_limits={"cpu": 7})
    tree.register_operation("op3", user="u", pool="b", spec={"max_unpreemptible_allocation_count": 2})
    first = check(tree, cache)
    static_a1 = cache.projection.pools["a1"].row
    static_op2 = cache.projection.operations["op2"].row
    assert first.elements["a1"].specified_resource_limits.tolist()[1] == 40
    assert first.elements["a"].non_preemptible_resource_usage_threshold.tolist()[1] == 5
    # nothing changed: the static parts are reused as they are
    check(tree, cache)
    assert (
        cache.projection.pools["a1"].row is static_a1 and cache.projection.operations["op2"].row is static_op2
    )
    # an operation's limits changed in place, then it is suspended
    tree.operation("op2").resource_limits[1] = 3.0
    assert check(tree, cache).elements["op2"].specified_resource_limits.tolist()[1] == 3.0
    tree.set_operation_suspended("op2", True)
    assert check(tree, cache).elements["op2"].schedulable is False
    # new pool options and a new tree-wide tolerance (every config object is replaced)
    tree.apply_config(definition(threshold_cpu=9, limit_cpu=25, tolerance=0.6))
    changed = check(tree, cache)
    assert changed.elements["a1"].specified_resource_limits.tolist()[1] == 25
    assert changed.elements["a"].non_preemptible_resource_usage_threshold.tolist()[1] == 9
    assert changed.effective["b"].starvation_tolerance == 0.6
    # arrivals and departures: entries of gone operations are dropped
    tree.unregister_operation("op1")
    tree.register_operation("op4", user="v", pool="a1", spec={"preemption_mode": "graceful"})
    latest = check(tree, cache)
    assert "op1" not in cache.projection.operations and latest.elements["op4"].preemption_mode == "graceful"


def test_cached_vectors_are_read_only():
    tree = PoolTree(definition())
    tree.register_operation("op1", user="u", pool="a1", resource_limits={"cpu": 7})
    built = check(tree, Builds())
    limits = built.elements["op1"].specified_resource_limits
    assert limits is not None and not limits.flags.writeable
