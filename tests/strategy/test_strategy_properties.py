"""Properties: the normal preemptive stage only takes Preemptible allocations; incremental list append is exact."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from strategykit import Kit

from pooltree.resources import vector
from pooltree.strategy import Allocation, PreemptibleLists, SchedulingStage, StrategyConfig


@settings(max_examples=25, deadline=None)
@given(
    fills=st.lists(st.tuples(st.integers(1, 30), st.sampled_from([1.0, 2.0, 3.0])), min_size=1, max_size=4),
    shares=st.lists(st.integers(0, 30), min_size=6, max_size=6),
    thresholds=st.sampled_from([(0.2, 1.0), (0.5, 1.0), (0.5, 0.8), (1.0, 1.0)]),
    conditional=st.booleans(),
)
def test_normal_preemptive_stage_never_preempts_non_preemptible(fills, shares, thresholds, conditional):
    config = StrategyConfig(
        aggressive_preemption_satisfaction_threshold=thresholds[0],
        preemption_satisfaction_threshold=thresholds[1],
        enable_conditional_preemption=conditional,
        fair_share_starvation_timeout=1.0,
        fair_share_aggressive_starvation_timeout=1.0,
    )
    kit = Kit(node_count=3, node_cpu=10, config=config)
    kit.pool("parent")
    for index, (jobs, cpu) in enumerate(fills):
        kit.pool(f"p{index}", "parent")
        kit.operation(f"op{index}", f"p{index}", jobs=jobs, cpu=cpu)
    kit.set_fair_share(
        {
            "parent": 30,
            **{f"p{i}": 30 / len(fills) for i in range(len(fills))},
            **{f"op{i}": 30 / len(fills) for i in range(len(fills))},
        }
    )
    kit.round(0)
    kit.pool("late")
    kit.operation("late-op", "late", jobs=30, cpu=1.0)
    fair = {f"op{i}": shares[i] for i in range(len(fills))}
    fair.update({f"p{i}": shares[i] for i in range(len(fills))})
    fair.update({"late": shares[5], "late-op": shares[5], "parent": sum(shares[: len(fills)])})
    kit.set_fair_share(fair)
    kit.publish(1)
    for t in (10.0, 20.0):
        for result in kit.round(t):
            for record in result.allocations_to_preempt:
                if record.stage == SchedulingStage.PREEMPTIVE_NORMAL:
                    assert record.allocation_status.value == "preemptible"
    for node in kit.scheduler.nodes.values():
        assert np.all(node.usage <= node.resource_limits + 1e-9)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=60),
    fair=st.integers(0, 100),
    demand=st.integers(0, 150),
    thresholds=st.sampled_from([(0.2, 1.0), (0.5, 1.0), (0.3, 0.6), (1.0, 1.0)]),
)
def test_incremental_append_matches_full_rebalance(sizes, fair, demand, thresholds):
    def share(cpu):
        return np.array([cpu / 100, cpu / 100, 0, 0, 0])

    total = vector(user_slots=100, cpu=100)
    incremental, full = PreemptibleLists(), PreemptibleLists()
    for lists in (incremental, full):
        lists.configure(share(fair), share(demand), total, None, *thresholds)
    for index, size in enumerate(sizes):
        a = Allocation(f"a{index}", "op", vector(user_slots=1, cpu=size), start_time=index)
        b = Allocation(f"a{index}", "op", vector(user_slots=1, cpu=size), start_time=index)
        incremental.add(a)
        full.add(b)
        full.rebalance()
        assert incremental.counts() == full.counts()
