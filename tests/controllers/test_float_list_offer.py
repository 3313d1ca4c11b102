"""A controller offered a list of floats decides as when offered the array of them (`takes_float_lists`), and the
regular stage hands a list only to controllers that take one."""

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.config import parse_pool_trees
from pooltree.controllers.memory import TaskMemoryReserve
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy import ExecNode, NodeHeartbeat
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.elements import ControllerDefaults
from pooltree.tree import PoolTree

NODE = ExecNode("n1", vector(user_slots=100, cpu=100, memory=1000 * 2**30))
NODE_VECTOR = vector(user_slots=10, cpu=10, memory=10 * 2**30)
JOB = vector(user_slots=1, cpu=1, memory=4 * 2**30)


def make() -> VanillaController:
    return VanillaController(
        "op",
        [
            TaskSpec("big", 3, vector(user_slots=1, cpu=4, memory=2**30)),
            TaskSpec("small", 5, vector(user_slots=1, cpu=1), memory_reserve=TaskMemoryReserve()),
        ],
    )


def fields(allocation: Any) -> Any:
    if allocation is None:
        return None
    return (
        allocation.id,
        allocation.task,
        allocation.amounts,
        allocation.payload.index,
        allocation.reserve.tolist(),
    )


offers = st.lists(
    st.lists(st.floats(0, 2e12, allow_nan=False), min_size=5, max_size=5).map(
        lambda values: [values[0] % 3, values[1] % 8, values[2], values[3] % 2, values[4] % 2]
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(offers)
def test_a_list_offer_decides_as_the_array(offered: list[list[float]]) -> None:
    as_lists, as_arrays = make(), make()
    for available in offered:
        from_list = as_lists.schedule_allocation(NODE, list(available), 0.0)
        from_array = as_arrays.schedule_allocation(NODE, np.array(available), 0.0)
        assert fields(from_list) == fields(from_array)
    assert as_lists.progress() == as_arrays.progress()


class _Recording(VanillaController):
    """Records the type of every offer the strategy makes (as a controller may read it: list or array)."""

    def __init__(self, *args: Any, takes: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.takes_float_lists = takes
        self.offered: list[type] = []

    def schedule_allocation(self, node: Any, available_resources: Any, now: float) -> Any:
        self.offered.append(type(available_resources))
        return super().schedule_allocation(node, available_resources, now)


def _started(takes: bool) -> tuple[list[Any], list[type]]:
    core = SchedulerCore(PoolTree(parse_pool_trees({"t": {"pools": {"a": {}}}})["t"]))
    core.add_node("n0", NODE_VECTOR)
    controller = _Recording("op", [TaskSpec("main", 4, JOB)], takes=takes)
    core.register_operation("op", controller, user="u", pool="a")
    core.update_fair_share(0.0)
    started = core.process_heartbeat(NodeHeartbeat("n0", NODE_VECTOR), 0.0).allocations_to_start
    return [(allocation.id, allocation.amounts) for allocation in started], controller.offered


def test_the_stage_offers_lists_only_to_controllers_that_take_them() -> None:
    assert VanillaController.takes_float_lists is True
    assert ControllerDefaults.takes_float_lists is False
    with_lists, offered_lists = _started(True)
    with_arrays, offered_arrays = _started(False)
    assert with_lists == with_arrays and len(with_lists) == 2
    assert offered_lists and set(offered_lists) == {list}
    assert offered_arrays and set(offered_arrays) == {np.ndarray}
