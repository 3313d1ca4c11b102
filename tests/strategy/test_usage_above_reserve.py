"""Memory above the reserve: a node-reported usage counts where it exceeds the allocation's reserve."""

from __future__ import annotations

import numpy as np

from pooltree.config import parse_pool_trees
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import MEMORY, vector
from pooltree.strategy import AbortReason, NodeHeartbeat
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.scheduler import usage_above_reserve
from pooltree.tree import PoolTree

GiB = 1024.0**3
NODE = vector(user_slots=10, cpu=10, memory=10 * GiB)
JOB = vector(user_slots=1, cpu=1, memory=4 * GiB)


def _core(jobs: int) -> tuple[SchedulerCore, list[str]]:
    core = SchedulerCore(PoolTree(parse_pool_trees({"t": {"pools": {"a": {}}}})["t"]))
    core.add_node("n0", NODE)
    core.register_operation("op", VanillaController("op", [TaskSpec("main", jobs, JOB)]), user="u", pool="a")
    core.update_fair_share(0.0)
    started = core.process_heartbeat(NodeHeartbeat("n0", NODE), 0.0).allocations_to_start
    return core, [allocation.id for allocation in started]


def test_usage_is_the_reserve_or_what_the_node_reports_above_it() -> None:
    reserve = vector(user_slots=1, cpu=1, memory=4 * GiB)
    reported = vector(user_slots=1, cpu=0.5, memory=6 * GiB)
    np.testing.assert_array_equal(
        usage_above_reserve(reserve, reported), vector(user_slots=1, cpu=1, memory=6 * GiB)
    )


def test_memory_above_the_reserve_counts_in_fair_share_and_node_fit() -> None:
    core, started = _core(jobs=3)
    assert len(started) == 2  # 2 × 4 GiB on a 10 GiB node
    first = started[0]
    below = np.array(JOB)
    below[MEMORY] = 3 * GiB
    assert not core.report_usage(first, below)  # below the reserve: the reserve still counts
    above = np.array(JOB)
    above[MEMORY] = 5.5 * GiB
    assert core.report_usage(first, above)
    assert core.strategy.operation_usage("op")[MEMORY] == 9.5 * GiB  # what the fair-share update reads
    assert core.strategy.nodes["n0"].usage[MEMORY] == 9.5 * GiB
    # 0.5 GiB left: the third job (4 GiB reserve) does not fit, although reserves alone would leave 2 GiB.
    result = core.process_heartbeat(NodeHeartbeat("n0", NODE), 1.0)
    assert result.allocations_to_start == [] and result.allocations_to_preempt == []


def test_usage_above_the_reserve_that_overcommits_the_node_is_aborted() -> None:
    core, started = _core(jobs=2)
    above = np.array(JOB)
    above[MEMORY] = 7 * GiB  # 7 + 4 > 10 GiB
    assert core.report_usage(started[1], above)
    assert not core.heartbeat_is_noop("n0", 1.0, lambda: None)
    result = core.process_heartbeat(NodeHeartbeat("n0", NODE), 1.0)
    assert [record.reason for record in result.allocations_to_preempt] == [AbortReason.RESOURCE_OVERCOMMIT]


def test_usage_never_goes_negative_after_resized_allocations_finish() -> None:
    from pooltree.strategy import FinishedAllocation

    core, started = _core(jobs=2)
    for index, allocation_id in enumerate(started):
        above = np.array(JOB)
        above[MEMORY] = 4 * GiB + 1234567.891 * (index + 1) / 3.0  # byte counts that do not add up exactly
        core.report_usage(allocation_id, above)
    finished = [FinishedAllocation(allocation_id, "completed") for allocation_id in started]
    core.process_heartbeat(NodeHeartbeat("n0", NODE, finished=finished), 2.0)
    assert np.all(core.strategy.operation_usage("op") >= 0.0)
    core.update_fair_share(2.0)  # the fair-share input refuses negative usage
