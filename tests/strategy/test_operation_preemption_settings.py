"""Per-operation preemption settings in the core (issue 27), and the tree threshold they combine with.

The counts are YTsaurus's ``TestNonPreemptibleResourceUsageThreshold`` (test_scheduler_preemption.py): one node of
10 cpu / 10 slots, one vanilla operation of 15 one-cpu jobs, satisfaction thresholds 0.9 / 0.4 and tolerance 1.0;
(preemptible, aggressively preemptible) = (1, 5) without a threshold, (1, 4) at {cpu 5, user_slots 6}, (1, 2) at
{user_slots 7}, (0, 0) at {cpu 10}. An operation's own threshold only lowers what it inherits."""

from __future__ import annotations

from typing import Any

import pytest

from pooltree.config import OperationSpec, parse_pool_trees
from pooltree.config.tree import PoolTreeConfig
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy import NodeHeartbeat, StarvationStatus, StrategyConfig
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

GIB = 1024.0**3
NODE = vector(user_slots=10, cpu=10, memory=40 * GIB)
PREEMPTION = {
    "aggressive_preemption_satisfaction_threshold": 0.4,
    "preemption_satisfaction_threshold": 0.9,
    "fair_share_starvation_tolerance": 1.0,
}


def _core(config: dict[str, Any], pools: dict[str, Any] | None = None) -> SchedulerCore:
    core = SchedulerCore(
        PoolTree(parse_pool_trees({"default": {"config": config, "pools": pools or {}}})["default"])
    )
    core.add_node("n0", NODE)
    return core


def _start(
    core: SchedulerCore,
    op_id: str,
    jobs: int,
    spec: dict[str, Any],
    pool: str | None = None,
    now: float = 0.0,
) -> None:
    task = [TaskSpec("main", jobs, vector(user_slots=1, cpu=1, memory=GIB))]
    model = OperationSpec.parse({**spec, **({"pool": pool} if pool else {})}, "spec")
    core.register_operation(
        op_id,
        VanillaController(op_id, task),
        user="u",
        operation_type="vanilla",
        pool=pool,
        spec=model,
        now=now,
    )


def _run(core: SchedulerCore, start: float, end: float) -> None:
    for t in range(int(start), int(end)):
        core.update_fair_share(float(t))
        core.process_heartbeat(NodeHeartbeat("n0", NODE), float(t))
    core.update_fair_share(float(end))


def _counts(tree_threshold: dict[str, float] | None, spec: dict[str, Any] | None = None) -> tuple[int, int]:
    config = dict(PREEMPTION)
    if tree_threshold is not None:
        config["non_preemptible_resource_usage_threshold"] = tree_threshold
    core = _core(config)
    _start(core, "op", 15, spec or {})
    _run(core, 0, 4)
    view = core.operation_view("op")
    assert view["running_allocation_count"] == 10
    return view["preemptible_allocation_count"], view["aggressively_preemptible_allocation_count"]


@pytest.mark.parametrize(
    ("threshold", "expected"),
    [
        (None, (1, 5)),
        ({"cpu": 5.0, "user_slots": 6}, (1, 4)),
        ({"user_slots": 7}, (1, 2)),
        ({"cpu": 10.0}, (0, 0)),
    ],
)
def test_tree_threshold_counts_are_ytsaurus(
    threshold: dict[str, float] | None, expected: tuple[int, int]
) -> None:
    assert _counts(threshold) == expected  # a tree threshold used to fail the core's config (Resources map)


def test_operation_threshold_only_lowers_the_inherited_one() -> None:
    spec = {"non_preemptible_resource_usage_threshold": {"user_slots": 7}}
    assert _counts(None, spec) == _counts({"user_slots": 7})  # nothing inherited: the spec's applies
    raise_ = {"non_preemptible_resource_usage_threshold": {"user_slots": 10}}
    assert _counts({"user_slots": 7}, raise_) == (1, 2)  # cannot raise the tree's 7
    lower = {"non_preemptible_resource_usage_threshold": {"cpu": 5.0, "user_slots": 6}}
    assert _counts({"cpu": 10.0}, lower) == _counts({"cpu": 5.0, "user_slots": 6})


def test_operation_starvation_settings_are_effective_and_take_effect() -> None:
    pools = {
        "hog": {},
        "guaranteed": {"strong_guarantee_resources": {"cpu": 10}, "fair_share_starvation_tolerance": 0.9},
    }
    core = _core(
        {"fair_share_starvation_timeout": 10000, "fair_share_aggressive_starvation_timeout": 100000}, pools
    )
    _start(core, "hog_op", 10, {}, pool="hog")
    _run(core, 0, 3)
    assert core.strategy.element_usage("hog_op")[1] == 10
    # one starves after the tree's 10 s, one asks for 40 s and a lower tolerance, one asks for less (ignored)
    _start(
        core,
        "patient",
        2,
        {"fair_share_starvation_timeout": 40000, "fair_share_starvation_tolerance": 0.5},
        pool="guaranteed",
        now=3,
    )
    _start(
        core,
        "eager",
        2,
        {"fair_share_starvation_timeout": 1000, "fair_share_starvation_tolerance": 0.95},
        pool="guaranteed",
        now=3,
    )
    core.update_fair_share(3.0)
    patient, eager = core.operation_view("patient"), core.operation_view("eager")
    assert patient["effective_fair_share_starvation_timeout"] == 40.0
    assert patient["effective_fair_share_starvation_tolerance"] == 0.5
    assert eager["effective_fair_share_starvation_timeout"] == 10.0  # the tree's: the spec may only raise it
    assert eager["effective_fair_share_starvation_tolerance"] == 0.9  # the pool's: the spec may only lower it
    for t in range(3, 20):
        core.update_fair_share(float(t))
    assert core.strategy.starvation_status("eager") != StarvationStatus.NON_STARVING
    assert core.strategy.starvation_status("patient") == StarvationStatus.NON_STARVING
    for t in range(20, 50):
        core.update_fair_share(float(t))
    assert core.strategy.starvation_status("patient") != StarvationStatus.NON_STARVING


def test_a_tree_threshold_naming_no_resource_is_no_threshold() -> None:
    """YTsaurus: ``non_preemptible_resource_usage_threshold={}`` is trivial (no allocation protected by it); with
    ``max_unpreemptible_running_allocation_count`` the count is the ``user_slots`` threshold, the rest unlimited.
    (An empty map used to become an all-infinite threshold: every allocation non-preemptible.)"""
    empty = PoolTreeConfig.parse({"non_preemptible_resource_usage_threshold": {}}, "config")
    assert StrategyConfig.from_options(empty).tree_non_preemptible_threshold() is None
    assert (
        StrategyConfig.from_options(
            {"non_preemptible_resource_usage_threshold": {}}
        ).tree_non_preemptible_threshold()
        is None
    )
    counted = PoolTreeConfig.parse(
        {"non_preemptible_resource_usage_threshold": {}, "max_unpreemptible_running_allocation_count": 3},
        "config",
    )
    threshold = StrategyConfig.from_options(counted).tree_non_preemptible_threshold()
    assert threshold is not None and threshold[0] == 3 and all(x == float("inf") for x in threshold[1:])
