"""A started allocation's event names its resources as ``dict(zip(RESOURCES, amounts))`` did: the same names, in
the same order, with the same floats (the stage writes the display out)."""

from typing import Any

from pooltree.config import parse_pool_trees
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import RESOURCES, vector
from pooltree.strategy import NodeHeartbeat
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

NODE = vector(user_slots=10, cpu=10, gpu=4, memory=10 * 2**30, network=100)
JOB = vector(user_slots=1, cpu=1.5, gpu=1, memory=3.25 * 2**30, network=7)


def test_the_started_event_names_every_resource_in_order() -> None:
    events: list[dict[str, Any]] = []
    core = SchedulerCore(
        PoolTree(parse_pool_trees({"t": {"pools": {"a": {}}}})["t"]), event_sink=events.append
    )
    core.add_node("n0", NODE)
    core.register_operation("op", VanillaController("op", [TaskSpec("main", 3, JOB)]), user="u", pool="a")
    core.update_fair_share(0.0)
    started = core.process_heartbeat(NodeHeartbeat("n0", NODE), 0.0).allocations_to_start
    assert len(started) == 3
    by_id = {event["allocation_id"]: event for event in events if event["event"] == "allocation_started"}
    for allocation in started:
        resources = by_id[allocation.id]["resources"]
        expected = dict(zip(RESOURCES, allocation.amounts, strict=True))
        assert list(resources.items()) == list(expected.items())
        assert all(type(value) is float for value in resources.values())
