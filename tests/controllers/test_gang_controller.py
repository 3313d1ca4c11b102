"""YTsaurus's gang controller rules in VanillaController (a task with ``gang_options``)."""

from __future__ import annotations

import pytest

from pooltree.config import OperationSpec
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.errors import ConfigError
from pooltree.resources import vector
from pooltree.strategy import AbortReason, ExecNode, FinishedAllocation, PreemptionRecord, SchedulingStage

GiB = 1024.0**3
NODE = ExecNode("n", vector(user_slots=100, cpu=100, memory=100 * GiB))


def _started(gang_size: int | None, jobs: int = 3) -> tuple[VanillaController, list]:
    task = TaskSpec("main", jobs, vector(user_slots=1, cpu=1, memory=GiB), gang_size=gang_size)
    controller = VanillaController("op", [task])
    allocations = [controller.schedule_allocation(NODE, NODE.resource_limits, 0.0) for _ in range(jobs)]
    return controller, allocations


def _preempted(allocation) -> None:
    allocation.preemption = PreemptionRecord(
        allocation.id, "op", "n", AbortReason.PREEMPTION, 0.0, "", SchedulingStage.PREEMPTIVE_NORMAL, 1.0
    )


@pytest.mark.parametrize(
    ("state", "preempted", "switches"),
    [
        ("failed", False, True),
        ("aborted", False, True),
        ("aborted", True, True),  # preempted
        ("completed", True, True),  # interrupted
        ("completed", False, False),  # done: the rank completed
    ],
)
def test_which_endings_of_a_ranked_job_switch_the_incarnation(
    state: str, preempted: bool, switches: bool
) -> None:
    controller, allocations = _started(gang_size=3)
    if preempted:
        _preempted(allocations[0])
    controller.on_allocation_finished(allocations[0], FinishedAllocation(allocations[0].id, state), 1.0)
    assert controller.take_incarnation_switch() is switches
    assert controller.take_incarnation_switch() is False  # taken once
    assert controller.incarnation == int(switches)


def test_no_switch_without_gang_options_for_unranked_jobs_or_older_incarnations() -> None:
    plain, allocations = _started(gang_size=None)
    plain.on_allocation_finished(allocations[0], FinishedAllocation(allocations[0].id, "aborted"), 1.0)
    assert not plain.take_incarnation_switch()
    gang, allocations = _started(gang_size=2)  # job index 2 holds no rank
    gang.on_allocation_finished(allocations[2], FinishedAllocation(allocations[2].id, "aborted"), 1.0)
    assert not gang.take_incarnation_switch()
    gang.on_allocation_finished(allocations[0], FinishedAllocation(allocations[0].id, "aborted"), 1.0)
    assert gang.take_incarnation_switch() and gang.incarnation == 1
    # allocations[1] still runs a job of incarnation 0: losing it now switches nothing more
    gang.on_allocation_finished(allocations[1], FinishedAllocation(allocations[1].id, "aborted"), 1.0)
    assert not gang.take_incarnation_switch() and gang.incarnation == 1


def test_a_switch_reruns_completed_jobs_and_restart_job_keeps_the_allocation() -> None:
    controller, allocations = _started(gang_size=3)
    controller.on_allocation_finished(allocations[0], FinishedAllocation(allocations[0].id, "completed"), 1.0)
    controller.on_allocation_finished(allocations[1], FinishedAllocation(allocations[1].id, "failed"), 2.0)
    assert controller.take_incarnation_switch()
    assert controller.pending_allocation_count == 2  # the failed one and the completed one (LostAll)
    restarted = controller.restart_job(allocations[2], 3.0)
    assert restarted is not None and restarted.id != allocations[2].id
    assert restarted.node_address == "n" and restarted.payload.index == allocations[2].payload.index
    assert restarted.payload.incarnation == 1 and restarted.start_time == 3.0
    assert controller.aborted_job_count_by_reason["operation_incarnation_changed"] == 1
    assert controller.running_allocation_count == 1
    assert controller.progress()["operation_incarnation"] == 1
    assert "operation_incarnation" not in _started(gang_size=None)[0].progress()


def test_restart_job_returns_none_when_the_job_no_longer_fits_its_allocation() -> None:
    controller, allocations = _started(gang_size=3)
    small = allocations[0]
    small.resources = small.resources / 2
    assert controller.restart_job(small, 1.0) is None
    assert controller.pending_allocation_count == 1 and controller.running_allocation_count == 2


def test_gang_options_in_the_spec() -> None:
    spec = OperationSpec.parse(
        {"tasks": {"m": {"command": "x", "job_count": 4, "gang_options": {"size": 2}}}}
    )
    assert spec.tasks["m"].gang_size == 2
    assert (
        OperationSpec.parse({"tasks": {"m": {"command": "x", "job_count": 4, "gang_options": {}}}})
        .tasks["m"]
        .gang_size
        == 4
    )
    assert (
        OperationSpec.parse({"tasks": {"m": {"command": "x", "job_count": 4}}}).tasks["m"].gang_size is None
    )
    with pytest.raises(ConfigError) as info:
        OperationSpec.parse({"tasks": {"m": {"command": "x", "job_count": 4, "gang_options": {"size": 5}}}})
    assert info.value.path == "tasks.m.gang_options.size"
    with pytest.raises(ConfigError):
        TaskSpec("m", 2, vector(user_slots=1), gang_size=3)
