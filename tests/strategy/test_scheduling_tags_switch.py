"""The tree's ``enable_scheduling_tags`` (issue 30): YTsaurus checks scheduling tag filters only while it is true
(the default); false lets every operation run on every node of the tree."""

from __future__ import annotations

from pooltree.config import parse_pool_trees
from pooltree.config.support import unsupported_options
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy import NodeHeartbeat
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

GiB = 1024.0**3
NODE = vector(user_slots=4, cpu=4, memory=8 * GiB)


def _started(config: dict) -> int:
    trees = parse_pool_trees({"t": {"config": config, "pools": {"a": {}}}})
    assert unsupported_options(trees) == []
    core = SchedulerCore(PoolTree(trees["t"]))
    core.add_node("plain", NODE, tags=["cpu"])
    controller = VanillaController("op", [TaskSpec("main", 2, vector(user_slots=1, cpu=1, memory=GiB))])
    spec = {"pool": "a", "scheduling_tag_filter": "ssd"}
    core.register_operation("op", controller, user="u", pool="a", spec=spec, now=0.0)
    core.update_fair_share(0.0)
    return len(
        core.process_heartbeat(NodeHeartbeat("plain", NODE, frozenset({"cpu"})), 0.0).allocations_to_start
    )


def test_scheduling_tag_filters_apply_unless_the_tree_switches_them_off() -> None:
    assert _started({}) == 0
    assert _started({"enable_scheduling_tags": True}) == 0
    assert _started({"enable_scheduling_tags": False}) == 2
