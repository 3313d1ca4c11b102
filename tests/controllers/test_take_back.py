"""`take_back` undoes `schedule_allocation` exactly: a controller that granted allocations ahead and took the
unused ones back (last made first) is the controller that was only asked for the used ones. Node shards grant
claims ahead by it (`pooltree/shards/remote.py`); their decisions stay the single process's only if nothing of a
taken-back allocation is left: not the job's place in its task's queue, not its attempt, not the allocation
number, not its memory reserve, not the counters."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.controllers.memory import TaskMemoryReserve
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.errors import PooltreeError
from pooltree.resources import vector
from pooltree.strategy import ExecNode, FinishedAllocation

NODE = ExecNode("n1", vector(user_slots=100, cpu=100, memory=1000 * 2**30))
SMALL = vector(user_slots=1, cpu=1, memory=2**30)


def make() -> VanillaController:
    return VanillaController(
        "op",
        [
            TaskSpec("big", 3, vector(user_slots=1, cpu=4, memory=2**30)),
            TaskSpec("small", 5, vector(user_slots=1, cpu=1), memory_reserve=TaskMemoryReserve()),
        ],
    )


def observed(controller: VanillaController) -> dict[str, Any]:
    """Everything a later start or end of the controller reads or reports."""
    return {
        "pending": {
            name: [(job.index, job.attempt, job.fraction) for job in state.pending]
            for name, state in controller._tasks.items()
        },
        "running": {name: state.running for name, state in controller._tasks.items()},
        "jobs": sorted((aid, job.task, job.index, job.attempt) for aid, job in controller._running.items()),
        "next": controller._next_allocation,
        "reserves": sorted(controller._tasks["small"].spec.memory_reserve._running),  # type: ignore[union-attr]
        "count": controller.pending_allocation_count,
        "needed": controller.needed_resources.tolist(),
        "min_needed": controller.min_needed_resources.tolist(),
        "progress": controller.progress(),
    }


def fields(allocation: Any) -> tuple[Any, ...]:
    return (allocation.id, allocation.task, allocation.amounts, allocation.payload.index)


steps = st.lists(
    st.one_of(
        st.tuples(st.just("grant"), st.integers(0, 4), st.integers(0, 4), st.booleans()),
        st.tuples(st.just("end"), st.integers(0, 20), st.sampled_from(["completed", "aborted", "failed"])),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(steps=steps)
def test_grants_taken_back_leave_the_controller_as_if_never_made(steps: list[tuple[Any, ...]]) -> None:
    granting, plain = make(), make()
    running: list[tuple[Any, Any]] = []  # (granting's allocation, plain's allocation), in start order
    now = 0.0
    for step in steps:
        now += 1.0
        if step[0] == "grant":
            _, made, used, small_only = step
            offered = SMALL if small_only else NODE.resource_limits
            grants = []
            for _ in range(made):
                allocation = granting.schedule_allocation(NODE, offered, now)
                if allocation is None:
                    break
                grants.append(allocation)
            used = min(used, len(grants))
            for allocation in reversed(grants[used:]):
                granting.take_back(allocation)
            for allocation in grants[:used]:
                twin = plain.schedule_allocation(NODE, offered, now)
                assert twin is not None and fields(twin) == fields(allocation)
                running.append((allocation, twin))
        elif running:
            _, index, state = step
            allocation, twin = running.pop(index % len(running))
            granting.on_allocation_finished(allocation, FinishedAllocation(allocation.id, state), now)
            plain.on_allocation_finished(twin, FinishedAllocation(twin.id, state), now)
        assert observed(granting) == observed(plain)


def test_a_speculating_controller_refuses_to_take_back() -> None:
    controller = make()
    allocation = controller.schedule_allocation(NODE, NODE.resource_limits, 0.0)
    assert allocation is not None and controller.can_take_back
    controller.speculation = object()  # type: ignore[assignment]
    assert not controller.can_take_back
    with pytest.raises(PooltreeError, match="cannot be taken back"):
        controller.take_back(allocation)


def test_an_allocation_not_running_is_refused() -> None:
    controller = make()
    allocation = controller.schedule_allocation(NODE, NODE.resource_limits, 0.0)
    assert allocation is not None
    controller.on_allocation_finished(allocation, FinishedAllocation(allocation.id, "completed"), 1.0)
    with pytest.raises(PooltreeError, match="is not running"):
        controller.take_back(allocation)
