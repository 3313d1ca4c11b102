"""`BestLeaf.leading`: the operations the heaps put first, read without changing a heap.

Node shards grant allocations ahead for them (`pooltree/shards/remote.py`); a guess no decision reads, so it must
leave every heap as it was; its first is the pass's first start, and in a pool of equal operations it names the
ones the next pass starts, in order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from strategykit import Kit

from pooltree.strategy import FinishedAllocation


def _heaps(kit: Kit) -> dict[str, list[tuple[object, ...]]]:
    return {
        element.id: [(*entry[:4], entry[4].id) for entry in element.heap]
        for element in kit.scheduler.state.elements.values()
        if not element.is_op
    }


@settings(max_examples=30, deadline=None)
@given(op_count=st.integers(2, 7), slots=st.integers(1, 5), rounds=st.integers(1, 12), nested=st.booleans())
def test_leading_names_the_next_starts_and_changes_no_heap(
    op_count: int, slots: int, rounds: int, nested: bool
) -> None:
    kit = Kit(node_count=1, node_cpu=float(slots))
    kit.pool("p")
    shares: dict[str, float] = {"p": float(slots)}
    for index in range(op_count):
        pool = "p"
        if nested:
            pool = f"p{index % 2}"
            if pool not in shares:
                kit.pool(pool, "p")
                shares[pool] = slots / 2
        kit.operation(f"op{index}", pool, jobs=1000)
        shares[f"op{index}"] = slots / op_count
    kit.set_fair_share(shares)
    kit.publish(0.0)
    previous: list[str] = []
    for step in range(rounds):
        for allocation_id in previous:  # the node's reports first, as a heartbeat takes them before its pass
            kit.scheduler.finish_allocation(FinishedAllocation(allocation_id, "completed"), float(step + 1))
        before = _heaps(kit)
        leading = [element.id for element in kit.scheduler.heaps.leading(slots)]
        assert _heaps(kit) == before  # read only: no entry popped, pushed or moved
        assert len(leading) == len(set(leading)) and all(op.startswith("op") for op in leading)
        result = kit.heartbeat(0, float(step + 1))
        started = [allocation.operation_id for allocation in result.allocations_to_start]
        previous = [allocation.id for allocation in result.allocations_to_start]
        if started:  # the pass's first start is the best leaf: the first leading operation
            assert started[0] == leading[0]
        if not nested and op_count >= slots and step > 0:
            # a pool of equal operations, each slot freed at once: every start goes to the next leading one
            assert started == leading[: len(started)]
