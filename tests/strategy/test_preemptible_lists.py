"""§d: three ordered lists per operation, thresholds, the boundary rule, the operation-level preemptible flag."""

import numpy as np

from pooltree.resources import vector
from pooltree.strategy import Allocation, PreemptibleLists, PreemptionStatus

TOTAL = vector(user_slots=100, cpu=100, memory=100)


def make_lists(fs_cpu: float, demand_cpu: float, *, aggressive: float, normal: float, threshold=None):
    lists = PreemptibleLists()
    share = lambda cpu: np.array([cpu / 100, cpu / 100, 0, 0, 0])  # noqa: E731
    lists.configure(share(fs_cpu), share(demand_cpu), TOTAL, threshold, aggressive, normal)
    return lists


def add(
    lists: PreemptibleLists, count: int, cpu: float = 1.0, start: int = 0, revived: bool = False
) -> list[Allocation]:
    out = []
    for index in range(count):
        allocation = Allocation(
            f"a{start + index}", "op", vector(user_slots=1, cpu=cpu), start_time=start + index
        )
        allocation.revived = revived
        lists.add(allocation)
        out.append(allocation)
    return out


def test_doc_example_150_allocations_split_50_50_50():
    lists = make_lists(100, 150, aggressive=0.5, normal=1.0)
    allocations = add(lists, 150)
    assert lists.counts() == {"non_preemptible": 50, "aggressively_preemptible": 50, "preemptible": 50}
    assert allocations[49].preemption_status == PreemptionStatus.NON_PREEMPTIBLE
    assert allocations[50].preemption_status == PreemptionStatus.AGGRESSIVELY_PREEMPTIBLE
    assert allocations[100].preemption_status == PreemptionStatus.PREEMPTIBLE


def test_boundary_allocation_stays_in_less_preemptible_class():
    # fair share 10 cpu; allocations of 3 cpu: prefixes before them 0, 3, 6, 9 are below 10 -> 4 stay non-preemptible
    lists = make_lists(10, 30, aggressive=1.0, normal=1.0)
    add(lists, 10, cpu=3)
    counts = lists.counts()
    assert counts["non_preemptible"] + counts["aggressively_preemptible"] == 4
    assert counts["preemptible"] == 6


def test_rebalance_after_fair_share_change_and_finish():
    lists = make_lists(100, 150, aggressive=0.5, normal=1.0)
    allocations = add(lists, 150)
    share = np.array([0.2, 0.2, 0, 0, 0])
    lists.configure(share, np.array([1.5, 1.5, 0, 0, 0]), TOTAL, None, 0.5, 1.0)
    lists.rebalance()
    assert lists.counts() == {"non_preemptible": 10, "aggressively_preemptible": 10, "preemptible": 130}
    for allocation in allocations[:15]:
        assert lists.remove(allocation)
    assert lists.counts() == {"non_preemptible": 10, "aggressively_preemptible": 10, "preemptible": 115}
    assert allocations[15].preemption_status == PreemptionStatus.NON_PREEMPTIBLE
    assert not lists.remove(allocations[0])


def test_operation_with_fair_share_equal_to_demand_has_no_preemptible_allocations():
    lists = make_lists(40, 40, aggressive=0.5, normal=1.0)
    add(lists, 60)  # usage above demand can happen transiently
    counts = lists.counts()
    assert counts["preemptible"] == 0
    assert counts["non_preemptible"] == 20
    assert counts["aggressively_preemptible"] == 40


def test_non_preemptible_usage_threshold_keeps_first_allocations():
    threshold = np.full(5, np.inf)
    threshold[0] = 5  # fewer than 5 user slots in the prefix -> below the bound
    lists = make_lists(0, 50, aggressive=0.2, normal=1.0, threshold=threshold)
    add(lists, 20)
    assert lists.counts()["non_preemptible"] == 5
    assert lists.counts()["preemptible"] == 15


def test_an_older_allocation_is_placed_by_start_time():
    # a job re-attached after a scheduler restart keeps its start time: the lists stay in start order, so the
    # latest started allocation stays the most preemptible whatever order the nodes re-attach them in
    lists = make_lists(4, 6, aggressive=1.0, normal=1.0)
    late = add(lists, 3, start=3, revived=True)  # started at 3, 4, 5 (re-attached first)
    early = add(lists, 3, start=0, revived=True)  # started at 0, 1, 2 (re-attached later)
    order = [allocation.id for allocation in lists]
    assert order == [a.id for a in (*early, *late)]
    assert lists.counts()["preemptible"] == 2
    assert [a.preemption_status for a in late[1:]] == [PreemptionStatus.PREEMPTIBLE] * 2
    assert all(a.preemption_status != PreemptionStatus.PREEMPTIBLE for a in (*early, late[0]))
