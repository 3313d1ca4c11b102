"""The tree's ``max_schedulable_element_count_in_fifo_pool`` (issue 30): operations of a FIFO pool past the first N
with a zero fair share are not schedulable (YTsaurus's ``BuildSchedulableChildrenLists``).

One node of 10 cpu, two pools of equal weight. ``o`` (pool other) runs five 1-cpu jobs; its 20-cpu jobs fit no
node, so its demand keeps its fair share at 5 cpu. In the FIFO pool, ``first`` (6-cpu jobs) has the pool's whole
fair share (5 cpu) but none of its jobs fits the 5 free cpu; ``second`` (1-cpu jobs) has a zero fair share. Without
the limit, ``second`` takes the free 5 cpu; with a limit of 1 it is left out (``first`` is counted), with 2 it is not.
"""

from __future__ import annotations

import pytest
from strategykit import register_vanilla

from pooltree.config import parse_pool_trees
from pooltree.config.support import unsupported_options
from pooltree.controllers.operations import TaskSpec
from pooltree.errors import ConfigError
from pooltree.resources import vector
from pooltree.strategy import NodeHeartbeat
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

GiB = 1024.0**3
NODE = vector(user_slots=20, cpu=10, memory=100 * GiB)


def _job(cpu: float) -> object:
    return vector(user_slots=1, cpu=cpu, memory=GiB)


def _core(limit: int | None) -> SchedulerCore:
    config = {} if limit is None else {"max_schedulable_element_count_in_fifo_pool": limit}
    trees = parse_pool_trees({"t": {"config": config, "pools": {"other": {}, "queue": {"mode": "fifo"}}}})
    assert unsupported_options(trees) == []
    core = SchedulerCore(PoolTree(trees["t"]))
    core.add_node("n0", NODE)
    return core


def _run(limit: int | None) -> SchedulerCore:
    core = _core(limit)
    register_vanilla(
        core, "o", "other", [TaskSpec("small", 5, _job(1)), TaskSpec("big", 2, _job(20))], now=0.0
    )
    core.update_fair_share(0.0)
    core.process_heartbeat(NodeHeartbeat("n0", NODE), 0.0)
    register_vanilla(core, "first", "queue", [TaskSpec("main", 10, _job(6))], now=1.0)
    register_vanilla(core, "second", "queue", [TaskSpec("main", 10, _job(1))], now=2.0)
    for t in range(3, 8):
        core.update_fair_share(float(t))
        core.process_heartbeat(NodeHeartbeat("n0", NODE), float(t))
    return core


def _running(core: SchedulerCore, op: str) -> int:
    return core.operation_view(op)["running_allocation_count"]


def test_without_the_limit_a_zero_fair_share_operation_takes_free_resources() -> None:
    core = _run(None)
    assert (_running(core, "o"), _running(core, "first"), _running(core, "second")) == (5, 0, 5)


def test_past_the_limit_a_zero_fair_share_operation_is_not_schedulable() -> None:
    core = _run(1)
    assert (_running(core, "first"), _running(core, "second")) == (0, 0)
    view = core.operation_view("second")
    assert view["scheduling_status"] == "normal" and view["starvation_status"] == "non_starving"
    assert core.strategy.fifo_unschedulable == frozenset({"second"})


def test_within_the_limit_it_runs() -> None:
    core = _run(2)
    assert _running(core, "second") == 5
    assert core.strategy.fifo_unschedulable == frozenset()


def test_the_set_is_made_at_every_update() -> None:
    """Once ``first`` leaves the pool, ``second`` is the first of the queue: counted, schedulable, re-keyed."""
    core = _run(1)
    core.unregister_operation("first", 10.0, state="aborted")
    core.update_fair_share(10.0)
    core.process_heartbeat(NodeHeartbeat("n0", NODE), 10.0)
    assert core.strategy.fifo_unschedulable == frozenset()
    assert _running(core, "second") == 5


def test_the_limit_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="max_schedulable_element_count_in_fifo_pool"):
        parse_pool_trees({"t": {"config": {"max_schedulable_element_count_in_fifo_pool": 0}}})
