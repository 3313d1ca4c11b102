"""Checks that fail an operation in a tree (issue 30): the tree's ``min_job_resource_limits`` /
``max_job_resource_limits`` and ``enable_limiting_ancestor_check`` (tree and spec), through SchedulerCore; the
failures come out of ``enforce_time_limits``, which the simulator and the live service already carry out."""

from __future__ import annotations

from typing import Any

from pooltree.config import parse_pool_trees
from pooltree.config.support import unsupported_options
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

GiB = 1024.0**3
NODE = vector(user_slots=10, cpu=10, memory=10 * GiB)


def _core(config: dict[str, Any], pools: dict[str, Any] | None = None) -> SchedulerCore:
    trees = parse_pool_trees({"t": {"config": config, "pools": pools or {"a": {}}}})
    assert unsupported_options(trees) == []  # implemented: not in the unsupported-options alert
    core = SchedulerCore(PoolTree(trees["t"]))
    core.add_node("n0", NODE)
    return core


def _register(core: SchedulerCore, op: str, cpu: float, spec: dict | None = None, pool: str = "a") -> None:
    controller = VanillaController(op, [TaskSpec("main", 2, vector(user_slots=1, cpu=cpu, memory=GiB))])
    core.register_operation(op, controller, user="u", pool=pool, spec=spec or {"pool": pool}, now=0.0)


def test_jobs_outside_the_trees_job_resource_limits_fail_the_operation() -> None:
    core = _core({"min_job_resource_limits": {"cpu": 2}, "max_job_resource_limits": {"cpu": 4}})
    _register(core, "small", 1)
    _register(core, "fits", 3)
    _register(core, "big", 5)
    failed = dict(core.enforce_time_limits(0.0))
    assert sorted(failed) == ["big", "small"]
    assert failed["small"]["message"] == (
        "Operation has jobs with resource demand that violates restrictions for resources [cpu] in tree 't'"
    )
    assert failed["big"]["attributes"]["upper_bounds"] == {"cpu": 4.0}
    assert failed["big"]["attributes"]["task"] == "main"
    assert core.enforce_time_limits(1.0) == []  # reported once


def test_an_operation_under_a_too_small_pool_limit_fails_after_the_safe_timeout() -> None:
    pools = {"limited": {"resource_limits": {"cpu": 2}, "pools": {"leaf": {}}}, "free": {}}
    core = _core({}, pools)
    _register(core, "stuck", 3, pool="leaf")
    _register(core, "fine", 1, pool="leaf")
    core.update_fair_share(0.0)
    assert core.enforce_time_limits(0.0) == []
    assert core.enforce_time_limits(300.0) == []  # 5 minutes exactly: not yet
    failed = core.enforce_time_limits(300.5)
    assert [op for op, _ in failed] == ["stuck"]
    error = failed[0][1]
    assert error["message"] == (
        "Operation has ancestor 'limited' whose specified limits for resources [cpu] are too small to satisfy "
        "operation's minimum allocation resource demand"
    )
    assert error["attributes"]["resource_limits"] == {"cpu": 2.0}


def test_the_limiting_ancestor_check_can_be_switched_off_in_the_tree_or_the_spec() -> None:
    pools = {"limited": {"resource_limits": {"cpu": 2}}}
    core = _core({"enable_limiting_ancestor_check": False}, pools)
    _register(core, "stuck", 3, pool="limited")
    core.update_fair_share(0.0)
    core.enforce_time_limits(0.0)
    assert core.enforce_time_limits(1000.0) == []
    core = _core({}, pools)
    _register(
        core, "opted-out", 3, {"pool": "limited", "enable_limiting_ancestor_check": False}, pool="limited"
    )
    _register(core, "checked", 3, pool="limited")
    core.update_fair_share(0.0)
    core.enforce_time_limits(0.0)
    assert [op for op, _ in core.enforce_time_limits(1000.0)] == ["checked"]
