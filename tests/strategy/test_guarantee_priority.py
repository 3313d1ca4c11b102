"""The tree's ``enable_guarantee_priority_scheduling`` (issue 30): operations below their promised guarantee fair
share are scheduled first, in the ``regular_high_priority`` stage (YTsaurus's unit test
``TestGuaranteePriorityScheduling``: operations under a pool with ``compute_promised_guarantee_fair_share`` are high).

Nodes of 10 and 3 cpu. Pool A (strong guarantee 6 cpu, ``compute_promised_guarantee_fair_share``) runs a1 on the
3-cpu node; pool B's b1 runs nothing yet. On the 10-cpu node's heartbeat b1 is hungrier (0 of its fair share), so by
default it gets the first allocation; with the option a1 (3 cpu, below its promised guarantee) is high and its
stage runs first."""

from __future__ import annotations

from typing import Any

from pooltree.config import parse_pool_trees
from pooltree.config.support import unsupported_options
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy import NodeHeartbeat
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

GiB = 1024.0**3


def _limits(cpu: float) -> Any:
    return vector(user_slots=cpu, cpu=cpu, memory=cpu * GiB)


def _run(enabled: bool) -> tuple[SchedulerCore, list[dict[str, Any]]]:
    config = {"enable_guarantee_priority_scheduling": True} if enabled else {}
    pools = {
        "A": {"strong_guarantee_resources": {"cpu": 6}, "compute_promised_guarantee_fair_share": True},
        "B": {},
    }
    trees = parse_pool_trees({"t": {"config": config, "pools": pools}})
    assert unsupported_options(trees) == []
    events: list[dict[str, Any]] = []
    core = SchedulerCore(PoolTree(trees["t"]), event_sink=events.append)
    core.add_node("n0", _limits(10))
    core.add_node("n1", _limits(3))
    for op, pool, now in (("a1", "A", 0.0), ("b1", "B", 1.0)):
        task = TaskSpec("main", 20, vector(user_slots=1, cpu=1, memory=GiB))
        core.register_operation(
            op, VanillaController(op, [task]), user="u", pool=pool, spec={"pool": pool}, now=now
        )
        core.update_fair_share(now)
        core.process_heartbeat(NodeHeartbeat("n1", _limits(3)), now)  # a1 fills n1 (3 cpu)
    assert core.operation_view("a1")["running_allocation_count"] == 3
    core.update_fair_share(2.0)
    events.clear()
    core.process_heartbeat(NodeHeartbeat("n0", _limits(10)), 2.0)
    return core, [e for e in events if e["event"] == "allocation_started"]


def test_by_default_the_hungrier_operation_goes_first() -> None:
    core, started = _run(enabled=False)
    assert started[0]["operation_id"] == "b1"
    assert {e["stage"] for e in started} == {"regular_medium_priority"}
    assert core.strategy.high_priority == frozenset()


def test_an_operation_below_its_promised_guarantee_goes_first() -> None:
    core, started = _run(enabled=True)
    assert core.strategy.high_priority == frozenset({"a1"})
    high = [e["operation_id"] for e in started if e["stage"] == "regular_high_priority"]
    assert started[0]["operation_id"] == "a1" and high and set(high) == {"a1"}
    medium = [e["operation_id"] for e in started if e["stage"] == "regular_medium_priority"]
    assert set(medium) <= {"b1"}
    assert len(started) == 10  # the node's 10 cpu, the high stage first
