"""The tree's ``consider_allocation_on_fair_share_bound_preemptible`` (issue 30): the allocation that crosses a
boundary of §d belongs to the more preemptible class; off (the default) it stays in the less preemptible one.
The incremental lists give the same classes as lists rebuilt from scratch (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_preemptible_lists import add, make_lists

from pooltree.config import parse_pool_trees
from pooltree.config.support import unsupported_options
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy import Allocation, PreemptionStatus
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

NP, AP, P = (
    PreemptionStatus.NON_PREEMPTIBLE,
    PreemptionStatus.AGGRESSIVELY_PREEMPTIBLE,
    PreemptionStatus.PREEMPTIBLE,
)


def _statuses(inclusive: bool) -> list[PreemptionStatus]:
    # fair share 10 cpu; aggressive bound 2 cpu, normal bound 10 cpu; allocations of 3 cpu
    lists = make_lists(10, 30, aggressive=0.2, normal=1.0)
    lists.inclusive = inclusive
    return [a.preemption_status for a in add(lists, 5, cpu=3.0)]


def test_the_crossing_allocation_changes_class_with_the_option() -> None:
    # prefixes before each: 0 3 6 9 12; including each: 3 6 9 12 15
    assert _statuses(False) == [NP, AP, AP, AP, P]
    assert _statuses(True) == [AP, AP, AP, P, P]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 6)), min_size=1, max_size=25))
def test_incremental_lists_agree_with_lists_built_from_scratch(steps: list[tuple[bool, int]]) -> None:
    lists = make_lists(12, 40, aggressive=0.3, normal=1.0)
    lists.inclusive = True
    live: list[Allocation] = []
    for index, (remove, cpu) in enumerate(steps):
        if remove and live:
            lists.remove(live.pop(index % len(live)))
        else:
            allocation = Allocation(f"a{index}", "op", vector(user_slots=1, cpu=cpu), start_time=index)
            lists.add(allocation)
            live.append(allocation)
        fresh = make_lists(12, 40, aggressive=0.3, normal=1.0)
        fresh.inclusive = True
        copies = [Allocation(a.id, "op", a.resources, start_time=a.start_time) for a in live]
        for copy in copies:
            fresh.add(copy)
        fresh.rebalance()
        assert [a.preemption_status for a in live] == [c.preemption_status for c in copies]


def test_the_tree_option_reaches_every_operations_lists() -> None:
    trees = parse_pool_trees(
        {"t": {"config": {"consider_allocation_on_fair_share_bound_preemptible": True}, "pools": {"a": {}}}}
    )
    assert unsupported_options(trees) == []
    core = SchedulerCore(PoolTree(trees["t"]))
    assert core.strategy.allocation_on_bound_preemptible
    controller = VanillaController("op", [TaskSpec("main", 1, vector(user_slots=1, cpu=1))])
    core.register_operation("op", controller, user="u", pool="a", spec={"pool": "a"})
    assert core.strategy.operations["op"].lists.inclusive
    core.strategy.set_allocation_on_bound_preemptible(False)
    assert not core.strategy.operations["op"].lists.inclusive
