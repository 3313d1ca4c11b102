"""The GPU scheduling policy's plan (issue 30), restated from YTsaurus's assignment plan update and
``test_gpu_scheduling_policy.py``: best-fit planning, preemptible assignments beyond the fair share, extra
(preemptible) assignments, full-host gangs bound to one module (best fit, priority binding with eviction,
module reconsideration), preemptive and full-host aggressive planning by penalty, unschedulable nodes, and the
config's validation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from pooltree.config.gpu_policy import GpuPolicyConfig
from pooltree.errors import ConfigError
from pooltree.strategy.gpu_policy import GpuPolicy, OperationFacts, PlanOperation, _operations_to_evict
from pooltree.strategy.model import ExecNode

HOST = (8.0, 64.0, 8.0, 512.0, 0.0)  # user_slots, cpu, gpu, memory, network
ONE = (1.0, 1.0, 1.0, 1.0, 0.0)
FULL = (1.0, 8.0, 8.0, 8.0, 0.0)


def config(**options: object) -> GpuPolicyConfig:
    raw = {"mode": "allocating", "modules": ["dc-a", "dc-b"], "min_assignment_preemptible_duration": 0}
    raw.update(options)
    return GpuPolicyConfig.from_tree_options("gpu", raw, "tree")


def cluster(per_module: dict[str, int]) -> list[ExecNode]:
    return [
        ExecNode(f"{module}-{i}", np.array(HOST), frozenset({module}))
        for module, count in per_module.items()
        for i in range(count)
    ]


def total(nodes: list[ExecNode]) -> tuple[float, ...]:
    return tuple(float(x) for x in sum(n.resource_limits for n in nodes))


def op(
    op_id: str,
    count: int,
    share_gpu: float,
    *,
    needed: tuple[float, ...] = ONE,
    gang: bool = False,
    starving: bool = False,
    priority: bool = False,
    modules: tuple[str, ...] | None = None,
) -> OperationFacts:
    return OperationFacts(
        id=op_id,
        type="vanilla",
        gang=gang,
        specified_modules=modules,
        fair_share=(share_gpu,) * 5,
        pending_count=count,
        min_needed=needed,
        starving=starving,
        priority_binding_enabled=priority,
    )


@dataclass
class Running:
    id: str
    operation_id: str
    node_address: str
    amounts: tuple[float, ...]
    start_time: float
    preempted: bool = False


def books_balance(policy: GpuPolicy) -> bool:
    """The policy's running counts agree with its assignments: per node the preliminary ones, the realized ones
    by allocation id, and the assigned resources of nodes and operations."""
    realized = {}
    for node in policy.nodes.values():
        assert node.preliminary == sum(a.allocation_id is None for a in node.assignments)
        assert node.assigned == pytest.approx(
            [sum(a.resources[r] for a in node.assignments) for r in range(5)]
        )
        realized.update({a.allocation_id: a for a in node.assignments if a.allocation_id is not None})
    for op in policy.operations.values():
        assert op.assigned == pytest.approx([sum(a.resources[r] for a in op.assignments) for r in range(5)])
    assert policy._realized == realized
    return True


def nodes_of(policy: GpuPolicy, op_id: str) -> list[str]:
    return sorted(a.node for a in policy.operations[op_id].assignments)


def test_regular_operations_fill_the_fullest_node_first() -> None:
    nodes = cluster({"dc-a": 2})
    policy = GpuPolicy(config())
    busy = [Running(f"r{i}", "old", "dc-a-1", ONE, 0.0) for i in range(5)]
    policy.update(nodes, [op("old", 0, 5 / 16), op("new", 3, 3 / 16)], busy, total(nodes), now=10.0)
    assert nodes_of(policy, "new") == ["dc-a-1"] * 3  # 3 free GPUs there: filled before the empty node
    assert policy.operations["old"].assignments[0].allocation_id == "r0"  # running allocations adopted
    assert policy.has_work("dc-a-1") and not policy.has_work("dc-a-0")
    assert books_balance(policy)


def test_assignments_beyond_the_fair_share_are_preemptible_and_extra_ones_planned_preemptible() -> None:
    nodes = cluster({"dc-a": 1})
    policy = GpuPolicy(config())
    running = [Running(f"r{i}", "op", "dc-a-0", ONE, float(i)) for i in range(4)]
    policy.update(nodes, [op("op", 3, 2 / 8)], running, total(nodes), now=10.0)
    by_allocation = {a.allocation_id: a.preemptible for a in policy.operations["op"].assignments}
    assert by_allocation == {"r0": False, "r1": False, "r2": True, "r3": True, None: True}
    assert policy.operations["op"].ready == 0 and len(policy.operations["op"].assignments) == 7
    assert sum(a.allocation_id is None for a in policy.operations["op"].assignments) == 3


def test_full_host_gangs_bind_to_the_module_that_fits_them_best() -> None:
    nodes = cluster({"dc-a": 3, "dc-b": 2})
    policy = GpuPolicy(config())
    ops = [op("two", 2, 16 / 40, needed=FULL, gang=True), op("three", 3, 24 / 40, needed=FULL, gang=True)]
    policy.update(nodes, ops, [], total(nodes), now=1.0)
    assert policy.operations["three"].module == "dc-a"  # the bigger gang first; only dc-a has 3 nodes
    assert policy.operations["two"].module == "dc-b"
    assert nodes_of(policy, "three") == ["dc-a-0", "dc-a-1", "dc-a-2"]
    assert nodes_of(policy, "two") == ["dc-b-0", "dc-b-1"]
    view = policy.view()
    assert view["modules"]["dc-a"] == {
        "node_count": 3,
        "unreserved_node_count": 0,
        "full_host_bound_operation_count": 1,
    }


def test_a_full_host_operation_that_is_no_gang_is_not_module_bound_and_gets_no_extra() -> None:
    nodes = cluster({"dc-a": 1, "dc-b": 1})
    policy = GpuPolicy(config())
    policy.update(nodes, [op("solo", 2, 8 / 16, needed=FULL)], [], total(nodes), now=1.0)
    solo = policy.operations["solo"]
    assert solo.module is None and not solo.full_host_module_bound
    assert len(solo.assignments) == 1 and solo.extra == 0


def test_priority_binding_evicts_a_non_priority_gang_after_the_timeout() -> None:
    nodes = cluster({"dc-a": 2})
    policy = GpuPolicy(config(modules=["dc-a"], priority_module_binding_timeout="100s"))
    low = op("low", 2, 16 / 16, needed=FULL, gang=True)
    policy.update(nodes, [low], [], total(nodes), now=1.0)
    assert policy.operations["low"].module == "dc-a"
    allocations = [Running(f"l{i}", "low", f"dc-a-{i}", FULL, 1.0) for i in range(2)]
    high = op("high", 2, 16 / 16, needed=FULL, gang=True, priority=True)
    low = op("low", 0, 8 / 16, needed=FULL, gang=True)
    policy.update(nodes, [low, high], allocations, total(nodes), now=2.0)
    assert policy.operations["high"].module is None  # no room; waits for a module
    assert policy.operations["high"].waiting_for_module_binding_since == 2.0
    policy.update(nodes, [low, high], allocations, total(nodes), now=102.0)
    assert policy.operations["high"].module is None  # not past the timeout yet
    policy.update(nodes, [low, high], allocations, total(nodes), now=103.0)
    assert policy.operations["high"].module == "dc-a" and policy.operations["low"].module is None
    preempted = {**policy.take_preemptions("dc-a-0"), **policy.take_preemptions("dc-a-1")}
    assert sorted(preempted) == ["l0", "l1"]
    assert {reason.value for reason, _, _ in preempted.values()} == {"eviction_from_scheduling_module"}
    assert nodes_of(policy, "high") == ["dc-a-0", "dc-a-1"]
    assert books_balance(policy)


def test_without_priority_a_waiting_gang_evicts_nobody() -> None:
    nodes = cluster({"dc-a": 2})
    policy = GpuPolicy(config(modules=["dc-a"], priority_module_binding_timeout="100s"))
    policy.update(nodes, [op("low", 2, 1.0, needed=FULL, gang=True)], [], total(nodes), now=1.0)
    running = [Running(f"l{i}", "low", f"dc-a-{i}", FULL, 1.0) for i in range(2)]
    ops = [op("low", 0, 0.5, needed=FULL, gang=True), op("other", 2, 0.5, needed=FULL, gang=True)]
    for now in (2.0, 200.0):
        policy.update(nodes, ops, running, total(nodes), now=now)
    assert policy.operations["other"].module is None and policy.operations["low"].module == "dc-a"


def test_a_starving_operation_preempts_the_cheapest_preemptible_assignments() -> None:
    nodes = cluster({"dc-a": 2})
    policy = GpuPolicy(config(min_assignment_preemptible_duration="10s"))
    # "greedy" runs 16 one-GPU allocations; 8 of them beyond its fair share: the newest on dc-a-1 are cheapest
    running = [Running(f"g{i}", "greedy", f"dc-a-{i // 8}", ONE, float(i * 10)) for i in range(16)]
    ops = [op("greedy", 0, 8 / 16), op("starving", 2, 8 / 16, starving=True)]
    policy.update(nodes, ops, running, total(nodes), now=200.0)
    assert nodes_of(policy, "starving") == ["dc-a-1", "dc-a-1"]
    preempted = policy.take_preemptions("dc-a-1")
    assert sorted(preempted) == ["g14", "g15"]  # the youngest: least GPU time lost
    assert {reason.value for reason, _, _ in preempted.values()} == {"preemption"}
    assert {for_op for _, _, for_op in preempted.values()} == {"starving"}
    assert books_balance(policy)


def test_full_host_aggressive_preemption_after_the_timeout_frees_whole_hosts() -> None:
    nodes = cluster({"dc-a": 2})
    policy = GpuPolicy(config(modules=["dc-a"], full_host_aggressive_preemption_timeout="30s"))
    small = [Running(f"s{i}", "small", f"dc-a-{i // 8}", ONE, 0.0) for i in range(16)]
    ops = [op("small", 0, 8 / 16), op("gang", 1, 8 / 16, needed=FULL, gang=True)]
    policy.update(nodes, ops, small, total(nodes), now=10.0)
    gang = policy.operations["gang"]
    assert gang.module == "dc-a" and gang.assignments == [] and gang.waiting_for_assignments_since == 10.0
    policy.update(nodes, ops, small, total(nodes), now=40.0)
    assert gang.assignments == []  # 30 s: not longer than the timeout yet
    policy.update(nodes, ops, small, total(nodes), now=41.0)
    assert len(gang.assignments) == 1 and gang.waiting_for_assignments_since is None
    host = gang.assignments[0].node
    preempted = policy.take_preemptions(host)
    assert len(preempted) == 8
    assert {reason.value for reason, _, _ in preempted.values()} == {"full_host_aggressive_preemption"}


def test_module_reconsideration_evicts_a_gang_that_waited_too_long() -> None:
    """A gang bound to dc-a got one of its two hosts; the other stays full. After module_reconsideration_timeout
    of waiting for assignments it is evicted from the module (its running allocation preempted "after module
    reset") and bound again."""
    nodes = cluster({"dc-a": 2, "dc-b": 2})
    policy = GpuPolicy(
        config(module_reconsideration_timeout="50s", full_host_aggressive_preemption_timeout="1h")
    )
    # 8 one-GPU allocations fill dc-a-1, 16 fill dc-b; dc-a-0 is free
    hosts = ["dc-a-1"] * 8 + ["dc-b-0"] * 8 + ["dc-b-1"] * 8
    small = [Running(f"s{i}", "small", host, ONE, 0.0) for i, host in enumerate(hosts)]
    ops = [op("small", 0, 24 / 32), op("gang", 2, 16 / 32, needed=FULL, gang=True)]
    policy.update(nodes, ops, small, total(nodes), now=0.0)
    gang = policy.operations["gang"]
    assert gang.module == "dc-a" and nodes_of(policy, "gang") == ["dc-a-0"]
    assert gang.waiting_for_assignments_since == 0.0
    started = [*small, Running("g0", "gang", "dc-a-0", FULL, 1.0)]
    ops[1] = op("gang", 1, 16 / 32, needed=FULL, gang=True)  # one of two runs
    policy.update(nodes, ops, started, total(nodes), now=50.0)
    assert policy.take_preemptions("dc-a-0") == {}  # 50 s: not longer than the timeout
    policy.update(nodes, ops, started, total(nodes), now=51.0)
    [(reason, description, _)] = policy.take_preemptions("dc-a-0").values()
    assert (reason.value, description) == ("eviction_from_scheduling_module", "Preempted after module reset")
    # bound again (a tie: dc-a) and planned anew on the host g0 leaves
    assert gang.module == "dc-a" and [(a.node, a.allocation_id) for a in gang.assignments] == [
        ("dc-a-0", None)
    ]
    assert books_balance(policy)


def test_a_node_leaving_its_module_loses_its_assignments() -> None:
    nodes = cluster({"dc-a": 1})
    policy = GpuPolicy(config())
    running = [Running("r", "op", "dc-a-0", ONE, 0.0)]
    policy.update(nodes, [op("op", 0, 1 / 8)], running, total(nodes), now=1.0)
    nodes[0].tags = frozenset({"elsewhere"})
    policy.update(nodes, [op("op", 0, 1 / 8)], running, total(nodes), now=2.0)
    assert policy.operations["op"].assignments == []
    [(reason, _, _)] = policy.take_preemptions("dc-a-0").values()
    assert reason.value == "node_unschedulable"
    assert books_balance(policy)


def test_operations_to_evict_are_the_largest_then_the_smallest_that_suffices() -> None:
    ops = [
        PlanOperation(name, "vanilla", True, None, FULL, count)
        for name, count in (("a", 5), ("b", 3), ("c", 2), ("d", 1))
    ]
    assert [o.id for o in _operations_to_evict(ops, 7)] == ["a", "c"]
    assert [o.id for o in _operations_to_evict(ops, 3)] == ["b"]
    assert _operations_to_evict(ops, 12) is None


def test_config_validation_names_the_field() -> None:
    assert not GpuPolicyConfig.from_tree_options(None, None, "t").planning
    assert GpuPolicyConfig.from_tree_options("gpu", {"mode": "allocating"}, "t").allocating
    assert not GpuPolicyConfig.from_tree_options("classic", {"mode": "allocating"}, "t").allocating
    for kind, raw, field in (
        ("fancy", {}, "t.policy_kind"),
        ("gpu", {"mode": "sometimes"}, "t.gpu_scheduling_policy.mode"),
        ("gpu", {"plan_update_period": -5}, "t.gpu_scheduling_policy.plan_update_period"),
        ("gpu", {"modules": "dc-a"}, "t.gpu_scheduling_policy.modules"),
        ("gpu", {"modulez": []}, "t.gpu_scheduling_policy.modulez"),
    ):
        with pytest.raises(ConfigError) as error:
            GpuPolicyConfig.from_tree_options(kind, raw, "t")
        assert field in str(error.value)


def test_priority_binding_is_inherited_from_the_nearest_pool_that_sets_it() -> None:
    from types import SimpleNamespace

    from pooltree.config import parse_pool_trees
    from pooltree.strategy.gpu_policy_inputs import priority_module_binding

    option = "enable_priority_scheduling_segment_module_assignment"
    trees = parse_pool_trees(
        {"g": {"config": {}, "pools": {"vip": {option: True, "pools": {"team": {}, "off": {option: False}}}}}}
    )
    configs = {name: pool.config for name, pool in trees["g"].pools.items()}

    def pool(name: str, parent: object) -> object:
        return SimpleNamespace(config=configs.get(name), parent=parent)

    root = SimpleNamespace(config=None, parent=None)
    vip = pool("vip", root)
    assert priority_module_binding(pool("team", vip)) is True
    assert priority_module_binding(pool("off", vip)) is False
    assert priority_module_binding(root) is False
