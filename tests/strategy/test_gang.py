"""Gang operations in the strategy: all-or-nothing preemption and allow_aggressive_preemption_for_gang_operations."""

from __future__ import annotations

from strategykit import Kit

from pooltree.config import parse_pool_trees
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy import AbortReason, FinishedAllocation, NodeHeartbeat, StrategyConfig
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

GiB = 1024.0**3


def gang_kit(*, is_gang: bool) -> Kit:
    """Two nodes of 10 cpu filled by a 4-allocation operation of pool a; pool b's operation then starves."""
    kit = Kit(node_count=2, node_cpu=10, config=StrategyConfig())
    kit.pool("a")
    kit.pool("b")
    kit.operation("g", "a", jobs=4, cpu=5, kind="vanilla", is_gang=is_gang)
    kit.set_fair_share({"a": 20, "g": 20})
    kit.round(0)
    assert kit.running_count("g") == 4
    kit.operation("hungry", "b", jobs=10, cpu=5)
    kit.set_fair_share({"a": 10, "g": 10, "b": 10, "hungry": 10})
    kit.publish(1)
    kit.publish(40)  # hungry has starved for longer than fair_share_starvation_timeout
    return kit


def test_preempting_one_allocation_of_a_gang_stops_the_whole_gang() -> None:
    kit = gang_kit(is_gang=True)
    first = kit.heartbeat(1, 40.0)  # the preemptible allocations (the latest started) run on node 1
    reasons = sorted(record.reason.value for record in first.allocations_to_preempt)
    # One allocation makes room for hungry; its gang sibling on the same node stops with it.
    assert reasons == ["operation_incarnation_changed", "preemption"]
    sibling = next(
        r for r in first.allocations_to_preempt if r.reason is AbortReason.OPERATION_INCARNATION_CHANGED
    )
    assert sibling.timeout == 0.0 and "gang operation g" in sibling.explanation
    # The two allocations on the other node are released at once and stopped at that node's next heartbeat.
    assert kit.running_count("g") == 0 and kit.usage_cpu("g") == 0
    assert kit.scheduler.has_queued_preemptions(kit.address(0))
    second = kit.heartbeat(0, 40.5)
    assert [r.reason for r in second.allocations_to_preempt] == [
        AbortReason.OPERATION_INCARNATION_CHANGED
    ] * 2
    assert not kit.scheduler.has_queued_preemptions(kit.address(0))
    kit.heartbeat(0, 41.0)
    kit.heartbeat(1, 41.0)
    controller = kit.ops["g"]["controller"]
    assert controller.aborted_job_count_by_reason["operation_incarnation_changed"] == 3
    # The gang restarts as a whole: all four jobs are pending again or started anew.
    assert controller.pending_allocation_count + kit.running_count("g") == 4


def test_a_regular_operation_loses_only_the_preempted_allocation() -> None:
    kit = gang_kit(is_gang=False)
    first = kit.heartbeat(1, 40.0)
    assert [r.reason for r in first.allocations_to_preempt] == [AbortReason.PREEMPTION]
    assert kit.running_count("g") == 3
    assert not kit.scheduler.has_queued_preemptions(kit.address(0))


def test_a_gang_allocation_aborted_by_its_node_restarts_the_gang() -> None:
    kit = Kit(node_count=2, node_cpu=10)
    kit.pool("a")
    kit.operation("g", "a", jobs=4, cpu=5, kind="vanilla", is_gang=True)
    kit.set_fair_share({"a": 20, "g": 20})
    kit.round(0)
    lost = next(iter(kit.scheduler.nodes[kit.address(0)].allocations))
    kit.pending_finish[kit.address(0)] = [FinishedAllocation(lost, "aborted")]
    result = kit.heartbeat(0, 1.0)
    assert [r.reason for r in result.allocations_to_preempt].count(
        AbortReason.OPERATION_INCARNATION_CHANGED
    ) == 1
    assert kit.scheduler.has_queued_preemptions(kit.address(1))


def _core(allow: bool) -> SchedulerCore:
    config = {"allow_aggressive_preemption_for_gang_operations": allow}
    trees = parse_pool_trees({"t": {"config": config, "pools": {"a": {}}}})
    core = SchedulerCore(PoolTree(trees["t"]))
    core.add_node("n0", vector(user_slots=10, cpu=10, memory=10 * GiB))
    for op_id, gang in (("gang", True), ("plain", False)):
        task = TaskSpec("main", 2, vector(user_slots=1, cpu=1, memory=GiB))
        core.register_operation(
            op_id, VanillaController(op_id, [task]), user="u", pool="a", spec={"pool": "a", "is_gang": gang}
        )
    core.update_fair_share(0.0)
    core.process_heartbeat(NodeHeartbeat("n0", vector(user_slots=10, cpu=10, memory=10 * GiB)), 0.0)
    return core


def test_allow_aggressive_preemption_for_gang_operations() -> None:
    allowed = _core(True)
    assert allowed.operation_view("gang")["effective_aggressive_preemption_allowed"] is True
    refused = _core(False)
    assert refused.operation_view("gang")["effective_aggressive_preemption_allowed"] is False
    assert refused.operation_view("plain")["effective_aggressive_preemption_allowed"] is True
