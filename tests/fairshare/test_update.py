"""Hand-computed fair-share scenarios (yt-semantics §b, §c)."""

from __future__ import annotations

import numpy as np
import pytest

from pooltree.errors import ConfigError
from pooltree.fairshare import (
    BELOW_FAIR_SHARE,
    NORMAL,
    IntegralGuarantees,
    Operation,
    Pool,
    UpdateSettings,
    UpdateState,
    is_below_fair_share,
    local_satisfaction_ratio,
    strictly_dominates_non_blocked,
    update_fair_share,
)
from pooltree.resources import share, vector

GB = 1024.0**3
CPU100 = vector(user_slots=100, cpu=100, memory=1000 * 2**20)


def op(name: str, demand: np.ndarray, usage: np.ndarray | None = None, **kw: object) -> Operation:
    return Operation(name, demand=demand, usage=np.zeros(5) if usage is None else usage, **kw)  # type: ignore[arg-type]


def guaranteed(name: str, cpu: float, children: list, **kw: object) -> Pool:
    return Pool(
        name,
        strong_guarantee_resources=vector(cpu=cpu),
        specified_guarantee_resources=frozenset({"cpu"}),
        children=children,
        **kw,  # type: ignore[arg-type]
    )


def run(
    root: Pool,
    total: np.ndarray = CPU100,
    settings: UpdateSettings | None = None,
    now: float = 0.0,
    state=None,
):
    return update_fair_share(root, total, settings or UpdateSettings(), now, state)


def big(cpu: float = 1000) -> np.ndarray:
    return vector(user_slots=cpu, cpu=cpu)


def test_children_of_a_pool_share_equally_and_sum_to_the_pool():
    demand = vector(user_slots=10, cpu=10, memory=100)
    root = Pool("<Root>", children=[Pool("A", children=[op("o1", demand), op("o2", demand)]), Pool("B")])
    r = run(root)
    expected = share(demand, CPU100)
    np.testing.assert_allclose(r.elements["o1"].fair_share, expected, atol=1e-9)
    np.testing.assert_allclose(r.elements["A"].fair_share, 2 * expected, atol=1e-9)
    np.testing.assert_allclose(r.elements["<Root>"].fair_share, 2 * expected, atol=1e-9)
    np.testing.assert_allclose(r.elements["B"].fair_share, 0, atol=1e-12)


def test_one_large_operation_is_capped_by_the_saturated_resource():
    root = Pool(
        "<Root>", children=[Pool("A", children=[op("x", vector(200, 200, 0, 4000 * 2**20, 0))]), Pool("B")]
    )
    r = run(root)
    np.testing.assert_allclose(r.elements["x"].fair_share, [0.5, 0.5, 0, 1.0, 0], atol=1e-9)
    np.testing.assert_allclose(r.elements["x"].limited_demand_share, [0.5, 0.5, 0, 1.0, 0], atol=1e-9)


@pytest.mark.parametrize(("a", "b", "share_a", "share_b"), [(30, 90, 0.25, 0.75), (30, 120, 0.2, 0.8)])
def test_overcommitted_guarantees_shrink_proportionally(a, b, share_a, share_b):
    root = Pool(
        "<Root>", children=[guaranteed("A", a, [op("a", big())]), guaranteed("B", b, [op("b", big())])]
    )
    r = run(root)
    assert r.elements["A"].strong_guarantee_share[1] == pytest.approx(share_a)
    assert r.elements["B"].strong_guarantee_share[1] == pytest.approx(share_b)
    assert r.elements["A"].fair_share[1] == pytest.approx(share_a)
    assert r.elements["B"].fair_share[1] == pytest.approx(share_b)
    assert r.elements["A"].inferred_strong_guarantee_resources[1] == a  # absolute, before shrinking
    assert [e.code for e in r.errors] == [29000, 29000]


def test_strong_and_burst_overcommit_shrink_together():
    burst = Pool(
        "burst",
        integral_guarantees=IntegralGuarantees(
            "burst", burst_guarantee_resources=vector(cpu=60), resource_flow=vector(cpu=10)
        ),
    )
    root = Pool("<Root>", children=[guaranteed("strong", 90, []), burst])
    r = run(root)
    assert r.elements["strong"].strong_guarantee_share[1] == pytest.approx(0.6)
    assert r.elements["burst"].burst_ratio == pytest.approx(0.4)
    assert any("burst guarantees exceed" in e.message for e in r.errors)


def test_guarantee_plus_equal_suggestion():
    # A is guaranteed 70%; both demand everything: A gets 0.7 + s, B gets s, s = 0.15.
    root = Pool(
        "<Root>", children=[guaranteed("A", 70, [op("a", big())]), Pool("B", children=[op("b", big())])]
    )
    r = run(root)
    assert r.elements["A"].fair_share[1] == pytest.approx(0.85)
    assert r.elements["B"].fair_share[1] == pytest.approx(0.15)
    detailed = r.elements["A"].detailed_fair_share
    assert detailed.strong_guarantee[1] == pytest.approx(0.7)
    assert detailed.weight_proportional[1] == pytest.approx(0.15)


def test_guarantee_is_met_when_demand_covers_it_and_unused_part_is_shared():
    root = Pool(
        "<Root>", children=[guaranteed("A", 70, [op("a", big(20))]), Pool("B", children=[op("b", big())])]
    )
    r = run(root)
    assert r.elements["A"].fair_share[1] == pytest.approx(0.2)
    assert r.elements["B"].fair_share[1] == pytest.approx(0.8)


def test_weights_two_to_one():
    root = Pool(
        "<Root>",
        children=[
            Pool("heavy", weight=2.0, children=[op("h", big())]),
            Pool("light", children=[op("l", big())]),
        ],
    )
    r = run(root)
    assert r.elements["heavy"].fair_share[1] == pytest.approx(2 / 3)
    assert r.elements["light"].fair_share[1] == pytest.approx(1 / 3)
    assert r.elements["heavy"].weight == 2.0


def test_drf_paper_example():
    total = vector(user_slots=1000, cpu=9, memory=18 * GB)
    a = op("A", vector(user_slots=100, cpu=100, memory=400 * GB))  # tasks <1 CPU, 4 GB>
    b = op("B", vector(user_slots=100, cpu=300, memory=100 * GB))  # tasks <3 CPU, 1 GB>
    root = Pool("<Root>", children=[Pool("users", children=[a, b])])
    r = run(root, total)
    fa, fb = r.elements["A"].fair_share, r.elements["B"].fair_share
    assert fa[1] * 9 == pytest.approx(3)  # three tasks of A: 3 CPU, 12 GB
    assert fa[3] * 18 == pytest.approx(12)
    assert fb[1] * 9 == pytest.approx(6)  # two tasks of B: 6 CPU, 2 GB
    assert fb[3] * 18 == pytest.approx(2)
    assert max(fa[1:]) == pytest.approx(2 / 3)
    assert max(fb[1:]) == pytest.approx(2 / 3)


def test_resource_limits_and_max_share_ratio_cap_fair_share():
    limited = Pool(
        "limited",
        specified_resource_limits=vector(np.inf, 30, np.inf, np.inf, np.inf),
        children=[op("a", big())],
    )
    ratio = Pool("ratio", max_share_ratio=0.2, children=[op("b", big())])
    root = Pool("<Root>", children=[limited, ratio, Pool("rest", children=[op("c", big())])])
    r = run(root)
    assert r.elements["limited"].limits_share[1] == pytest.approx(0.3)
    assert r.elements["limited"].resource_limits[1] == pytest.approx(30)
    assert r.elements["limited"].fair_share[1] == pytest.approx(0.3)
    assert r.elements["ratio"].fair_share[1] == pytest.approx(0.2)
    assert r.elements["rest"].fair_share[1] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("params", "winner"),
    [
        (("weight", "start_time"), "heavy"),
        (("start_time",), "early"),
        (("pending_allocation_count",), "small"),
    ],
)
def test_fifo_order_by_each_sort_parameter(params, winner):
    ops = [
        op("heavy", big(60), weight=3.0, start_time=30.0, pending_allocation_count=60),
        op("early", big(60), start_time=10.0, pending_allocation_count=50),
        op("small", big(60), start_time=20.0, pending_allocation_count=5),
    ]
    root = Pool("<Root>", children=[Pool("queue", mode="fifo", fifo_sort_parameters=params, children=ops)])
    r = run(root)
    assert r.elements[winner].fifo_index == 0
    assert r.elements[winner].fair_share[1] == pytest.approx(0.6)
    second = next(e for e in ("heavy", "early", "small") if r.elements[e].fifo_index == 1)
    assert r.elements[second].fair_share[1] == pytest.approx(0.4)
    assert sum(r.elements[e].fair_share[1] for e in ("heavy", "early", "small")) == pytest.approx(1.0)


@pytest.mark.parametrize(("demand", "expected"), [(50.0, 0.5), (100.0, 0.0)])
def test_gang_step_function_is_left_continuous(demand, expected):
    settings = UpdateSettings(enable_step_function_for_gang_operations=True)
    gang = op("gang", vector(user_slots=1, cpu=demand), is_gang=True)
    root = Pool("<Root>", children=[Pool("p", children=[gang])])
    r = run(root, vector(user_slots=100, cpu=100), settings)
    # The step jumps to demand at suggestion = dominant demand share; at the jump the left value (0) counts.
    assert r.elements["gang"].fair_share[1] == pytest.approx(expected)
    without = run(root, vector(user_slots=100, cpu=100))
    assert without.elements["gang"].fair_share[1] == pytest.approx(demand / 100)


@pytest.mark.parametrize("kind", ["burst", "relaxed"])
def test_integral_pool_accumulates_volume_across_updates(kind):
    ig = IntegralGuarantees(kind, resource_flow=vector(cpu=10))
    if kind == "burst":
        ig.burst_guarantee_resources = vector(cpu=50)
    root = Pool(
        "<Root>",
        children=[
            Pool("integral", integral_guarantees=ig, children=[op("i", big())]),
            Pool("B", children=[op("b", big())]),
        ],
    )
    total = vector(user_slots=1000, cpu=100)
    first = run(root, total, now=1000.0)
    assert first.elements["integral"].fair_share[1] == pytest.approx(0.5)
    assert first.elements["integral"].resource_flow_ratio == pytest.approx(0.1)
    np.testing.assert_allclose(first.elements["integral"].integral_pool_capacity, total * 0.1 * 86400)
    # 60 s of flow 10 CPU: 600 CPU·s = one smooth period (60 s) of 10% of the cluster.
    second = run(root, total, now=1060.0, state=first.state)
    element = second.elements["integral"]
    assert element.accumulated_resource_volume[1] == pytest.approx(600.0)
    assert element.proposed_integral_share[1] == pytest.approx(0.1)
    assert element.detailed_fair_share.integral_guarantee[1] == pytest.approx(0.1)
    assert element.fair_share[1] == pytest.approx(0.55)
    assert second.elements["B"].fair_share[1] == pytest.approx(0.45)
    assert second.state.last_integral_share_ratio["integral"] == pytest.approx(0.1)
    # The next update consumes what was used: 60 s at 10% flow in, 10% used -> volume unchanged.
    third = run(root, total, now=1120.0, state=second.state)
    assert third.elements["integral"].accumulated_resource_volume[1] == pytest.approx(600.0)


def test_implicit_guarantees_for_non_main_resources():
    total = vector(user_slots=100, cpu=100, memory=1000)
    child = guaranteed("child", 20, [])
    explicit = Pool(
        "explicit",
        strong_guarantee_resources=vector(cpu=10, memory=300),
        specified_guarantee_resources=frozenset({"cpu", "memory"}),
    )
    parent = guaranteed("parent", 50, [child, explicit])
    r = run(Pool("<Root>", children=[parent]), total)
    np.testing.assert_allclose(r.elements["parent"].inferred_strong_guarantee_resources, [50, 50, 0, 500, 0])
    # child: 20/50 of the parent's memory (200) fits in the residual 500 - 300 = 200.
    np.testing.assert_allclose(r.elements["child"].inferred_strong_guarantee_resources, [20, 20, 0, 200, 0])
    np.testing.assert_allclose(
        r.elements["explicit"].inferred_strong_guarantee_resources, [10, 10, 0, 300, 0]
    )


def test_implicit_guarantees_are_rescaled_to_the_residual():
    total = vector(user_slots=100, cpu=100, memory=1000)
    child = guaranteed("child", 40, [])
    explicit = Pool(
        "explicit",
        strong_guarantee_resources=vector(cpu=10, memory=400),
        specified_guarantee_resources=frozenset({"cpu", "memory"}),
    )
    r = run(Pool("<Root>", children=[guaranteed("parent", 50, [child, explicit])]), total)
    # implicit memory 40/50 * 500 = 400 > residual 100 -> scaled to 100.
    assert r.elements["child"].inferred_strong_guarantee_resources[3] == pytest.approx(100)


def test_dominant_resource_rules():
    total = vector(user_slots=100, cpu=100, memory=100)
    ops = [
        op("tie", vector(10, 10, 0, 10, 0), usage=vector(10, 10, 0, 10, 0)),
        op("usage_wins", vector(1, 5, 0, 90, 0), usage=vector(0, 5, 0, 1, 0)),
        op("demand", vector(1, 1, 0, 90, 0)),
        op("empty", vector()),
    ]
    r = run(Pool("<Root>", children=[Pool("p", children=ops)]), total)
    assert r.elements["tie"].dominant_resource == "user_slots"
    assert r.elements["usage_wins"].dominant_resource == "cpu"
    assert r.elements["demand"].dominant_resource == "memory"
    assert r.elements["empty"].dominant_resource == "cpu"


def test_statuses_with_tolerance():
    total = vector(user_slots=100, cpu=100)
    starving = op("starving", vector(50, 50), usage=vector(10, 10))
    tolerated = op("tolerated", vector(50, 50), usage=vector(45, 45))
    suspended = op("suspended", vector(50, 50), usage=vector(1, 1), schedulable=False)
    root = Pool(
        "<Root>",
        children=[
            Pool("a", children=[starving]),
            Pool("b", children=[tolerated]),
            Pool("c", children=[suspended]),
        ],
    )
    r = run(root, total)
    assert r.elements["starving"].scheduling_status == BELOW_FAIR_SHARE
    assert r.elements["tolerated"].scheduling_status == NORMAL  # 0.45 ≥ 0.5 × 0.8
    assert r.elements["suspended"].scheduling_status == NORMAL
    assert r.elements["suspended"].demand_share[1] == pytest.approx(0.01)  # demand := usage
    assert r.elements["<Root>"].scheduling_status == NORMAL
    assert r.elements["a"].satisfaction_ratio == pytest.approx(
        r.elements["starving"].local_satisfaction_ratio
    )


def test_operation_tolerance_is_one_when_fair_share_covers_demand():
    total = vector(user_slots=100, cpu=100)
    nearly = op("nearly", vector(10, 10), usage=vector(9, 9))
    r = run(Pool("<Root>", children=[Pool("p", children=[nearly])]), total)
    # FS = demand -> tolerance 1.0 -> 0.09 < 0.1 in non-blocked... all blocked: any(bound > usage) -> below.
    assert r.elements["nearly"].scheduling_status == BELOW_FAIR_SHARE
    assert r.elements["p"].scheduling_status == NORMAL  # pools keep tolerance 0.8: 0.08 < 0.09


def test_blocked_resources_helpers():
    fs = np.array([0.5, 0.5, 0.0, 0.2, 0.0])
    demand = np.array([0.6, 0.6, 0.0, 0.2, 0.0])
    # memory, gpu and network are blocked (FS ≥ demand): only slots and cpu must be strictly greater.
    assert strictly_dominates_non_blocked(
        np.array([0.4, 0.4, 0, 0, 0]), np.array([0.3, 0.3, 0, 0.5, 0]), fs, demand
    )
    assert not strictly_dominates_non_blocked(
        np.array([0.4, 0.3, 0, 0, 0]), np.array([0.3, 0.3, 0, 0, 0]), fs, demand
    )
    all_blocked = np.array([0.6, 0.6, 0, 0.2, 0])
    assert strictly_dominates_non_blocked(np.array([0.1, 0, 0, 0, 0]), np.zeros(5), all_blocked, demand)
    assert not is_below_fair_share(fs, fs * 0.9, demand, 0.8)
    assert is_below_fair_share(fs, fs * 0.5, demand, 0.8)


def test_local_satisfaction_ratio_rules():
    assert local_satisfaction_ratio(np.zeros(5), np.ones(5), np.ones(5)) == 1e9
    fs = np.array([0.0, 0.5, 0.0, 0.25, 0.0])
    assert local_satisfaction_ratio(fs, np.array([0, 0.25, 0, 0.1, 0]), np.ones(5)) == pytest.approx(0.5)
    assert local_satisfaction_ratio(fs, np.array([0, 1.0, 0, 0.1, 0]), np.ones(5)) == pytest.approx(2.0)
    assert local_satisfaction_ratio(fs, np.array([0.1, 0.1, 0, 0.1, 0]), np.ones(5)) == 1e9  # x/0 above FS
    # All blocked: min ratio with 0/0 = 1.
    assert local_satisfaction_ratio(fs, np.array([0, 0.25, 0, 0.25, 0]), fs) == pytest.approx(0.5)


def test_estimated_guarantee_share_splits_the_rest_by_weight():
    root = Pool("<Root>", children=[guaranteed("A", 40, []), Pool("B", weight=3.0)])
    r = run(root, vector(user_slots=100, cpu=100))
    # Root estimate = root SGS (0.4): A takes its 0.4, nothing is left for B.
    assert r.elements["A"].estimated_guarantee_share[1] == pytest.approx(0.4)
    assert r.elements["B"].estimated_guarantee_share[1] == pytest.approx(0.0)


def test_inferred_weights_from_guarantees():
    settings = UpdateSettings(infer_weight_from_guarantees_share_multiplier=2.0)
    root = Pool(
        "<Root>", children=[guaranteed("A", 30, [op("a", big())]), guaranteed("B", 10, [op("b", big())])]
    )
    r = run(root, vector(user_slots=100, cpu=100), settings)
    assert r.elements["A"].weight == pytest.approx(2.0 * 0.3 / 0.4)
    assert r.elements["B"].weight == pytest.approx(2.0 * 0.1 / 0.4)
    assert r.elements["a"].weight == 1.0


def test_promised_guarantee_fair_share_and_nested_alert():
    inner = guaranteed("inner", 10, [op("i", big())], compute_promised_guarantee_fair_share=True)
    outer = guaranteed("outer", 40, [inner, op("o", big())], compute_promised_guarantee_fair_share=True)
    r = run(
        Pool("<Root>", children=[outer, Pool("other", children=[op("x", big())])]),
        vector(user_slots=100, cpu=100),
    )
    assert r.elements["outer"].promised_guarantee_fair_share.total[1] == pytest.approx(0.4)
    assert r.elements["other"].promised_guarantee_fair_share is None
    assert [e.code for e in r.errors] == [29001]


def test_bad_input_names_the_field():
    with pytest.raises(ConfigError) as err:
        run(Pool("<Root>", children=[Pool("a", weight=-1.0)]))
    assert err.value.path == "pools.a.weight"
    with pytest.raises(ConfigError) as err:
        run(Pool("<Root>", children=[op("o", vector(cpu=1), usage=vector(cpu=2))]))
    assert err.value.path == "operations.o.demand"
    with pytest.raises(ConfigError) as err:
        run(Pool("<Root>", children=[Pool("f", mode="fifo", children=[Pool("sub")])]))
    assert err.value.path == "pools.f.mode"


def test_state_round_trip_keeps_previous_time():
    r = run(Pool("<Root>"), now=5.0, state=UpdateState())
    assert r.state.previous_update_time == 5.0
    assert r.elements["<Root>"].fair_share.tolist() == [0.0] * 5
