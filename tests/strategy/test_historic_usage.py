"""A pool's ``infer_children_weights_from_historic_usage`` in the core that the simulator and the live service
drive (issue 30; the rule itself: ``tests/fairshare/test_historic_usage_weights.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from strategykit import register_vanilla

from pooltree.config import parse_pool_trees
from pooltree.controllers.operations import TaskSpec
from pooltree.resources import vector
from pooltree.strategy import NodeHeartbeat
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

GIB = 1024.0**3
NODE = vector(user_slots=10, cpu=10, memory=100 * GIB)


def _max_new_share(infer: bool) -> float:
    """YTsaurus's ``test_more_fair_share_for_new_operation_equal_demand`` in the core that the simulator and the
    live service drive: child1's operation fills the node, then child2's arrives with the same demand."""
    parent: dict[str, Any] = {"pools": {"child1": {}, "child2": {}}}
    if infer:
        parent["infer_children_weights_from_historic_usage"] = True
    trees = parse_pool_trees({"default": {"pools": {"parent": parent}}})
    core = SchedulerCore(PoolTree(trees["default"]))
    core.add_node("n0", NODE)
    job = vector(user_slots=1, cpu=1, memory=GIB)
    register_vanilla(core, "op1", "child1", [TaskSpec("main", 10, job)], now=0.0)
    for t in range(3):
        core.update_fair_share(float(t))
        core.process_heartbeat(NodeHeartbeat("n0", NODE), float(t))
    register_vanilla(core, "op2", "child2", [TaskSpec("main", 10, job)], now=3.0)
    best = 0.0
    for t in range(3, 6):
        result = core.update_fair_share(float(t))
        best = max(best, float(result.elements["child2"].fair_share[1]))
    return best


def test_new_operation_gets_more_than_half_in_the_core() -> None:
    assert _max_new_share(False) == pytest.approx(0.5)
    # child1's samples, one per update (each second): 0 (before the first heartbeat), then 1 five times; the
    # half-life is 10 s. The largest share is at the last update, where child1's average is the highest.
    samples = [0.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    decay = [2.0 ** (-(len(samples) - 1 - i) / 10.0) for i in range(len(samples))]
    average = sum(d * v for d, v in zip(decay, samples, strict=True)) / sum(decay)
    assert _max_new_share(True) == pytest.approx(1.0 / (1.0 + 2.0**-average), rel=1e-9)
    assert _max_new_share(True) > 0.6
