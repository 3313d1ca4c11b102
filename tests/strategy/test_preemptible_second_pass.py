"""`PreemptibleLists.rebalance` skips its second pass where it would repeat the first one's last tests (exact sums,
``_integral``): the lists, statuses and usages after every add, removal, resize, job restart and new fair share
are those of both passes run; with fractional or huge amounts (sums that round) both passes still run."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from lockstep_lists import Lockstep

from pooltree.resources import vector
from pooltree.strategy import Allocation, PreemptibleLists
from pooltree.strategy.shares import plus_floats


class _BothPasses(PreemptibleLists):
    """The rebalance before the skip: a second pass whenever the first one moved a boundary."""

    __slots__ = ()

    def rebalance(self) -> None:
        for _ in range(2):
            moved = self._balance(0, self._aggressive_bound, list(self._usage[0]))
            if not self._balance(1, self._normal, plus_floats(self._usage[0], self._usage[1])) and not moved:
                return


def _state(lists: PreemptibleLists) -> tuple:
    return (
        [(a.id, a.preemption_status.value, a.start_order) for a in lists],
        [lists.usage(index) for index in range(3)],
    )


_WHOLE = (1.0, 2.0, 3.0, 7.0, 2.0**30, 5 * 2.0**33)
_ROUNDING = (0.1, 1.0 / 3.0, 2.0**41 + 1.0, 2.0**52 + 1.0)


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["add", "add", "add", "remove", "remove", "configure", "resize", "restart"]),
            st.integers(0, 10**6),
        ),
        min_size=1,
        max_size=80,
    ),
    thresholds=st.sampled_from([(0.2, 1.0), (0.5, 1.0), (0.3, 0.6), (1.0, 1.0), (0.05, 0.3)]),
    slots_threshold=st.sampled_from([None, None, 2.0]),
    inclusive=st.booleans(),
    rounding=st.sampled_from([False, False, True]),
)
def test_the_second_pass_skipped_leaves_what_both_passes_leave(
    steps, thresholds, slots_threshold, inclusive, rounding
):
    total = vector(user_slots=100, cpu=60, memory=2.0**40, network=10)

    def shares(pick: int) -> tuple[np.ndarray, np.ndarray]:
        fair = np.array([(pick >> (3 * r)) % 8 / 16 for r in range(5)])
        demand = np.array([(pick >> (3 * r + 15)) % 8 / 16 for r in range(5)])
        return fair, demand

    def amounts(pick: int) -> np.ndarray:
        cpu = _WHOLE[pick % len(_WHOLE)] % 9 or 1.0
        memory = _WHOLE[(pick // 7) % len(_WHOLE)]
        if rounding and pick % 5 == 0:
            memory = _ROUNDING[(pick // 5) % len(_ROUNDING)]
        return vector(user_slots=1, cpu=cpu, memory=memory)

    threshold = None if slots_threshold is None else np.array([slots_threshold] + [np.inf] * 4)
    both = (PreemptibleLists(), _BothPasses())
    for lists in both:
        lists.inclusive = inclusive
        lists.configure(*shares(0o123456), total, threshold, *thresholds)
    step = Lockstep(both)
    for index, (kind, pick) in enumerate(steps):
        if kind == "add" or not step.running:
            step.add(f"a{index}", amounts(pick), index)
        elif kind == "remove":
            step.remove(pick)
        elif kind == "resize":
            step.resize(pick, amounts(pick // 3))
        elif kind == "restart":  # a gang's job restarted in its allocation
            step.replace(pick, f"r{index}", amounts(pick // 11), index)
        else:
            step.reconfigure(*shares(pick), total, threshold, *thresholds)
        skipping, plain = both
        assert _state(skipping) == _state(plain)


class _Counted(PreemptibleLists):
    __slots__ = ("balances",)

    def __init__(self) -> None:
        super().__init__()
        self.balances = 0

    def _balance(self, left, bound, cumulative):
        self.balances += 1
        return super()._balance(left, bound, cumulative)


def test_removals_from_the_front_take_one_pass_with_whole_amounts_and_two_with_rounding_ones():
    """Each finish of an early allocation moves both boundaries: the first pass moves, the second would repeat it."""

    def balances(memory: float) -> int:
        lists = _Counted()
        total = vector(user_slots=100, cpu=100, memory=2.0**40)
        fair = np.array([0.2, 0.2, 0.0, 0.0, 0.0])
        lists.configure(fair, 2 * fair, total, None, 0.2, 1.0)
        running = []
        for index in range(30):
            allocation = Allocation(f"a{index}", "op", vector(user_slots=1, cpu=1, memory=memory))
            lists.add(allocation)
            running.append(allocation)
        lists.balances = 0
        for _ in range(10):
            lists.remove(running.pop(0))
            added = Allocation(f"b{len(running)}", "op", vector(user_slots=1, cpu=1, memory=memory))
            lists.add(added)
            running.append(added)
        return lists.balances

    whole, rounding = balances(2.0**30), balances(0.1)
    assert whole < rounding, (whole, rounding)
