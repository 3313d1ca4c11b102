"""Incremental removal from the preemptible lists equals a full rebalance (the hot path skips it for tails)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from lockstep_lists import Lockstep

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


class _TwoPasses(PreemptibleLists):
    """The rebalance before the skip: both passes always run."""

    __slots__ = ()

    def rebalance(self) -> None:
        for _ in range(2):
            self._balance(0, self._aggressive_bound, list(self._usage[0]))
            cumulative = [a + b for a, b in zip(self._usage[0], self._usage[1], strict=True)]
            self._balance(1, self._normal, cumulative)


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["add", "remove", "configure", "resize"]), st.integers(0, 10_000)),
        min_size=1,
        max_size=60,
    ),
    thresholds=st.sampled_from([(0.2, 1.0), (0.5, 1.0), (0.3, 0.6), (1.0, 1.0)]),
    slots_threshold=st.sampled_from([None, 2.0, 5.0]),
    inclusive=st.booleans(),
)
def test_a_rebalance_whose_first_pass_moves_nothing_skips_the_second_with_the_same_lists(
    steps, thresholds, slots_threshold, inclusive
):
    """``rebalance`` returns after a first pass that moved no boundary: the lists, usages and statuses after every
    add, removal, usage change and new fair share are those of both passes run."""

    def share(cpu):
        return np.array([cpu / 100, cpu / 100, 0, 0, 0])

    total = vector(user_slots=100, cpu=100)
    threshold = None if slots_threshold is None else np.array([slots_threshold] + [np.inf] * 4)
    both = (PreemptibleLists(), _TwoPasses())
    for lists in both:
        lists.inclusive = inclusive
        lists.configure(share(30), share(60), total, threshold, *thresholds)
    step = Lockstep(both)
    for index, (kind, pick) in enumerate(steps):
        if kind == "add" or not step.running:
            step.add(f"a{index}", vector(user_slots=1, cpu=1 + pick % 5), index)
        elif kind == "remove":
            step.remove(pick)
        elif kind == "resize":
            step.resize(pick, vector(user_slots=1, cpu=1 + (pick // 7) % 6))
        else:
            step.reconfigure(share(pick % 101), share((pick // 101) % 151), total, threshold, *thresholds)
        fast, plain = both
        assert _snapshot(fast) == _snapshot(plain)
        for list_index in range(3):
            assert fast.usage(list_index) == plain.usage(list_index)
