"""A vanilla task's ``restart_completed_jobs`` (YTsaurus's ``TVanillaTaskSpec``): a job that completes is
started again and counted lost, so the operation runs until it is completed or aborted; its other tasks and
other endings behave as usual."""

from __future__ import annotations

import pytest

from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.errors import ConfigError
from pooltree.resources import vector
from pooltree.server.live.model import LiveVanillaController
from pooltree.strategy import ExecNode, FinishedAllocation

NODE = ExecNode("n1", vector(user_slots=10, cpu=10, memory=2**34))


def _controller() -> VanillaController:
    service = TaskSpec("service", 1, vector(user_slots=1, cpu=1), restart_completed=True)
    batch = TaskSpec("batch", 1, vector(user_slots=1, cpu=1))
    return VanillaController("op", [service, batch])


def test_a_completed_job_of_a_restarting_task_runs_again_and_counts_lost() -> None:
    controller = _controller()
    service = controller.schedule_allocation(NODE, NODE.resource_limits, 0)
    batch = controller.schedule_allocation(NODE, NODE.resource_limits, 0)
    assert service is not None and batch is not None and controller.pending_allocation_count == 0
    controller.on_allocation_finished(service, FinishedAllocation(service.id, "completed"), 5)
    controller.on_allocation_finished(batch, FinishedAllocation(batch.id, "completed"), 5)
    assert controller.pending_allocation_count == 1, "the service's job waits to run again"
    assert controller.lost_job_count == 1 and controller.completed_job_count == 1
    assert not controller.is_completed
    again = controller.schedule_allocation(NODE, NODE.resource_limits, 6)
    assert again is not None and again.task == "service"
    controller.on_allocation_finished(again, FinishedAllocation(again.id, "failed"), 7)
    assert controller.failed_job_count == 1 and controller.lost_job_count == 1, "a failure is a failure"
    assert controller.progress()["lost_job_count"] == 1


def test_the_workload_flag_is_a_boolean() -> None:
    assert TaskSpec.from_mapping({"restart_completed_jobs": True, "resources": {"cpu": 1}}).restart_completed
    with pytest.raises(ConfigError, match="restart_completed_jobs"):
        TaskSpec.from_mapping({"restart_completed_jobs": "yes", "resources": {"cpu": 1}})


def test_revival_runs_a_restarting_task_s_completed_job_again() -> None:
    """A scheduler reviving the operation finds the job's completed record: a batch job is never run again, a
    restarting task's job is (it would have been)."""
    service = TaskSpec("service", 1, vector(user_slots=1, cpu=1), restart_completed=True)
    batch = TaskSpec("batch", 1, vector(user_slots=1, cpu=1))
    controller = LiveVanillaController("op", [service, batch])
    assert not controller.mark_completed("service", 0) and controller.mark_completed("batch", 0)
    assert controller.pending_allocation_count == 1
    assert controller.pending_task_counts() == {"service": 1}
