"""Operation controllers keep pending count, needed and min needed resources exact under any job sequence.

The controllers maintain these incrementally and lazily (they are read per allocation attempt); this compares
them after every step with a recount from the pending jobs themselves.
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.controllers.memory import TaskMemoryReserve
from pooltree.controllers.operations import MapController, TaskSpec, VanillaController
from pooltree.resources import MEMORY, vector
from pooltree.strategy import ExecNode, FinishedAllocation

NODE = ExecNode("n1", vector(user_slots=100, cpu=100, memory=1000 * 2**30))


def recount(controller) -> tuple[int, np.ndarray, np.ndarray]:
    """Pending count, needed and min needed resources computed from scratch."""
    count, needed, minimum = 0, np.zeros(5), None
    for state in controller._tasks.values():
        if not state.pending:
            continue
        per_job = state.spec.resources.copy()
        if state.spec.memory_reserve is not None:
            per_job[MEMORY] = state.spec.memory_reserve.memory_demand()
        count += len(state.pending)
        needed += per_job * len(state.pending)
        minimum = per_job if minimum is None else np.minimum(minimum, per_job)
    return count, needed, np.zeros(5) if minimum is None else minimum


def assert_exact(controller) -> None:
    count, needed, minimum = recount(controller)
    assert controller.pending_allocation_count == count
    assert np.array_equal(controller.needed_resources, needed)
    assert np.array_equal(controller.min_needed_resources, minimum)


def test_min_needed_follows_which_tasks_have_pending_jobs():
    controller = MapController(
        "m",
        [TaskSpec("small", 2, vector(user_slots=1, cpu=1)), TaskSpec("big", 1, vector(user_slots=1, cpu=3))],
    )
    assert controller.min_needed_resources[1] == 1
    assert controller.needed_resources[1] == 5
    first = controller.schedule_allocation(NODE, NODE.resource_limits, 0)
    second = controller.schedule_allocation(NODE, NODE.resource_limits, 0)
    assert first.task == second.task == "small"
    assert controller.min_needed_resources[1] == 3  # only the big task has pending jobs now
    assert controller.needed_resources[1] == 3
    controller.on_allocation_finished(first, FinishedAllocation(first.id, "aborted"), 1)
    assert controller.min_needed_resources[1] == 1 and controller.needed_resources[1] == 4
    assert_exact(controller)


@settings(max_examples=40, deadline=None)
@given(
    tasks=st.lists(st.tuples(st.integers(0, 6), st.integers(1, 4)), min_size=1, max_size=3),
    steps=st.lists(st.tuples(st.sampled_from(["start", "complete", "abort", "fail"]), st.integers(0, 99))),
    vanilla=st.booleans(),
    reserve=st.sampled_from(["none", "first", "all"]),
)
def test_pending_needed_and_min_needed_stay_exact(tasks, steps, vanilla, reserve):
    specs = [
        TaskSpec(
            f"t{index}",
            jobs,
            vector(user_slots=1, cpu=cpu, memory=cpu * 2**30),
            memory_reserve=TaskMemoryReserve()
            if reserve == "all" or (reserve == "first" and index == 0)
            else None,
        )
        for index, (jobs, cpu) in enumerate(tasks)
    ]
    controller = (VanillaController if vanilla else MapController)("op", specs)
    running = []
    assert_exact(controller)
    for action, pick in steps:
        if action == "start":
            allocation = controller.schedule_allocation(NODE, NODE.resource_limits, 0)
            if allocation is not None:
                running.append(allocation)
        elif running:
            allocation = running.pop(pick % len(running))
            state = {"complete": "completed", "abort": "aborted", "fail": "failed"}[action]
            peak = float((pick % 4 + 1) * 2**29)  # completed jobs move the memory digest (and the demand)
            finished = FinishedAllocation(
                allocation.id,
                state,
                user_job_max_memory=peak if state == "completed" else None,
                job_proxy_max_memory=float(2**27) if state == "completed" else None,
            )
            controller.on_allocation_finished(allocation, finished, 1)
        assert_exact(controller)
