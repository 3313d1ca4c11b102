"""Scheduling segments (issue 30): the pure segments update, restated from YTsaurus's scheduling segments manager
and its integration tests (``test_scheduling_segments.py``: large_gpu segment, module binding, rebalancing timeouts,
module reconsideration, satisfaction margins), and the config's validation."""

from __future__ import annotations

import pytest

from pooltree.config import parse_pool_trees
from pooltree.config.operation import OperationSpec
from pooltree.config.segments import SchedulingSegmentsConfig, SegmentSpec
from pooltree.errors import ConfigError
from pooltree.strategy.segments import (
    SegmentNode,
    SegmentOperation,
    SegmentsManager,
    SegmentsState,
    node_module,
    operation_segment,
    update_segments,
)

CONFIG = SchedulingSegmentsConfig.from_options(
    {
        "mode": "large_gpu",
        "data_centers": ["dc-b", "dc-a"],
        "initialization_timeout": 0,
        "unsatisfied_segments_rebalancing_timeout": "1000s",
        "module_reconsideration_timeout": "5000s",
    }
)


def nodes(
    per_module: int = 4, gpu: float = 8.0, penalties: dict[str, float] | None = None
) -> list[SegmentNode]:
    out = []
    for module in ("dc-a", "dc-b"):
        for index in range(per_module):
            address = f"{module}-{index}"
            penalty = (penalties or {}).get(address, 0.0)
            out.append(SegmentNode(address, gpu, module, (penalty, penalty)))
    return out


def large(op_id: str, jobs: int, share: float, *, satisfied: bool = False, **kwargs) -> SegmentOperation:
    return SegmentOperation(
        id=op_id,
        allocation_gpu=8.0,
        demand_gpu=8.0 * jobs,
        fair_share_gpu=share,
        gang=True,
        demand_satisfied=satisfied,
        fair_share_covers_demand=True,
        **kwargs,
    )


def small(op_id: str, demand: float, share: float) -> SegmentOperation:
    return SegmentOperation(op_id, 1.0, demand, share, fair_share_covers_demand=False)


def test_operation_segment_follows_full_host_gangs_and_the_spec() -> None:
    assert operation_segment(large("g", 2, 0.25), CONFIG) == "large_gpu"
    assert operation_segment(small("s", 10, 0.1), CONFIG) == "default"
    assert operation_segment(SegmentOperation("u", None, 0, 0), CONFIG) is None  # needs unknown yet
    gangs_only = SchedulingSegmentsConfig.from_options(
        {"mode": "large_gpu", "allow_only_gang_operations_in_large_segment": True}
    )
    not_gang = SegmentOperation("n", 8.0, 16.0, 0.1)
    assert operation_segment(not_gang, CONFIG) == "large_gpu"
    assert operation_segment(not_gang, gangs_only) == "default"
    one_vanilla = SegmentOperation("v", 8.0, 8.0, 0.1, single_allocation_vanilla=True)
    assert operation_segment(one_vanilla, gangs_only) == "large_gpu"
    forced = SegmentOperation("f", 1.0, 1.0, 0.1, spec=SegmentSpec(segment="large_gpu"))
    assert operation_segment(forced, CONFIG) == "large_gpu"


def test_module_of_a_node_comes_from_its_tags() -> None:
    assert node_module(frozenset({"gpu", "dc-a"}), CONFIG) == "dc-a"
    assert node_module(frozenset({"gpu"}), CONFIG) is None
    ib = SchedulingSegmentsConfig.from_options(
        {"mode": "large_gpu", "module_type": "infiniband_cluster", "infiniband_clusters": ["ib1"]}
    )
    assert node_module(frozenset({"dc-a", "infiniband_cluster:ib1"}), ib) == "ib1"
    assert node_module(frozenset({"infiniband_cluster:ib9"}), ib) is None


def test_a_gang_is_bound_to_the_module_with_most_room_and_nodes_move_after_the_timeout() -> None:
    """64 GPUs in two modules; a gang of two full hosts with its whole demand as fair share: bound to a module
    (sorted modules tie: dc-a), its module's large_gpu segment is unsatisfied; nodes move only once the imbalance
    lasted longer than unsatisfied_segments_rebalancing_timeout, cheapest (lowest GPU time) first."""
    cluster = nodes(penalties={"dc-a-0": 50.0, "dc-a-1": 5.0, "dc-a-2": 7.0, "dc-a-3": 1.0})
    operations = [large("gang", 2, 16 / 64), small("small", 200, 48 / 64)]
    state = update_segments(CONFIG, SegmentsState(), cluster, operations, 64.0, now=10.0)
    assert state.operations["gang"].segment == "large_gpu" and state.operations["gang"].module == "dc-a"
    assert state.operations["small"].segment == "default" and state.operations["small"].module is None
    assert state.node_segments == {} and state.imbalanced_since == 10.0
    assert state.info["fair_resource_amount_per_segment"]["large_gpu"] == {"dc-a": 16.0, "dc-b": 0.0}
    assert state.info["unsatisfied_segments"] == ["large_gpu@dc-a"]
    state = update_segments(CONFIG, state, cluster, operations, 64.0, now=1009.0)
    assert state.node_segments == {}  # not yet: 999 s of imbalance
    state = update_segments(CONFIG, state, cluster, operations, 64.0, now=1011.0)
    assert state.node_segments == {"dc-a-3": "large_gpu", "dc-a-1": "large_gpu"}  # the two cheapest of dc-a
    assert [move["node_address"] for move in state.moved_nodes] == ["dc-a-3", "dc-a-1"]
    assert state.imbalanced_since is None and state.info["balanced"]
    again = update_segments(CONFIG, state, cluster, operations, 64.0, now=1021.0)
    assert again.node_segments == state.node_segments and again.moved_nodes == []


def test_the_default_segment_takes_nodes_back_when_the_gang_is_gone() -> None:
    cluster = nodes()
    state = SegmentsState(node_segments={"dc-a-0": "large_gpu", "dc-a-1": "large_gpu"})
    state = update_segments(CONFIG, state, cluster, [small("small", 200, 1.0)], 64.0, now=0.0)
    assert state.node_segments == {"dc-a-0": "large_gpu", "dc-a-1": "large_gpu"}
    state = update_segments(CONFIG, state, cluster, [small("small", 200, 1.0)], 64.0, now=1001.0)
    assert state.node_segments == {}


def test_min_remaining_feasible_capacity_packs_gangs_into_the_fullest_module_that_fits() -> None:
    config = SchedulingSegmentsConfig.from_options(
        {**_raw(CONFIG), "module_assignment_heuristic": "min_remaining_feasible_capacity"}
    )
    first = large("first", 2, 16 / 64, satisfied=True)
    state = update_segments(config, SegmentsState(), nodes(), [first], 64.0, now=0.0)
    assert state.operations["first"].module == "dc-a"
    second = large("second", 1, 8 / 64)
    state = update_segments(config, state, nodes(), [first, second], 64.0, now=1.0)
    assert state.operations["second"].module == "dc-a"  # 16 GPUs left there, 32 in dc-b: the fuller one
    state = update_segments(
        CONFIG, state, nodes(), [first, second, large("third", 3, 24 / 64)], 64.0, now=2.0
    )
    assert state.operations["third"].module == "dc-b"  # max remaining capacity: dc-b has 32 left


def test_specified_modules_restrict_the_binding_and_unknown_ones_are_an_error() -> None:
    pinned = large("pinned", 1, 8 / 64, spec=SegmentSpec(modules=("dc-b",)))
    lost = large("lost", 1, 8 / 64, spec=SegmentSpec(modules=("dc-z",)))
    state = update_segments(CONFIG, SegmentsState(), nodes(), [pinned, lost], 64.0, now=0.0)
    assert state.operations["pinned"].module == "dc-b"
    assert state.operations["lost"].module is None
    assert "are not found in the tree" in (state.operations["lost"].error or "")
    assert state.operations["lost"].failing_to_assign_to_module_since == 0.0


def test_an_operation_failing_in_its_module_is_reconsidered_after_the_timeout() -> None:
    gang = large("gang", 2, 16 / 64, satisfied=False)
    state = update_segments(CONFIG, SegmentsState(), nodes(), [gang], 64.0, now=0.0)
    assert state.operations["gang"].module == "dc-a"
    state = update_segments(CONFIG, state, nodes(), [gang], 64.0, now=1.0)
    assert state.operations["gang"].failing_to_schedule_at_module_since == 1.0
    state = update_segments(CONFIG, state, nodes(), [gang], 64.0, now=5001.0)
    assert state.operations["gang"].module == "dc-a"  # 5000 s exactly: not yet
    state = update_segments(CONFIG, state, nodes(), [gang], 64.0, now=5002.0)
    # revoked, then assigned again in the same update (max remaining capacity: dc-a is empty again)
    assert state.operations["gang"].failing_to_schedule_at_module_since is None
    satisfied = large("gang", 2, 16 / 64, satisfied=True)
    state = update_segments(CONFIG, state, nodes(), [satisfied], 64.0, now=5003.0)
    assert state.operations["gang"].failing_to_schedule_at_module_since is None


def test_reserve_fair_resource_amount_keeps_nodes_in_large_gpu_without_operations() -> None:
    config = SchedulingSegmentsConfig.from_options(
        {**_raw(CONFIG), "satisfaction_margins": {"large_gpu": {"dc-b": 16}}}  # the old name of the option
    )
    state = update_segments(config, SegmentsState(), nodes(), [], 64.0, now=0.0)
    state = update_segments(config, state, nodes(), [], 64.0, now=1001.0)
    assert sorted(state.node_segments) == ["dc-b-0", "dc-b-1"]
    assert state.info["fair_resource_amount_per_segment"]["large_gpu"]["dc-b"] == 16.0


def test_initialization_timeout_delays_rebalancing() -> None:
    config = SchedulingSegmentsConfig.from_options({**_raw(CONFIG), "initialization_timeout": "5000s"})
    gang = large("gang", 1, 8 / 64)
    state = update_segments(config, SegmentsState(), nodes(), [gang], 64.0, now=0.0)
    state = update_segments(config, state, nodes(), [gang], 64.0, now=1001.0)
    assert state.node_segments == {}
    state = update_segments(config, state, nodes(), [gang], 64.0, now=5001.0)
    assert state.node_segments == {"dc-a-0": "large_gpu"}


def test_disabling_resets_every_node_and_binding() -> None:
    gang = large("gang", 1, 8 / 64)
    state = update_segments(CONFIG, SegmentsState(), nodes(), [gang], 64.0, now=0.0)
    state = update_segments(CONFIG, state, nodes(), [gang], 64.0, now=1001.0)
    assert state.node_segments
    off = update_segments(SchedulingSegmentsConfig(), state, nodes(), [gang], 64.0, now=1002.0)
    assert (
        off.node_segments == {} and off.operations["gang"].module is None and off.info == {"mode": "disabled"}
    )


def test_the_manager_answers_compatibility_as_yt() -> None:
    manager = SegmentsManager(CONFIG)
    gang = large("gang", 1, 8 / 64)
    manager.update(nodes(), [gang, small("small", 10, 0.5)], 64.0, now=0.0)
    manager.update(nodes(), [gang, small("small", 10, 0.5)], 64.0, now=1001.0)
    dc_a = frozenset({"dc-a"})
    assert manager.compatible("gang", "dc-a-0", dc_a)
    assert not manager.compatible("small", "dc-a-0", dc_a)  # large_gpu node
    assert manager.compatible("small", "dc-a-1", dc_a)
    assert not manager.compatible("gang", "dc-a-1", dc_a)  # default node
    assert manager.compatible("new-operation", "dc-b-0", frozenset({"dc-b"}))  # unknown: default
    assert manager.view({"dc-a-0": dc_a})["nodes"]["dc-a-0"] == {
        "scheduling_segment": "large_gpu",
        "scheduling_segment_module": "dc-a",
    }
    assert SegmentsManager().compatible("gang", "dc-a-0", dc_a)  # off: everything runs everywhere


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"mode": "huge_gpu"}, "scheduling_segments.mode"),
        ({"mode": "large_gpu", "unknown": 1}, "scheduling_segments.unknown"),
        ({"module_type": "rack"}, "scheduling_segments.module_type"),
        ({"data_centers": "dc-a"}, "scheduling_segments.data_centers"),
        (
            {"reserve_fair_resource_amount": {"large_gpu": {"dc-z": 8}}},
            "reserve_fair_resource_amount.large_gpu.dc-z",
        ),
        ({"reserve_fair_resource_amount": {"default": -1}}, "reserve_fair_resource_amount.default"),
        ({"unsatisfied_segments_rebalancing_timeout": "soon"}, "unsatisfied_segments_rebalancing_timeout"),
    ],
)
def test_bad_config_names_the_field(raw: dict, path: str) -> None:
    with pytest.raises(ConfigError) as error:
        SchedulingSegmentsConfig.from_options(raw)
    assert path in error.value.path


def test_pool_tree_and_spec_documents_refuse_bad_segment_options() -> None:
    with pytest.raises(ConfigError, match=r"scheduling_segments\.mode"):
        parse_pool_trees({"gpu": {"config": {"scheduling_segments": {"mode": "bad"}}, "pools": {}}})
    trees = parse_pool_trees({"gpu": {"config": {"scheduling_segments": {"mode": "large_gpu"}}, "pools": {}}})
    assert trees["gpu"].config.model_extra["scheduling_segments"] == {"mode": "large_gpu"}  # kept as given
    with pytest.raises(ConfigError, match="scheduling_segment"):
        OperationSpec.parse({"scheduling_segment": "huge"})
    spec = OperationSpec.parse(
        {"scheduling_segment_data_centers": ["dc-a"], "scheduling_segment": "large_gpu"}
    )
    assert SegmentSpec.from_spec(spec) == SegmentSpec(segment="large_gpu", modules=("dc-a",))


def _raw(config: SchedulingSegmentsConfig) -> dict:
    return {
        "mode": config.mode,
        "data_centers": list(config.data_centers),
        "initialization_timeout": config.initialization_timeout * 1000,
        "unsatisfied_segments_rebalancing_timeout": config.unsatisfied_segments_rebalancing_timeout * 1000,
        "module_reconsideration_timeout": config.module_reconsideration_timeout * 1000,
    }


def test_a_large_gpu_operation_in_several_trees_fails_unless_a_one_job_vanilla_is_allowed() -> None:
    from pooltree.controllers.operations import TaskSpec, VanillaController
    from pooltree.resources import vector
    from pooltree.strategy.core import SchedulerCore
    from pooltree.tree import PoolTree

    def core(allow: bool) -> SchedulerCore:
        config = {
            "scheduling_segments": {"mode": "large_gpu", "data_centers": ["dc-a"]},
            "allow_single_job_large_gpu_operations_in_multiple_trees": allow,
        }
        trees = parse_pool_trees({"t": {"config": config, "pools": {"a": {}}}})
        return SchedulerCore(PoolTree(trees["t"]))

    def register(target: SchedulerCore, op: str, jobs: int, operation_type: str = "vanilla") -> None:
        controller = VanillaController(op, [TaskSpec("main", jobs, vector(user_slots=1, cpu=8, gpu=8))])
        spec = {
            "pool": "a",
            "pool_trees": ["t", "other"],
            "is_gang": True,
            "tasks": {"main": {"job_count": jobs}},
        }
        target.register_operation(
            op, controller, user="u", pool="a", spec=spec, operation_type=operation_type
        )

    strict = core(False)
    register(strict, "gang", 2)
    register(strict, "single", 1)
    failed = dict(strict.enforce_time_limits(0.0))
    assert sorted(failed) == ["gang", "single"]
    assert failed["gang"]["message"].startswith("Scheduling in several trees is forbidden")
    lenient = core(True)
    register(lenient, "gang", 2)
    register(lenient, "single", 1)
    assert [op for op, _ in lenient.enforce_time_limits(0.0)] == ["gang"]


def test_a_registered_operation_not_yet_published_keeps_its_segment() -> None:
    manager = SegmentsManager(CONFIG)
    manager.init_operation(large("queued", 2, 0.0))
    assert manager.state.operations["queued"].segment == "large_gpu"
    manager.update(nodes(), [], 64.0, now=0.0, registered=["queued"])
    assert manager.state.operations["queued"].segment == "large_gpu"
    assert not manager.compatible("queued", "dc-a-0", frozenset({"dc-a"}))  # unbound: runs nowhere yet
    manager.update(nodes(), [], 64.0, now=20.0)  # it left the tree
    assert "queued" not in manager.state.operations


def test_priority_module_assignment_evicts_non_priority_operations_after_the_timeout() -> None:
    """YTsaurus's priority module assignment: with min_remaining_feasible_capacity a gang that fits no module waits;
    once it failed to get a module for longer than priority_module_assignment_timeout and its pool enables the
    priority assignment, the non-priority operations assigned to the module that frees its demand with the fewest
    fair GPUs (the biggest first, then the smallest that suffices) lose their module and it takes theirs."""
    config = SchedulingSegmentsConfig.from_options(
        {
            **_raw(CONFIG),
            "module_assignment_heuristic": "min_remaining_feasible_capacity",
            "priority_module_assignment_timeout": "100s",
        }
    )
    residents = [
        large("a-big", 2, 16 / 64, satisfied=True),
        large("a-small", 1, 8 / 64, satisfied=True),
        large("a-tiny", 1, 8 / 64, satisfied=True),
        large("b-whole", 4, 32 / 64, satisfied=True, spec=SegmentSpec(modules=("dc-b",))),
    ]
    state = update_segments(config, SegmentsState(), nodes(), residents, 64.0, now=0.0)
    assert {op: state.operations[op].module for op in ("a-big", "a-small", "a-tiny", "b-whole")} == {
        "a-big": "dc-a",
        "a-small": "dc-a",
        "a-tiny": "dc-a",
        "b-whole": "dc-b",
    }
    for priority in (False, True):
        vip = large("vip", 2, 16 / 64, priority_assignment_enabled=priority)
        run = update_segments(config, state, nodes(), [*residents, vip], 64.0, now=1.0)
        assert (
            run.operations["vip"].module is None
            and run.operations["vip"].failing_to_assign_to_module_since == 1.0
        )
        run = update_segments(config, run, nodes(), [*residents, vip], 64.0, now=101.0)
        assert run.operations["vip"].module is None  # 100 s: not longer than the timeout
        run = update_segments(config, run, nodes(), [*residents, vip], 64.0, now=102.0)
        modules = {op: run.operations[op].module for op in ("vip", "a-big", "a-small", "a-tiny", "b-whole")}
        if not priority:
            assert modules["vip"] is None and modules["a-big"] == "dc-a"
            continue
        # 16 GPUs needed in dc-a (full): a-big alone suffices and costs less than evicting from dc-b (32)
        assert modules == {
            "vip": "dc-a",
            "a-big": None,
            "a-small": "dc-a",
            "a-tiny": "dc-a",
            "b-whole": "dc-b",
        }
