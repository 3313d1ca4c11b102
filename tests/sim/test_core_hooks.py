"""The additive SchedulerCore hooks the simulator relies on: heartbeat_is_noop, skip_heartbeat, republish."""

from __future__ import annotations

from pooltree.config import parse_pool_trees
from pooltree.controllers.operations import MapController, TaskSpec
from pooltree.resources import vector
from pooltree.strategy import NodeHeartbeat
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

GiB = 1024.0**3
NODE = vector(user_slots=4, cpu=4, memory=16 * GiB)


def make_core() -> SchedulerCore:
    pools = {"a": {"strong_guarantee_resources": {"cpu": 4}}, "b": {}}
    core = SchedulerCore(PoolTree(parse_pool_trees({"t": {"pools": pools}})["t"]))
    core.add_node("n0", NODE)
    return core


def test_noop_follows_free_resources_and_pending_demand():
    core = make_core()
    controller = MapController("b1", [TaskSpec("main", 4, vector(user_slots=1, cpu=1, memory=GiB))])
    core.register_operation("b1", controller, user="u", pool="b")
    core.update_fair_share(0.0)
    pending = lambda: controller.min_needed_resources if controller.pending_allocation_count else None  # noqa: E731
    assert not core.heartbeat_is_noop("n0", 0.5, pending)
    result = core.process_heartbeat(NodeHeartbeat("n0", NODE), 0.5)
    assert len(result.allocations_to_start) == 4
    # full node, no starving operation: nothing can change until something ends
    assert not core.can_start_more("n0")
    assert core.heartbeat_is_noop("n0", 1.5, pending)
    assert not core.heartbeat_is_noop("unknown", 1.5, pending)


def test_skip_heartbeat_moves_only_the_preemptive_backoff():
    core = make_core()
    core.update_fair_share(0.0)
    node = core.strategy.nodes["n0"]
    assert node.last_preemptive_scheduling_time is None
    core.skip_heartbeat("n0", 1.0)
    assert node.last_preemptive_scheduling_time == 1.0
    core.skip_heartbeat("n0", 5.0)  # backoff (5 s) not elapsed: unchanged, as a real heartbeat would leave it
    assert node.last_preemptive_scheduling_time == 1.0
    core.skip_heartbeat("n0", 6.5)
    assert node.last_preemptive_scheduling_time == 6.5


def test_starving_operation_makes_preemptive_heartbeats_non_empty_and_republish_advances_starvation():
    core = make_core()
    hog = MapController("b1", [TaskSpec("main", 8, vector(user_slots=1, cpu=1, memory=GiB))])
    core.register_operation("b1", hog, user="u", pool="b")
    core.update_fair_share(0.0)
    core.process_heartbeat(NodeHeartbeat("n0", NODE), 0.1)
    victim_demand = MapController("a1", [TaskSpec("main", 4, vector(user_slots=1, cpu=1, memory=GiB))])
    core.register_operation("a1", victim_demand, user="u", pool="a", now=1.0)
    core.update_fair_share(1.0)
    core.republish(2.0)
    assert not core.has_starving_operations()
    core.republish(40.0)  # past the 30 s starvation timeout with nothing changed: a1 starves
    assert core.has_starving_operations()
    assert not core.heartbeat_is_noop("n0", 40.5, lambda: None)
