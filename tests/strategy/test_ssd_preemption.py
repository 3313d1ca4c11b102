"""The tree's ``ssd_priority_preemption`` and the pool's ``allow_regular_allocations_on_ssd_nodes`` (issue 30),
restating YTsaurus's ``TestSsdPriorityPreemption`` on the core.

Four nodes of 2 cpu / 2 slots; n0 and n1 carry the tag ``ssd_tag`` (the tree's SSD node filter). An SSD
operation's task asks for a disk on the medium ``ssd_slots``; pooltree has no disk resource, so it is kept on the
SSD nodes with ``scheduling_tag_filter: ssd_tag`` (YTsaurus keeps it there by the nodes' SSD disk locations)."""

from __future__ import annotations

from typing import Any

import pytest

from pooltree.config import OperationSpec, parse_pool_trees
from pooltree.config.support import unsupported_options
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.errors import ConfigError
from pooltree.resources import vector
from pooltree.strategy import FinishedAllocation, NodeHeartbeat
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.ssd_preemption import classify_ssd_operations, disk_request_media
from pooltree.tree import PoolTree

GiB = 1024.0**3
SSD_TAG = "ssd_tag"
MEDIUM = "ssd_slots"
NODES = {"n0": (SSD_TAG,), "n1": (SSD_TAG,), "n2": (), "n3": ()}
TREE_CONFIG = {
    "aggressive_preemption_satisfaction_threshold": 0.2,
    "preemption_satisfaction_threshold": 1.0,
    "fair_share_starvation_tolerance": 0.9,
    "max_unpreemptible_running_allocation_count": 0,
    "fair_share_starvation_timeout": 1000,
    "fair_share_aggressive_starvation_timeout": 2000,
    "preemptive_scheduling_backoff": 0,
}


def _limits() -> Any:
    return vector(user_slots=2, cpu=2, memory=2 * GiB)


def _core(enable: bool, pools: dict[str, Any] | None = None, **config: Any) -> SchedulerCore:
    ssd = {"enable": enable, "node_tag_filter": SSD_TAG, "medium_names": [MEDIUM]}
    trees = parse_pool_trees(
        {"t": {"config": {**TREE_CONFIG, **config, "ssd_priority_preemption": ssd}, "pools": pools or {}}}
    )
    assert unsupported_options(trees) == []
    core = SchedulerCore(PoolTree(trees["t"]))
    for address, tags in NODES.items():
        core.add_node(address, _limits(), tags)
    return core


def _start(
    core: SchedulerCore,
    op: str,
    jobs: int,
    *,
    ssd: bool = False,
    now: float = 0.0,
    frozen: bool = False,
    **spec: Any,
) -> None:
    task: dict[str, Any] = {"command": "sleep 1000"}
    if ssd:
        task["disk_request"] = {"disk_space": 1024**2, "medium_name": MEDIUM}
        spec.setdefault("scheduling_tag_filter", SSD_TAG)
    controller = VanillaController(op, [TaskSpec("main", jobs, vector(user_slots=1, cpu=1, memory=GiB / 4))])
    document = {**spec, "tasks": {"main": task}}
    if frozen:  # a frozen model: the per-period delta names its changes (a plain map is re-read every period)
        task["job_count"] = jobs
    parsed = OperationSpec.parse(document, "spec") if frozen else document
    core.register_operation(op, controller, user="u", pool=spec.get("pool"), spec=parsed, now=now)


def _round(core: SchedulerCore, now: float, order: tuple[str, ...] = tuple(NODES)) -> list[Any]:
    core.update_fair_share(now)
    results = []
    for address in order:
        results.append(core.process_heartbeat(NodeHeartbeat(address, _limits(), NODES[address]), now))
    return results


def _cpu(core: SchedulerCore, op: str) -> float:
    return float(core.operation_view(op)["running_allocation_count"])


def _blocked_on_ssd_nodes(enable: bool) -> tuple[SchedulerCore, list[Any]]:
    """An operation holds every cpu, its non-preemptible allocations on the SSD nodes (started there first);
    then an SSD operation of 4 jobs arrives and starves."""
    core = _core(enable)
    _start(core, "blocking", 8)
    _round(core, 0.0)
    assert _cpu(core, "blocking") == 8
    _start(core, "ssd", 4, ssd=True, now=1.0)
    preempted = []
    for t in range(1, 12):
        for result in _round(core, float(t), order=("n0", "n1")):
            preempted.extend(result.allocations_to_preempt)
        _finish_preempted(core, float(t) + 0.5)  # the nodes report the preempted allocations gone
    return core, preempted


def _finish_preempted(core: SchedulerCore, now: float) -> None:
    for node in core.strategy.nodes.values():
        for allocation in list(node.allocations.values()):
            if allocation.preempted:
                core.on_allocation_finished(FinishedAllocation(allocation.id, "aborted"), now)


def test_without_ssd_priority_preemption_the_ssd_operation_starves() -> None:
    core, preempted = _blocked_on_ssd_nodes(enable=False)
    assert core.strategy.starvation_status("ssd") != "non_starving"
    assert _cpu(core, "ssd") == 0
    assert preempted == []  # the SSD nodes hold only the blocking operation's non-preemptible allocations


def test_ssd_operation_preempts_non_preemptible_allocations_on_ssd_nodes() -> None:
    core, preempted = _blocked_on_ssd_nodes(enable=True)
    assert _cpu(core, "ssd") == 4
    assert {record.reason.value for record in preempted} == {"ssd_preemption"}
    assert {record.stage.value for record in preempted} == {"preemptive_ssd_normal"}
    # victims the usual stages could not take: not preemptible (the blocking operation's first allocations)
    assert "non_preemptible" in {record.allocation_status.value for record in preempted}
    assert "preemptible" not in {record.allocation_status.value for record in preempted}
    assert {record.node_address for record in preempted} == {"n0", "n1"}


def test_ssd_allocations_are_not_aggressively_preempted_for_regular_operations() -> None:
    """YTsaurus's ``test_no_aggressive_preemption_of_ssd_jobs_for_regular_jobs``: an aggressively starving
    regular operation on the SSD nodes cannot take an SSD operation's allocations; with the option off it can."""
    for enable, expected in ((True, 0), (False, 1)):
        core = _core(enable, pools={"aggressive": {"enable_aggressive_starvation": True}})
        _start(core, "blocking", 4, ssd=True)
        _round(core, 0.0)
        assert _cpu(core, "blocking") == 4
        _start(core, "op", 1, now=1.0, pool="aggressive", scheduling_tag_filter=SSD_TAG)
        for t in range(1, 8):
            _round(core, float(t), order=("n0", "n1"))
            _finish_preempted(core, float(t) + 0.5)
        assert _cpu(core, "op") == expected, enable


def test_ssd_operation_preempts_ssd_allocations_aggressively() -> None:
    """YTsaurus's ``test_aggressive_preemption_of_ssd_jobs_for_ssd_jobs``."""
    core = _core(True, pools={"aggressive": {"enable_aggressive_starvation": True}})
    _start(core, "blocking", 4, ssd=True)
    _round(core, 0.0)
    _start(core, "op", 1, ssd=True, now=1.0, pool="aggressive")
    reasons = set()
    for t in range(1, 8):
        for result in _round(core, float(t), order=("n0", "n1")):
            reasons.update(record.reason.value for record in result.allocations_to_preempt)
        _finish_preempted(core, float(t) + 0.5)
    assert _cpu(core, "op") == 1
    assert reasons == {"ssd_aggressive_preemption"}


def test_pool_keeps_its_regular_operations_off_ssd_nodes() -> None:
    """YTsaurus's ``test_forbid_regular_jobs_on_ssd_nodes``."""
    core = _core(True, pools={"protected": {"allow_regular_jobs_on_ssd_nodes": False}, "regular": {}})
    _start(core, "protected_op", 4, pool="protected")
    _start(core, "regular_op", 4, pool="regular")
    for t in range(3):
        _round(core, float(t))
    assert _cpu(core, "protected_op") == 4 and _cpu(core, "regular_op") == 4
    nodes = {a.operation_id: set() for a in core.strategy.allocations.values()}
    for allocation in core.strategy.allocations.values():
        nodes[allocation.operation_id].add(allocation.node_address)
    assert nodes["protected_op"] == {"n2", "n3"}
    assert nodes["regular_op"] == {"n0", "n1"}
    assert core.operation_view("protected_op")["are_regular_jobs_on_ssd_nodes_allowed"] is False
    assert core.operation_view("regular_op")["are_regular_jobs_on_ssd_nodes_allowed"] is True
    reasons = core.operation_view("protected_op")["deactivation_reasons"]
    assert reasons.get("regular_allocation_on_ssd_node_forbidden", 0) > 0
    # an SSD operation of the protected pool still runs on the SSD nodes
    for allocation_id in [a.id for a in core.strategy.allocations.values() if a.operation_id == "regular_op"]:
        _finish(core, allocation_id, 3.0)
    _start(core, "ssd_op", 1, ssd=True, now=3.0, pool="protected")
    _round(core, 3.5)
    assert _cpu(core, "ssd_op") == 1


def _finish(core: SchedulerCore, allocation_id: str, now: float) -> None:
    core.on_allocation_finished(FinishedAllocation(allocation_id, "aborted"), now)


def test_ssd_stages_ignore_the_victims_preemption_blocking_ancestors() -> None:
    """YTsaurus's ``test_ignore_preemption_blocking_ancestor_for_ssd_jobs``: prod (guarantee 7 cpu) runs at
    satisfaction below 1, so ``preemption_check_satisfaction`` protects its allocations from normal preemption;
    research's SSD job still takes one."""
    pools = {
        "prod": {"strong_guarantee_resources": {"cpu": 7}},
        "research": {"strong_guarantee_resources": {"cpu": 1}},
    }
    for enable, expected in ((False, 0), (True, 1)):
        core = _core(enable, pools=pools, preemption_check_satisfaction=True)
        # 1.5-cpu jobs fit one per node: 4 run (6 cpu of prod's 7)
        controller = VanillaController(
            "prod_op", [TaskSpec("main", 5, vector(user_slots=1, cpu=1.5, memory=GiB))]
        )
        core.register_operation("prod_op", controller, user="u", pool="prod", spec={"pool": "prod"}, now=0.0)
        _round(core, 0.0)
        assert _cpu(core, "prod_op") == 4
        _start(core, "ssd_op", 1, ssd=True, now=1.0, pool="research")
        for t in range(1, 8):
            _round(core, float(t), order=("n0", "n1"))
            _finish_preempted(core, float(t) + 0.5)
        assert _cpu(core, "ssd_op") == expected, enable


def test_off_by_default_and_validated() -> None:
    trees = parse_pool_trees({"t": {"config": {"ssd_priority_preemption": {"node_tag_filter": SSD_TAG}}}})
    assert unsupported_options(trees) == []
    with pytest.raises(ConfigError, match="non-empty node tag filter"):
        parse_pool_trees(
            {"t": {"config": {"ssd_priority_preemption": {"enable": True, "node_tag_filter": ""}}}}
        )
    with pytest.raises(ConfigError, match="medium_names"):
        parse_pool_trees({"t": {"config": {"ssd_priority_preemption": {"medium_names": "ssd"}}}})
    with pytest.raises(ConfigError, match="allow_regular_jobs_on_ssd_nodes"):
        parse_pool_trees({"t": {"pools": {"p": {"allow_regular_jobs_on_ssd_nodes": "no"}}}})


def test_disk_request_media_of_a_spec() -> None:
    spec = {
        "tasks": {
            "a": {"command": "x", "disk_request": {"disk_space": 1, "medium_name": MEDIUM}},
            "b": {"command": "x", "disk_request": {"disk_space": 1}},
            "c": {"command": "x"},
        }
    }
    assert disk_request_media(spec) == {"a": frozenset({MEDIUM}), "b": frozenset({"default"})}


def test_the_ssd_state_follows_the_period_delta() -> None:
    """Each update classifies only the operations its delta names (arrived, left, moved to a pool with another
    allowance, queued behind a running limit and activated): the state is what classifying every running
    operation anew gives, and an unchanged tree classifies nothing."""
    pools = {
        "protected": {"allow_regular_jobs_on_ssd_nodes": False},
        "regular": {"max_running_operation_count": 2},
        "other": {},
    }
    core = _core(True, pools=pools)
    ssd = core.strategy.ssd

    def check(now: float, *, walked: bool = False) -> None:
        core.update_fair_share(now)
        assert (
            core.kept.projection.changes is None
        ) == walked  # the delta named operations: only they are read
        kept = core.kept.ssd
        assert (ssd.ssd_tasks, ssd.disallowed, ssd.forbidden) == (
            kept.ssd_tasks,
            kept.disallowed,
            kept.forbidden,
        )
        projection = core.kept.projection
        anew = classify_ssd_operations(None, ssd.config, projection, projection.advanced_with)
        assert (anew.ssd_tasks, anew.disallowed, anew.forbidden) == (
            kept.ssd_tasks,
            kept.disallowed,
            kept.forbidden,
        )

    _start(core, "a", 1, ssd=True, pool="protected", frozen=True)
    _start(core, "b", 1, frozen=True, pool="protected")
    check(0.0, walked=True)
    assert set(ssd.ssd_tasks) == {"a"} and ssd.forbidden == {"b"}
    _start(core, "c", 1, frozen=True, ssd=True, pool="regular")
    _start(core, "d", 1, frozen=True, pool="regular")
    _start(core, "e", 1, frozen=True, ssd=True, pool="regular", now=1.0)  # queued: the pool runs two
    check(1.0)
    assert set(ssd.ssd_tasks) == {"a", "c"} and ssd.disallowed == {"a", "b"}
    core.pool_tree.commit_parameters_update(core.pool_tree.prepare_parameters_update("b", pool="other"))
    check(2.0)
    assert ssd.forbidden == frozenset()
    core.unregister_operation("c", now=3.0)  # "e" runs in its place
    check(3.0)
    assert set(ssd.ssd_tasks) == {"a", "e"} and ssd.disallowed == {"a"}
    core.pool_tree.commit_parameters_update(core.pool_tree.prepare_parameters_update("d", pool="protected"))
    check(4.0)
    assert ssd.forbidden == {"d"}
    refreshed = core.kept.ssd
    check(5.0)  # nothing changed
    assert core.kept.ssd is refreshed


def test_a_period_stopped_before_its_end_leaves_the_next_classifying_every_operation() -> None:
    """An operation that arrives in a period whose update fails (the projection advanced past it) is still
    classified by the next period: the SSD classification is handed on only by a period that reached its end."""
    core = _core(True, pools={"protected": {"allow_regular_jobs_on_ssd_nodes": False}})
    ssd = core.strategy.ssd
    _start(core, "a", 1, ssd=True, frozen=True)
    core.update_fair_share(0.0)
    assert set(ssd.ssd_tasks) == {"a"} and core.kept.ssd is not None
    _start(core, "b", 1, ssd=True, frozen=True, now=1.0)
    _start(core, "c", 1, frozen=True, pool="protected", now=1.0)

    def failing(*args: Any) -> Any:
        raise RuntimeError("stopped half-way")

    core._fair_share = failing
    with pytest.raises(RuntimeError):
        core.update_fair_share(1.0)
    assert core.kept.ssd is None
    core._fair_share = None
    core.update_fair_share(2.0)
    assert set(ssd.ssd_tasks) == {"a", "b"} and ssd.forbidden == {"c"}


def test_an_update_in_parts_classifies_before_any_heartbeat_schedules() -> None:
    """The live service publishes an update in parts (`update_fair_share(in_parts=True)`, the preemptible lists
    configured later between heartbeats): a protected pool's operation published by it is kept off SSD nodes by the
    very next heartbeat (CI once saw its job on an SSD node when the classification waited for the lists)."""
    core = _core(True, pools={"protected": {"allow_regular_jobs_on_ssd_nodes": False}})
    _start(core, "protected_op", 4, pool="protected")
    core.update_fair_share(0.0, in_parts=True)
    assert not core.update_finished
    assert core.strategy.ssd.forbidden == {"protected_op"}
    for address in ("n0", "n1"):  # the SSD nodes
        result = core.process_heartbeat(NodeHeartbeat(address, _limits(), NODES[address]), 0.1)
        assert not result.allocations_to_start
    assert core.finish_update()
    for address in ("n2", "n3"):
        core.process_heartbeat(NodeHeartbeat(address, _limits(), NODES[address]), 0.2)
    assert _cpu(core, "protected_op") == 4


def test_an_operations_fields_carry_no_policy_maps_while_the_policies_are_off() -> None:
    """The read snapshot's capture takes every operation's strategy fields under the lock: with the segments, GPU
    planning and SSD policies all off it makes none of their (empty) maps, and the view is the same; with SSD on
    the operation's SSD field is there."""
    for enable in (False, True):
        core = _core(enable)
        _start(core, "op", 2)
        _round(core, 0.0)
        fields = core.strategy.element_fields("op")
        assert fields.operation is not None
        assert len(fields.operation.policies) == (3 if enable else 0)
        view = core.operation_view("op")
        assert ("are_regular_jobs_on_ssd_nodes_allowed" in view) is enable
        assert view["running_allocation_count"] == 2
