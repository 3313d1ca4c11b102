"""Operation controllers: vanilla restarts, map-like interruption hand-back, memory reserves, bad input."""

import pytest

from pooltree.controllers.memory import TaskMemoryReserve
from pooltree.controllers.operations import MapController, TaskSpec, VanillaController, make_controller
from pooltree.errors import ConfigError
from pooltree.resources import vector
from pooltree.strategy import AbortReason, ExecNode, FinishedAllocation, PreemptionRecord, SchedulingStage

NODE = ExecNode("n1", vector(user_slots=10, cpu=10, memory=100 * 2**30))


def preempt(allocation, reason=AbortReason.PREEMPTION):
    allocation.preemption = PreemptionRecord(
        allocation.id,
        allocation.operation_id,
        "n1",
        reason,
        10.0,
        "test",
        SchedulingStage.PREEMPTIVE_NORMAL,
        0.0,
    )


def test_vanilla_restarts_preempted_jobs_and_completes_when_all_done():
    controller = VanillaController("v", [TaskSpec("main", 2, vector(user_slots=1, cpu=1))])
    first = controller.schedule_allocation(NODE, NODE.resource_limits, 0)
    second = controller.schedule_allocation(NODE, NODE.resource_limits, 0)
    assert controller.schedule_allocation(NODE, NODE.resource_limits, 0) is None
    preempt(first, AbortReason.GRACEFUL_PREEMPTION)
    controller.on_allocation_finished(first, FinishedAllocation(first.id, "completed"), 5)
    assert controller.pending_allocation_count == 1 and controller.interrupted_job_count == 1
    controller.on_allocation_finished(second, FinishedAllocation(second.id, "completed"), 6)
    assert not controller.is_completed
    again = controller.schedule_allocation(NODE, NODE.resource_limits, 7)
    assert again.payload.index == first.payload.index and again.payload.attempt == 1
    controller.on_allocation_finished(again, FinishedAllocation(again.id, "completed"), 8)
    assert controller.is_completed and controller.completed_job_count == 2


def test_map_interrupted_job_hands_back_unprocessed_input_and_abort_requeues_whole():
    controller = MapController("m", [TaskSpec("map", 1, vector(user_slots=1, cpu=1), interruptible=True)])
    allocation = controller.schedule_allocation(NODE, NODE.resource_limits, 0)
    assert allocation.interruptible
    preempt(allocation)
    controller.on_allocation_finished(allocation, FinishedAllocation(allocation.id, "completed", 0.75), 1)
    assert controller.pending_allocation_count == 1
    assert controller.processed_fraction_pending == pytest.approx(0.25)
    rest = controller.schedule_allocation(NODE, NODE.resource_limits, 2)
    controller.on_allocation_finished(rest, FinishedAllocation(rest.id, "aborted"), 3)
    assert controller.aborted_job_count_by_reason["other"] == 1
    assert controller.processed_fraction_pending == pytest.approx(0.25)
    last = controller.schedule_allocation(NODE, NODE.resource_limits, 4)
    controller.on_allocation_finished(last, FinishedAllocation(last.id, "completed"), 5)
    assert controller.is_completed


def test_allocation_must_fit_available_resources_and_min_needed():
    controller = make_controller(
        "m",
        "map",
        [
            {"name": "big", "job_count": 1, "resources": {"cpu": 8}},
            {"name": "small", "job_count": 2, "resources": {"cpu": 1}},
        ],
    )
    assert controller.min_needed_resources[1] == 1
    assert controller.needed_resources[1] == 10
    allocation = controller.schedule_allocation(NODE, vector(user_slots=5, cpu=4, memory=1), 0)
    assert allocation.task == "small"


def test_memory_demand_comes_from_task_memory_reserve():
    reserve = TaskMemoryReserve()
    task = TaskSpec("main", 1, vector(user_slots=1, cpu=1, memory=1), memory_reserve=reserve)
    controller = MapController("m", [task])
    allocation = controller.schedule_allocation(NODE, NODE.resource_limits, 0)
    assert allocation.resources[3] == pytest.approx(reserve.memory_demand())
    assert allocation.resources[3] > 1


@pytest.mark.parametrize(
    ("kind", "tasks", "field"),
    [
        ("map", [{"job_count": -1}], "operations.x.tasks[0].job_count"),
        ("map", [{"resources": {"cpus": 1}}], "operations.x.tasks[0].resources.cpus"),
        ("spark", [{}], "operations.x.type"),
        ("map", [], "operations.x.tasks"),
    ],
)
def test_bad_workload_names_the_field(kind, tasks, field):
    with pytest.raises(ConfigError) as error:
        make_controller("x", kind, tasks)
    assert error.value.path == field
