"""An allocation a controller starts carries the floats of its resources made once (``Allocation(amounts=...)``):
the same ``amounts``, ``resources`` and ``reserve`` as an allocation that makes them itself."""

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.controllers.memory import TaskMemoryReserve
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import RESOURCE_COUNT, vector
from pooltree.strategy import ExecNode, FinishedAllocation
from pooltree.strategy.model import Allocation

NODE = ExecNode("n1", vector(user_slots=100, cpu=100, memory=1000 * 2**30))
floats = st.floats(0, 2e12, allow_nan=False, allow_infinity=False)


def fields(allocation: Allocation) -> tuple[Any, ...]:
    return (
        allocation.amounts,
        [type(value) for value in allocation.amounts],
        allocation.resources.tolist(),
        allocation.resources.dtype,
        allocation.reserve.tolist(),
        allocation.reserve is allocation.resources,
        allocation.preemption_status,
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(floats, min_size=RESOURCE_COUNT, max_size=RESOURCE_COUNT))
def test_given_amounts_make_the_same_allocation(values: list[float]) -> None:
    resources = np.array(values, dtype=float)
    made = Allocation("a", "op", resources.copy())
    given_amounts = Allocation("a", "op", resources.copy(), amounts=tuple(resources.tolist()))
    assert fields(given_amounts) == fields(made)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.0, 4e9), st.sampled_from(["completed", "aborted", "failed"])), max_size=12)
)
def test_a_controllers_start_carries_its_resources_floats(ends: list[tuple[float, str]]) -> None:
    controller = VanillaController(
        "op",
        [TaskSpec("small", 30, vector(user_slots=1, cpu=1), memory_reserve=TaskMemoryReserve())],
    )
    available = [100.0, 100.0, 8.0, 1e18, 100.0]
    for memory, state in ends:
        allocation = controller.schedule_allocation(NODE, available, 0.0)
        assert allocation is not None
        assert fields(allocation) == fields(Allocation("a", "op", allocation.resources.copy()))
        controller.on_allocation_finished(
            allocation, FinishedAllocation(allocation.id, state, user_job_max_memory=memory), 1.0
        )
