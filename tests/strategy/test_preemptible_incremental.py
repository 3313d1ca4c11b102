"""Incremental removal from the preemptible lists equals a full rebalance (the hot path skips it for tails)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.resources import vector
from pooltree.strategy import Allocation, PreemptibleLists


def _snapshot(lists: PreemptibleLists) -> list[tuple[str, str]]:
    return [(a.id, a.preemption_status.value) for a in lists]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=40),
    removals=st.lists(st.integers(0, 10_000), min_size=1, max_size=20),
    fair=st.integers(0, 100),
    demand=st.integers(0, 150),
    thresholds=st.sampled_from([(0.2, 1.0), (0.5, 1.0), (0.3, 0.6), (1.0, 1.0)]),
    slots_threshold=st.sampled_from([None, 2.0, 5.0]),
)
def test_remove_leaves_the_lists_balanced(sizes, removals, fair, demand, thresholds, slots_threshold):
    def share(cpu):
        return np.array([cpu / 100, cpu / 100, 0, 0, 0])

    total = vector(user_slots=100, cpu=100)
    threshold = None if slots_threshold is None else np.array([slots_threshold] + [np.inf] * 4)
    lists = PreemptibleLists()
    lists.configure(share(fair), share(demand), total, threshold, *thresholds)
    allocations = []
    for index, size in enumerate(sizes):
        allocation = Allocation(f"a{index}", "op", vector(user_slots=1, cpu=size), start_time=index)
        lists.add(allocation)
        allocations.append(allocation)
    for pick in removals:
        if not allocations:
            break
        # bias towards the latest started (the usual victims), but remove from anywhere
        index = len(allocations) - 1 - (pick % len(allocations)) if pick % 2 else pick % len(allocations)
        victim = allocations.pop(index)
        assert lists.remove(victim)
        before = _snapshot(lists)
        lists.rebalance()
        assert _snapshot(lists) == before, f"removing {victim.id} left the lists unbalanced"
        assert [a.id for a in lists] == [a.id for a in allocations]  # start order kept
        usage = [sum(a.amounts[r] for a in allocations) for r in range(5)]
        listed = [sum(lists.usage(i)[r] for i in range(3)) for r in range(5)]
        assert np.allclose(listed, usage)
    assert not lists.remove(Allocation("missing", "op", vector(user_slots=1)))
