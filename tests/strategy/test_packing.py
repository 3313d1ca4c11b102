"""The tree's ``packing`` (``pooltree/strategy/packing.py``, YTsaurus's ``TPackingStatistics``): an operation
declines a node whose free resources pack its allocation worse than the nodes it saw recently, and when nothing
else starts on the node the ``regular_packing_fallback`` stage starts one allocation anyway.

Jobs need 1 slot, 2 cpu, 8 GiB. Node ``fit`` (4 slots, 8 cpu, 32 GiB) has their shape; node ``odd`` (16 slots,
16 cpu, 16 GiB) does not. After the operation filled ``fit``, ``odd``'s heartbeat is worse than every snapshot
of ``fit`` it saw."""

from __future__ import annotations

from typing import Any

import pytest

from pooltree.config import parse_pool_trees
from pooltree.config.packing import PackingConfig
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.errors import ConfigError
from pooltree.resources import vector
from pooltree.strategy import NodeHeartbeat
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.packing import packing_metric
from pooltree.tree import PoolTree

GiB = 1024.0**3
FIT = vector(user_slots=4, cpu=8, memory=32 * GiB)
ODD = vector(user_slots=16, cpu=16, memory=16 * GiB)


def _core(packing: dict[str, Any] | None, small_jobs: int = 0) -> tuple[SchedulerCore, list[dict[str, Any]]]:
    config = {"packing": packing} if packing is not None else {}
    trees = parse_pool_trees({"t": {"config": config, "pools": {"a": {}}}})
    events: list[dict[str, Any]] = []
    core = SchedulerCore(PoolTree(trees["t"]), event_sink=events.append)
    core.add_node("fit", FIT)
    core.add_node("odd", ODD)
    for op in ("big",):
        task = TaskSpec("main", 20, vector(user_slots=1, cpu=2, memory=8 * GiB))
        core.register_operation(
            op, VanillaController(op, [task]), user="u", pool="a", spec={"pool": "a"}, now=0.0
        )
    core.update_fair_share(0.0)
    core.process_heartbeat(NodeHeartbeat("fit", FIT), 0.0)
    assert core.operation_view("big")["running_allocation_count"] == 4
    if small_jobs:
        task = TaskSpec("main", small_jobs, vector(user_slots=1, cpu=1, memory=GiB))
        core.register_operation(
            "small", VanillaController("small", [task]), user="u", pool="a", spec={"pool": "a"}, now=0.5
        )
        core.update_fair_share(0.5)
    events.clear()
    core.process_heartbeat(NodeHeartbeat("odd", ODD), 1.0)
    return core, [e for e in events if e["event"] == "allocation_started"]


def test_without_packing_the_odd_node_takes_what_fits() -> None:
    _, started = _core(None)
    assert [e["stage"] for e in started] == ["regular_medium_priority"] * 2  # 16 GiB: two jobs


def test_with_packing_the_odd_node_is_declined_and_the_fallback_starts_one() -> None:
    core, started = _core({"enable": True})
    assert [e["stage"] for e in started] == ["regular_packing_fallback"]
    assert core.strategy.operations["big"].deactivation_reasons["bad_packing"] >= 1


def test_no_fallback_when_another_operation_started_on_the_node() -> None:
    core, started = _core({"enable": True}, small_jobs=2)
    assert [(e["operation_id"], e["stage"]) for e in started] == [("small", "regular_medium_priority")] * 2
    assert core.strategy.operations["big"].deactivation_reasons["bad_packing"] >= 1
    _, plain = _core(None, small_jobs=2)
    assert sorted(e["operation_id"] for e in plain) == ["big", "small", "small"]  # 16 GiB


def test_a_past_snapshot_that_packs_no_better_accepts_the_node() -> None:
    # with a tolerance so large that no past snapshot counts as better, the node is taken as without packing
    _, started = _core({"enable": True, "absolute_metric_value_tolerance": 100.0})
    assert [e["stage"] for e in started] == ["regular_medium_priority"] * 2


def test_the_metric_is_zero_for_the_allocation_s_own_shape() -> None:
    total = [20.0, 24.0, 48.0]
    demand = [1.0, 2.0, 8.0]
    assert packing_metric([4.0, 8.0, 32.0], demand, total, "angle_length") == pytest.approx(0.0, abs=1e-12)
    odd = packing_metric([16.0, 16.0, 16.0], demand, total, "angle_length")
    assert odd > 1.0
    assert packing_metric([16.0, 16.0, 16.0], demand, total, "angle") < odd


def test_the_config_is_validated() -> None:
    assert PackingConfig.parse({"enable": True}).max_better_past_snapshots == 2
    with pytest.raises(ConfigError, match=r"packing\.metric"):
        PackingConfig.parse({"metric": "volume"})
    with pytest.raises(ConfigError, match=r"packing\.relative_metric_value_tolerance"):
        PackingConfig.parse({"relative_metric_value_tolerance": 0.5})


def test_a_tree_config_with_a_bad_packing_or_tentative_option_is_refused_naming_the_field() -> None:
    cases = (
        ({"packing": {"metric": "x"}}, "pool_trees.t.config.packing.metric"),
        ({"non_tentative_operation_types": "map"}, "pool_trees.t.config.non_tentative_operation_types"),
        (
            {"tentative_tree_saturation_deactivation_period": "soon"},
            "tentative_tree_saturation_deactivation_period",
        ),
    )
    for config, field in cases:
        with pytest.raises(ConfigError, match=field):
            parse_pool_trees({"t": {"config": config, "pools": {}}})
