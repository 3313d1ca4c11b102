"""The tree's ``enable_absolute_fair_share_starvation_tolerance`` (issue 30): an operation whose missing share is
smaller than one of its allocations is not below its fair share.

One node of 10 cpu; operation ``b`` (pool b, weight 13) fills it with ten 1-cpu jobs, then ``a`` (pool a, weight
7) asks for 4-cpu jobs. ``a``'s fair share is 3.5 cpu: its gap (3.5 cpu) is below its smallest allocation (4 cpu),
so with the option it stays ``normal`` and nothing is preempted for it; without it, it is below fair share by the
relative rule (0 < 0.8 × 3.5 cpu), starves, and once aggressively starving takes 4 of ``b``'s aggressively
preemptible cpu."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from strategykit import register_vanilla

from pooltree.config import parse_pool_trees
from pooltree.config.support import unsupported_options
from pooltree.controllers.operations import TaskSpec
from pooltree.resources import vector
from pooltree.strategy import NodeHeartbeat
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.starvation_tolerance import gap_exceeds_min_needed
from pooltree.tree import PoolTree

GIB = 1024.0**3
NODE = vector(user_slots=10, cpu=10, memory=100 * GIB)


def _core(config: dict[str, Any]) -> SchedulerCore:
    trees = parse_pool_trees(
        {"default": {"config": config, "pools": {"a": {"weight": 7}, "b": {"weight": 13}}}}
    )
    core = SchedulerCore(PoolTree(trees["default"]))
    core.add_node("n0", NODE)
    return core


def _start(core: SchedulerCore, op_id: str, pool: str, jobs: int, cpu: float, now: float) -> None:
    register_vanilla(
        core, op_id, pool, [TaskSpec("main", jobs, vector(user_slots=1, cpu=cpu, memory=GIB))], now=now
    )


def _run(enabled: bool) -> tuple[dict[str, Any], int]:
    config: dict[str, Any] = {
        "fair_share_starvation_timeout": 5000,
        "fair_share_aggressive_starvation_timeout": 10000,
        "enable_aggressive_starvation": True,
        "enable_pool_starvation": False,  # pools keep the relative rule; only the operation's status is tested
    }
    if enabled:
        config["enable_absolute_fair_share_starvation_tolerance"] = True
    core = _core(config)
    _start(core, "op-b", "b", 10, 1.0, 0.0)
    core.update_fair_share(0.0)
    core.process_heartbeat(NodeHeartbeat("n0", NODE), 0.0)
    _start(core, "op-a", "a", 3, 4.0, 1.0)
    preempted = 0
    for t in range(1, 30):
        core.update_fair_share(float(t))
        result = core.process_heartbeat(NodeHeartbeat("n0", NODE), float(t))
        preempted += len(result.allocations_to_preempt)
    return core.operation_view("op-a"), preempted


def test_gap_below_the_smallest_allocation_is_not_starvation() -> None:
    view, preempted = _run(enabled=True)
    assert view["scheduling_status"] == "normal"
    assert view["starvation_status"] == "non_starving"
    assert view["below_fair_share_since"] is None
    assert preempted == 0
    assert view["running_allocation_count"] == 0


def test_without_the_option_the_relative_rule_starves_and_preempts() -> None:
    view, preempted = _run(enabled=False)
    assert preempted == 4  # four 1-cpu allocations of op-b make room for one 4-cpu allocation
    assert view["running_allocation_count"] == 1


@pytest.mark.parametrize(
    ("fair_share", "usage", "needed", "expected"),
    [
        ([0.5, 0.5], [0.0, 0.0], [0.6, 0.1], False),  # cpu gap below one allocation
        ([0.5, 0.5], [0.0, 0.0], [0.4, 0.1], True),  # gap above it in every resource
        ([0.5, 0.5], [0.2, 0.0], [0.4, 0.1], False),  # usage shrinks the gap
    ],
)
def test_the_gap_rule(
    fair_share: list[float], usage: list[float], needed: list[float], expected: bool
) -> None:
    demand = np.array([1.0, 1.0])
    assert gap_exceeds_min_needed(np.array(fair_share), np.array(usage), demand, np.array(needed)) is expected


def test_the_option_is_no_longer_reported_unsupported() -> None:
    trees = parse_pool_trees(
        {"t": {"config": {"enable_absolute_fair_share_starvation_tolerance": True}, "pools": {"p": {}}}}
    )
    assert unsupported_options(trees) == []
    assert trees["t"].config.enable_absolute_fair_share_starvation_tolerance is True
