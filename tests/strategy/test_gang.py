"""Gang operations as YTsaurus runs them (issue 14).

The strategy schedules and preempts a gang's allocations one by one (spec ``is_gang`` changes the fair share and
``allow_aggressive_preemption_for_gang_operations``, not which allocations a stage stops). A vanilla task with
``gang_options`` makes the controller switch incarnation when a ranked job is lost: every running job is aborted
(``operation_incarnation_changed``) and restarted in its own allocation, completed jobs run again.
"""

from __future__ import annotations

import numpy as np
from strategykit import Kit

from pooltree.config import parse_pool_trees
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy import AbortReason, FinishedAllocation, NodeHeartbeat, StrategyConfig
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

GiB = 1024.0**3
SWITCH = AbortReason.OPERATION_INCARNATION_CHANGED


def gang_kit(*, gang_size: int | None, is_gang: bool = True) -> Kit:
    """Two nodes of 10 cpu filled by a 4-job operation of pool a; pool b's operation then starves."""
    kit = Kit(node_count=2, node_cpu=10, config=StrategyConfig())
    kit.pool("a")
    kit.pool("b")
    kit.operation("g", "a", jobs=4, cpu=5, kind="vanilla", is_gang=is_gang, gang_size=gang_size)
    kit.set_fair_share({"a": 20, "g": 20})
    kit.round(0)
    assert kit.running_count("g") == 4
    kit.operation("hungry", "b", jobs=10, cpu=5)
    kit.set_fair_share({"a": 10, "g": 10, "b": 10, "hungry": 10})
    kit.publish(1)
    kit.publish(40)  # hungry has starved for longer than fair_share_starvation_timeout
    return kit


def test_preempting_one_gang_allocation_restarts_every_job_in_its_own_allocation() -> None:
    kit = gang_kit(gang_size=4)
    controller = kit.ops["g"]["controller"]
    first = kit.heartbeat(1, 40.0)
    # YTsaurus's strategy preempts only what the starving operation needs: one allocation.
    assert [r.reason for r in first.allocations_to_preempt] == [AbortReason.PREEMPTION]
    assert kit.running_count("g") == 3 and controller.incarnation == 0
    started_before = {a.id for a in kit.scheduler.allocations.values() if a.operation_id == "g"}
    # The node reports the preempted job aborted: the controller switches incarnation, the strategy restarts the
    # three other jobs in their allocations (no gap in the operation's usage, nothing pending in between).
    second = kit.heartbeat(1, 41.0)
    assert controller.incarnation == 1 and controller.incarnation_switch_count == 1
    on_node_1 = [r for r in second.allocations_to_preempt if r.reason is SWITCH]
    assert len(on_node_1) == 1 and on_node_1[0].timeout == 0.0 and not on_node_1[0].interruptible
    restarted_here = [a for a in second.allocations_to_start if a.operation_id == "g"]
    assert len(restarted_here) == 1 and restarted_here[0].node_address == kit.address(1)
    assert kit.usage_cpu("g") == 15.0 and kit.running_count("g") == 3
    assert controller.pending_allocation_count == 1  # the preempted job
    # The other node gets its two aborts and two restarts at its next heartbeat.
    assert kit.scheduler.has_queued_preemptions(kit.address(0))
    third = kit.heartbeat(0, 41.5)
    assert [r.reason for r in third.allocations_to_preempt] == [SWITCH, SWITCH]
    restarted = [a for a in third.allocations_to_start if a.operation_id == "g"]
    assert len(restarted) == 2 and {a.node_address for a in restarted} == {kit.address(0)}
    assert not kit.scheduler.has_queued_preemptions(kit.address(0))
    now_running = {a.id for a in kit.scheduler.operations["g"].lists}
    assert now_running.isdisjoint(started_before)  # new jobs, same nodes and resources
    assert controller.aborted_job_count_by_reason["operation_incarnation_changed"] == 3
    assert all(job.incarnation == 1 for job in controller._running.values())
    # The aborted jobs' reports end there: the controller already took them back.
    kit.heartbeat(0, 42.0)
    kit.heartbeat(1, 42.0)
    assert controller.incarnation == 1 and controller.running_allocation_count == 3
    assert kit.usage_cpu("g") == 15.0


def test_is_gang_alone_loses_only_the_preempted_allocation() -> None:
    """Without ``gang_options`` there is no incarnation switch: YTsaurus's strategy does not preempt gangs whole."""
    kit = gang_kit(gang_size=None)
    first = kit.heartbeat(1, 40.0)
    assert [r.reason for r in first.allocations_to_preempt] == [AbortReason.PREEMPTION]
    kit.heartbeat(1, 41.0)
    assert kit.running_count("g") == 3
    assert not kit.scheduler.has_queued_preemptions(kit.address(0))
    assert kit.ops["g"]["controller"].incarnation == 0


def test_a_ranked_job_aborted_by_its_node_restarts_the_others_a_job_without_rank_does_not() -> None:
    kit = Kit(node_count=2, node_cpu=10)
    kit.pool("a")
    kit.operation("g", "a", jobs=4, cpu=5, kind="vanilla", is_gang=True, gang_size=2)
    kit.set_fair_share({"a": 20, "g": 20})
    kit.round(0)
    controller = kit.ops["g"]["controller"]
    by_index = {job.index: allocation_id for allocation_id, job in controller._running.items()}
    unranked = kit.scheduler.allocations[by_index[3]]
    kit.pending_finish[unranked.node_address] = [FinishedAllocation(unranked.id, "aborted")]
    kit.heartbeat(int(unranked.node_address[-1]), 1.0)
    assert controller.incarnation == 0  # index 3 holds no rank (gang_options.size 2)
    ranked = kit.scheduler.allocations[by_index[0]]
    node = int(ranked.node_address[-1])
    kit.pending_finish[ranked.node_address] = [FinishedAllocation(ranked.id, "failed")]
    result = kit.heartbeat(node, 2.0)
    assert controller.incarnation == 1
    assert [r.reason for r in result.allocations_to_preempt].count(SWITCH) >= 1
    other = kit.address(1 - node)
    assert kit.scheduler.has_queued_preemptions(other)


def test_completed_ranked_jobs_run_again_after_a_switch() -> None:
    kit = Kit(node_count=1, node_cpu=10)
    kit.pool("a")
    kit.operation("g", "a", jobs=2, cpu=5, kind="vanilla", gang_size=2)
    kit.set_fair_share({"a": 10, "g": 10})
    kit.round(0)
    controller = kit.ops["g"]["controller"]
    done, lost = sorted(controller._running)
    kit.pending_finish[kit.address(0)] = [FinishedAllocation(done, "completed")]
    kit.heartbeat(0, 1.0)
    assert controller.completed_job_count == 1 and controller.pending_allocation_count == 0
    kit.pending_finish[kit.address(0)] = [FinishedAllocation(lost, "aborted")]
    kit.heartbeat(0, 2.0)
    # YTsaurus's gang task loses its completed jobs on a switch (LostAll): both jobs run again.
    assert controller.incarnation == 1
    assert controller.running_allocation_count + controller.pending_allocation_count == 2
    assert not controller.is_completed


def _core(allow: bool, *, gang_size: int | None = None) -> SchedulerCore:
    config = {"allow_aggressive_preemption_for_gang_operations": allow}
    trees = parse_pool_trees({"t": {"config": config, "pools": {"a": {}}}})
    core = SchedulerCore(PoolTree(trees["t"]))
    nodes = ("n0", "n1", "n2", "n3")
    for node in nodes:
        core.add_node(node, vector(user_slots=1, cpu=10, memory=10 * GiB))
    for op_id, gang in (("gang", True), ("plain", False)):
        task = TaskSpec(
            "main", 2, vector(user_slots=1, cpu=1, memory=GiB), gang_size=gang_size if gang else None
        )
        core.register_operation(
            op_id, VanillaController(op_id, [task]), user="u", pool="a", spec={"pool": "a", "is_gang": gang}
        )
    core.update_fair_share(0.0)
    for node in nodes:
        core.process_heartbeat(NodeHeartbeat(node, vector(user_slots=1, cpu=10, memory=10 * GiB)), 0.0)
    return core


def test_allow_aggressive_preemption_for_gang_operations() -> None:
    allowed = _core(True)
    assert allowed.operation_view("gang")["effective_aggressive_preemption_allowed"] is True
    refused = _core(False)
    assert refused.operation_view("gang")["effective_aggressive_preemption_allowed"] is False
    assert refused.operation_view("plain")["effective_aggressive_preemption_allowed"] is True


def test_a_lost_node_restarts_the_gang_elsewhere_and_leaves_nothing_on_it() -> None:
    core = _core(True, gang_size=2)
    gang = core.strategy.operations["gang"]
    lost, kept = sorted(a.node_address for a in gang.lists)
    core.remove_node(lost, 1.0)
    controller = core.controllers["gang"]
    assert controller.incarnation == 1
    # The job on the other node restarted in its allocation; nothing is accounted on the removed node.
    assert [a.node_address for a in gang.lists] == [kept]
    assert all(a.node_address != lost for a in core.strategy.allocations.values())
    assert controller.running_allocation_count == 1 and controller.pending_allocation_count == 1
    assert np.isclose(core.strategy.operation_usage("gang")[1], 1.0)
    assert core.strategy.has_queued_preemptions(kept)


def test_a_node_reporting_its_running_jobs_keeps_the_restarts_queued_for_it() -> None:
    """A heartbeat's ``running`` list cannot yet hold jobs restarted outside the node's heartbeats."""
    kit = Kit(node_count=2, node_cpu=10)
    kit.pool("a")
    kit.operation("g", "a", jobs=4, cpu=5, kind="vanilla", gang_size=4)
    kit.set_fair_share({"a": 20, "g": 20})
    kit.round(0)
    lost = next(iter(kit.scheduler.nodes[kit.address(0)].allocations))
    kit.pending_finish[kit.address(0)] = [FinishedAllocation(lost, "aborted")]
    kit.heartbeat(0, 1.0)
    controller = kit.ops["g"]["controller"]
    assert controller.incarnation == 1
    node_1 = kit.scheduler.nodes[kit.address(1)]
    old_ids = [a.id for a in node_1.allocations.values() if a.preempted]
    running = {a: vector(user_slots=1, cpu=5, memory=5 * GiB) for a in old_ids}
    result = kit.scheduler.process_heartbeat(
        NodeHeartbeat(kit.address(1), kit.node_limits, running=running), 1.5
    )
    assert len([a for a in result.allocations_to_start if a.operation_id == "g"]) == 2
    assert controller.incarnation == 1  # no second switch: the restarts were not taken for lost jobs
