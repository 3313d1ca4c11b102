"""Operation time_limit and job job_time_limit through SchedulerCore (YTsaurus's errors)."""

from __future__ import annotations

from pooltree.config import OperationSpec, parse_pool_trees
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy import AbortReason, FinishedAllocation, NodeHeartbeat
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

GiB = 1024.0**3
NODE = vector(user_slots=10, cpu=10, memory=10 * GiB)


def _core(spec: dict, jobs: int = 2) -> tuple[SchedulerCore, VanillaController]:
    core = SchedulerCore(PoolTree(parse_pool_trees({"t": {"pools": {"a": {}}}})["t"]))
    core.add_node("n0", NODE)
    controller = VanillaController("op", [TaskSpec("main", jobs, vector(user_slots=1, cpu=1, memory=GiB))])
    core.register_operation("op", controller, user="u", pool="a", spec=spec, now=0.0)
    core.update_fair_share(0.0)
    started = core.process_heartbeat(NodeHeartbeat("n0", NODE), 0.0)
    assert len(started.allocations_to_start) == jobs
    return core, controller


def test_an_operation_over_its_time_limit_is_failed_with_ytsaurus_error() -> None:
    core, _ = _core({"pool": "a", "time_limit": 60000})  # milliseconds, as YTsaurus writes it
    assert core.enforce_time_limits(60.0) == []  # not longer than the limit yet
    failed = core.enforce_time_limits(60.5)
    assert [operation_id for operation_id, _ in failed] == ["op"]
    error = failed[0][1]
    assert error["message"] == "Operation is running for too long, aborted"
    assert error["attributes"]["time_limit"] == 60000


def test_a_job_over_its_job_time_limit_is_stopped_with_error_1202() -> None:
    spec = OperationSpec.parse(
        {"pool": "a", "tasks": {"main": {"command": "sleep 100", "job_count": 2, "job_time_limit": "10s"}}}
    )
    core, controller = _core(spec)
    assert core.enforce_time_limits(10.0) == [] and core.nodes_with_queued_preemptions() == []
    assert core.enforce_time_limits(10.5) == []  # the operation itself has no time limit
    assert core.nodes_with_queued_preemptions() == ["n0"]
    result = core.process_heartbeat(NodeHeartbeat("n0", NODE), 11.0)
    records = [r for r in result.allocations_to_preempt if r.reason is AbortReason.JOB_TIME_LIMIT_EXCEEDED]
    assert len(records) == 2 and all(r.timeout == 0.0 for r in records)
    assert records[0].error == {
        "code": 1202,
        "message": "Job time limit exceeded",
        "attributes": {"limit": 10000},
        "inner_errors": [],
    }
    finished = [FinishedAllocation(r.allocation_id, "aborted") for r in records]
    core.process_heartbeat(NodeHeartbeat("n0", NODE, finished=finished), 12.0)
    assert controller.aborted_job_count_by_reason["job_time_limit_exceeded"] == 2
    assert controller.pending_allocation_count + controller.running_allocation_count == 2
