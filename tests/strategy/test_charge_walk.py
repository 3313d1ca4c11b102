"""`StrategyState.charge` stamps the start serial and accounts the usage in one walk up the tree: the same
``last_start`` serials, usages (bit for bit), change log and preemptible lists as `stamp_start` then `account`
with ``add_floats`` then the lists' ``add`` (what it did before), for a published operation and for one whose
element runs another runtime."""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.resources import RESOURCE_COUNT
from pooltree.strategy.elements import OperationRuntime
from pooltree.strategy.model import Allocation
from pooltree.strategy.shares import add_floats, sub_floats
from pooltree.strategy.snapshot import SchedulingTree, StrategyConfig
from pooltree.strategy.state import StrategyState

floats = st.floats(0.0, 1e13, allow_nan=False, allow_infinity=False)
vectors = st.lists(floats, min_size=RESOURCE_COUNT, max_size=RESOURCE_COUNT)


class _Node:
    """What the walk reads and writes of an element."""

    def __init__(self, parent: _Node | None, usage: list[float], last_start: int) -> None:
        self.parent = parent
        self.usage = usage
        self.last_start = last_start
        self.op: Any = None


def _bits(values: list[float]) -> list[bytes]:
    return [struct.pack("<d", value) for value in values]


def _chain(pools: list[list[float]], own: list[float], runtime: OperationRuntime, published: bool) -> _Node:
    parent = None
    for index, usage in enumerate(pools):
        parent = _Node(parent, list(usage), index)
    element = _Node(parent, list(own), 7)
    element.op = runtime if published else OperationRuntime("other", controller=None)  # type: ignore[arg-type]
    return element


def _state() -> StrategyState:
    return StrategyState(SchedulingTree([1.0] * RESOURCE_COUNT, [], StrategyConfig()), None)


def _observed(state: StrategyState, element: _Node, runtime: OperationRuntime) -> Any:
    walk = []
    cursor: _Node | None = element
    while cursor is not None:
        walk.append((cursor.last_start, _bits(cursor.usage), cursor.usage is runtime.usage))
        cursor = cursor.parent
    return (
        state.start_serial,
        walk,
        _bits(runtime.usage),
        runtime.lists_settled,
        runtime.lists.state(),
        sorted(state.changes.usage),
    )


@settings(max_examples=200, deadline=None)
@given(
    pools=st.lists(vectors, max_size=4),
    own=vectors,
    runtime_usage=vectors,
    amounts=st.lists(vectors, min_size=1, max_size=4),
    published=st.booleans(),
    serial=st.integers(0, 1000),
)
def test_charge_equals_stamp_then_account(
    pools: list[list[float]],
    own: list[float],
    runtime_usage: list[float],
    amounts: list[list[float]],
    published: bool,
    serial: int,
) -> None:
    results = []
    for fused in (True, False):
        state = _state()
        state.start_serial = serial
        runtime = OperationRuntime("op", controller=None, usage=list(runtime_usage))  # type: ignore[arg-type]
        element = _chain(pools, own, runtime, published)
        for number, vector in enumerate(amounts):
            allocation = Allocation(f"op/{number}", "op", vector)
            if fused:
                state.charge(allocation, runtime, element)  # type: ignore[arg-type]
            else:
                state.stamp_start(element)  # type: ignore[arg-type]
                state.account(runtime, element, allocation.amounts, add_floats)  # type: ignore[arg-type]
                runtime.lists_settled = False
                runtime.lists.add(allocation)
        results.append(_observed(state, element, runtime))
    assert results[0] == results[1]


@settings(max_examples=200, deadline=None)
@given(
    pools=st.lists(vectors, max_size=4),
    own=vectors,
    amounts=st.lists(vectors, min_size=1, max_size=5),
    released=st.lists(st.integers(0, 4), max_size=5),
    case=st.sampled_from(["published", "other", "unpublished"]),
)
def test_release_equals_lists_remove_then_account(
    pools: list[list[float]], own: list[float], amounts: list[list[float]], released: list[int], case: str
) -> None:
    results = []
    for written_out in (True, False):
        state = _state()
        runtime = OperationRuntime("op", controller=None)  # type: ignore[arg-type]
        element = _chain(pools, own, runtime, case == "published")
        allocations = [Allocation(f"op/{n}", "op", vector) for n, vector in enumerate(amounts)]
        for allocation in allocations:
            state.charge(allocation, runtime, element)  # type: ignore[arg-type]
        target = None if case == "unpublished" else element
        for index in released:
            allocation = allocations[index % len(allocations)]
            if written_out:
                state.release(allocation, runtime, target)  # type: ignore[arg-type]
            else:
                runtime.lists_settled = False
                runtime.lists.remove(allocation)
                state.account(runtime, target, allocation.amounts, sub_floats)  # type: ignore[arg-type]
        results.append(_observed(state, element, runtime))
    assert results[0] == results[1]
