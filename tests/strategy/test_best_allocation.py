"""Operations' best allocation share and the tree's ``best_allocation_share_update_period`` (issue 30): an
operation's limits share is capped by the memory its allocations can take on the nodes (YTsaurus's
``GetAdjustedResourceLimits``), computed again once per period."""

from __future__ import annotations

from typing import Any

import pytest
from strategykit import register_vanilla

from pooltree.config import parse_pool_trees
from pooltree.config.support import feature_unsupported_options, unsupported_options
from pooltree.controllers.operations import TaskSpec
from pooltree.resources import CPU, MEMORY, vector
from pooltree.strategy.best_allocation import adjusted_memory_limit
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

GIB = 1024.0**3
NODE = vector(user_slots=100, cpu=100, memory=100 * GIB)


def test_adjusted_memory_is_whole_allocations_per_node() -> None:
    demand = vector(user_slots=3, cpu=3, memory=90 * GIB)  # 30 GiB per allocation
    nodes = {int(100 * GIB): 2, int(50 * GIB): 1}
    assert adjusted_memory_limit(demand, nodes) == (3 + 3 + 1) * 30 * GIB
    assert adjusted_memory_limit(vector(cpu=1, memory=GIB), nodes) is None  # no user slots
    assert adjusted_memory_limit(vector(user_slots=2, cpu=1, memory=1), nodes) is None  # < 1 byte each
    assert adjusted_memory_limit(demand, {}) is None


def _core(config: dict[str, Any], nodes: int = 2) -> SchedulerCore:
    trees = parse_pool_trees({"default": {"config": config, "pools": {"a": {}}}})
    core = SchedulerCore(PoolTree(trees["default"]))
    for i in range(nodes):
        core.add_node(f"n{i}", NODE)
    # 10 allocations of 40 GiB: a 100 GiB node holds 2 of them, so 80 of its 100 GiB can be the operation's.
    register_vanilla(core, "op", "a", [TaskSpec("main", 10, vector(user_slots=1, cpu=1, memory=40 * GIB))])
    return core


def _memory(core: SchedulerCore, now: float) -> tuple[float, float]:
    element = core.update_fair_share(now).elements["op"]
    return float(element.limits_share[MEMORY]), float(element.fair_share[MEMORY])


def test_fair_share_is_capped_by_the_memory_allocations_can_take() -> None:
    limits, fair = _memory(_core({}), 0.0)
    assert limits == pytest.approx(0.8) and fair == pytest.approx(0.8)  # 2 × 80 GiB of 200 GiB
    # Its demand is 400 GiB (2.0 of the memory) and 10 cpu (0.05): its share stops at 0.8 / 2.0 of the way, not
    # at 1.0 / 2.0 as without the cap.
    element = _core({}).update_fair_share(0.0).elements["op"]
    assert float(element.fair_share[CPU]) == pytest.approx(0.05 * 0.8 / 2.0)


def test_share_is_computed_again_once_per_period() -> None:
    core = _core({"best_allocation_share_update_period": 30000})
    assert _memory(core, 0.0)[0] == pytest.approx(0.8)
    core.add_node("n2", NODE)  # 300 GiB now; the limit (160 GiB) stays until the period has passed
    assert _memory(core, 10.0)[0] == pytest.approx(160 / 300)
    assert _memory(core, 29.0)[0] == pytest.approx(160 / 300)
    assert _memory(core, 30.0)[0] == pytest.approx(240 / 300)


def test_not_capped_until_the_tree_limits_are_stable() -> None:
    core = _core({"node_reconnection_timeout": 60000})
    core.connection_time = 0.0
    assert _memory(core, 10.0)[0] == pytest.approx(1.0)  # nodes may still be reconnecting: share one
    assert _memory(core, 60.0)[0] == pytest.approx(0.8)


def test_the_period_is_an_implemented_option() -> None:
    trees = parse_pool_trees(
        {"default": {"config": {"best_allocation_ratio_update_period": 5000}, "pools": {}}}
    )
    assert trees["default"].config.best_allocation_share_update_period == 5.0
    assert unsupported_options(trees) == []
    assert "best_allocation_share_update_period" not in feature_unsupported_options()["tree"]
