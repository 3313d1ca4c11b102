"""The preemptive stages read an operation's preemption classes from its two boundaries in the start order alone
(`PreemptibleLists.status`, `ClassBoundaries`): the classes equal the lists' own, and the golden scenarios decide
the same with the stages given nothing but the boundaries."""

import json
from pathlib import Path

import numpy as np
import pytest
from golden_trace import bench_shaped_trace, golden_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.resources import vector
from pooltree.strategy import Allocation, PreemptibleLists
from pooltree.strategy.preemptible import ClassBoundaries
from pooltree.strategy.preemption import PreemptiveStages

GOLDEN = Path(__file__).parent / "golden"


def _assert_classes_read_from_the_boundaries(lists: PreemptibleLists) -> None:
    listed = list(lists)
    orders = [allocation.start_order for allocation in listed]
    assert orders == sorted(set(orders)), "the start order numbers the listed allocations in order"
    boundaries = lists.boundaries()
    for allocation in listed:
        assert lists.status(allocation) is allocation.preemption_status
        assert boundaries.status(allocation) is allocation.preemption_status


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(
                ["add", "add", "revived", "remove", "configure", "resize", "replace", "inclusive"]
            ),
            st.integers(0, 10_000),
        ),
        min_size=1,
        max_size=60,
    ),
    thresholds=st.sampled_from([(0.2, 1.0), (0.5, 1.0), (0.3, 0.6), (1.0, 1.0)]),
    slots_threshold=st.sampled_from([None, 2.0, 5.0]),
)
def test_the_boundaries_give_every_listed_allocation_its_class(steps, thresholds, slots_threshold):
    """After every add (revived ones placed by their start time), removal, usage change, restart in place, new
    fair share and change of the bound rule, each listed allocation's class read from its start order against the
    two boundaries is the class the lists gave it."""

    def share(cpu):
        return np.array([cpu / 100, cpu / 100, 0, 0, 0])

    total = vector(user_slots=100, cpu=100)
    threshold = None if slots_threshold is None else np.array([slots_threshold] + [np.inf] * 4)
    lists = PreemptibleLists()
    lists.configure(share(30), share(60), total, threshold, *thresholds)
    running: list[Allocation] = []
    for index, (kind, pick) in enumerate(steps):
        if kind in ("add", "revived") or not running:
            allocation = Allocation(
                f"a{index}", "op", vector(user_slots=1, cpu=1 + pick % 5), start_time=float(index)
            )
            if kind == "revived":
                allocation.revived = True
                allocation.start_time = float(pick % (index + 1)) - 0.5
            lists.add(allocation)
            running.append(allocation)
        elif kind == "remove":
            assert lists.remove(running.pop(pick % len(running)))
        elif kind == "resize":
            lists.update_usage(running[pick % len(running)], vector(user_slots=1, cpu=1 + (pick // 7) % 6))
        elif kind == "replace":
            position = pick % len(running)
            old = running[position]
            new = Allocation(f"r{index}", "op", vector(user_slots=1, cpu=1 + (pick // 3) % 5))
            lists.replace(old, new)
            running[position] = new
        elif kind == "inclusive":
            lists.inclusive = not lists.inclusive
            lists.rebalance()
        else:
            lists.configure(share(pick % 101), share((pick // 101) % 151), total, threshold, *thresholds)
            lists.rebalance()
        _assert_classes_read_from_the_boundaries(lists)


def test_boundaries_of_empty_and_one_class_lists():
    lists = PreemptibleLists()
    assert lists.boundaries() == ClassBoundaries(float("inf"), float("inf"))
    total = vector(user_slots=100, cpu=100)
    lists.configure(np.zeros(5), np.ones(5) * 0.5, total, None, 0.2, 1.0)  # no fair share: all preemptible
    first = Allocation("a", "op", vector(user_slots=1, cpu=1))
    lists.add(first)
    assert lists.boundaries() == ClassBoundaries(first.start_order, first.start_order)
    _assert_classes_read_from_the_boundaries(lists)


@pytest.fixture
def stages_given_only_the_boundaries(monkeypatch):
    """The preemptive stages read each operation's classes from a `ClassBoundaries` taken at the read: two
    numbers, no allocation of the operation."""
    monkeypatch.setattr(PreemptiveStages, "classes", lambda self, runtime: runtime.lists.boundaries())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_seeded_scenarios_decide_as_the_golden_from_the_boundaries_alone(
    seed, stages_given_only_the_boundaries
):
    trace = json.loads(json.dumps(golden_trace(seed, steps=60)))
    expected = json.loads((GOLDEN / f"scheduling_trace_seed{seed}.json").read_text())
    assert trace == expected
    reasons = {p["reason"] for entry in trace for p in entry.get("preempt", ())}
    assert {"preemption", "graceful_preemption", "resource_overcommit"} <= reasons


def test_the_benchmark_scenario_decides_as_the_golden_from_the_boundaries_alone(
    stages_given_only_the_boundaries,
):
    trace = json.loads(json.dumps(bench_shaped_trace(nodes=120, operations=240, pools=24, starving_pools=6)))
    expected = json.loads((GOLDEN / "bench_trace.json").read_text())
    assert trace == expected
    assert sum(len(entry["preempt"]) for entry in trace[120:]) > 50
