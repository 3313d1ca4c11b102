"""The tree's ``necessary_resources_for_operation`` (issue 30): an operation asking for none of a resource the tree
calls necessary fails when it materializes, with YTsaurus's error; through ``enforce_time_limits``, like the other
tree checks, so the simulator and the live service fail it alike (``tests/sim/test_sim_time_limits.py``)."""

from __future__ import annotations

import pytest
from strategykit import register_vanilla

from pooltree.config import parse_pool_trees
from pooltree.config.support import unsupported_options
from pooltree.controllers.operations import TaskSpec
from pooltree.errors import ConfigError
from pooltree.resources import vector
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

GiB = 1024.0**3


def _core(necessary: object) -> SchedulerCore:
    trees = parse_pool_trees(
        {"gpu": {"config": {"necessary_resources_for_operation": necessary}, "pools": {"a": {}}}}
    )
    assert unsupported_options(trees) == []  # implemented: no longer in the alert
    core = SchedulerCore(PoolTree(trees["gpu"]))
    core.add_node("n0", vector(user_slots=8, cpu=64, gpu=8, memory=256 * GiB))
    return core


def test_an_operation_without_gpu_demand_fails_in_a_tree_that_needs_gpu() -> None:
    core = _core(["gpu"])
    register_vanilla(core, "cpu-only", "a", [TaskSpec("main", 2, vector(user_slots=1, cpu=4, memory=GiB))])
    register_vanilla(
        core, "trainer", "a", [TaskSpec("main", 1, vector(user_slots=1, cpu=8, gpu=8, memory=GiB))]
    )
    failed = dict(core.enforce_time_limits(0.0))
    assert sorted(failed) == ["cpu-only"]
    assert (
        failed["cpu-only"]["message"]
        == "Operation has zero demand for resources which are necessary in tree 'gpu'"
    )
    assert failed["cpu-only"]["attributes"]["necessary_resources_with_zero_demand"] == ["gpu"]
    assert core.enforce_time_limits(1.0) == []  # reported once


def test_the_minimum_over_tasks_decides() -> None:
    """YTsaurus reads the aggregated (componentwise minimum) initial needs: one task without GPUs is enough."""
    core = _core(["gpu", "cpu"])
    register_vanilla(
        core,
        "mixed",
        "a",
        [
            TaskSpec("trainer", 1, vector(user_slots=1, cpu=8, gpu=8, memory=GiB)),
            TaskSpec("reader", 1, vector(user_slots=1, cpu=2, memory=GiB)),
        ],
    )
    failed = dict(core.enforce_time_limits(0.0))
    assert failed["mixed"]["attributes"]["necessary_resources_with_zero_demand"] == ["gpu"]


def test_without_the_option_nothing_fails() -> None:
    core = _core([])
    register_vanilla(core, "cpu-only", "a", [TaskSpec("main", 2, vector(user_slots=1, cpu=4, memory=GiB))])
    assert core.enforce_time_limits(0.0) == []


@pytest.mark.parametrize(("value", "where"), [(["gpu", "disk"], "[1]"), ("gpu", "")])
def test_a_bad_value_names_the_field(value: object, where: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_pool_trees({"t": {"config": {"necessary_resources_for_operation": value}}})
    assert f"necessary_resources_for_operation{where}" in str(error.value)
