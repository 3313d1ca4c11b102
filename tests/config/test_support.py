"""YTsaurus options pooltree accepts without implementing them, the alert about them, and typo errors."""

from __future__ import annotations

import pytest

from pooltree.config import OperationSpec, PoolConfig, PoolTreeConfig, parse_pool_trees
from pooltree.config.support import (
    POOL_UNSUPPORTED,
    SPEC_UNSUPPORTED,
    TREE_UNSUPPORTED,
    unsupported_options,
    unsupported_options_alert,
    unsupported_spec_options,
)
from pooltree.errors import ConfigError


@pytest.mark.parametrize("name", sorted(TREE_UNSUPPORTED))
def test_every_listed_tree_option_is_accepted_and_reported(name: str) -> None:
    field = PoolTreeConfig.model_fields.get(name)
    value = True if field is None else field.default  # a field takes a value of its type
    doc = {"t": {"config": {name: value}, "pools": {"p": {}}}}
    trees = parse_pool_trees(doc)
    entries = unsupported_options(trees)
    assert [entry["path"] for entry in entries] == [f"pool_trees.t.config.{name}"]
    assert entries[0]["reason"]


@pytest.mark.parametrize("name", sorted(POOL_UNSUPPORTED))
def test_every_listed_pool_option_is_accepted_and_reported(name: str) -> None:
    field = PoolConfig.model_fields.get(name)
    value = True if field is None else not field.default
    trees = parse_pool_trees({"t": {"pools": {"p": {name: value}}}})
    assert [entry["path"] for entry in unsupported_options(trees)] == [f"pool_trees.t.pools.p.{name}"]


def test_a_production_tree_config_loads_and_lists_what_pooltree_ignores() -> None:
    config = {
        "enable_step_function_for_gang_operations": True,
        "enable_improved_fair_share_by_fit_factor_computation": True,
        "enable_improved_fair_share_by_fit_factor_computation_distribution_gap": True,
        "scheduling_segments": {"mode": "large_gpu", "data_centers": ["dc1"]},
        "packing": {"enable": True},
        "waiting_for_resources_on_node_timeout": 60000,
        "fail_remote_copy_on_missing_resource_limits": True,
        "truncate_fifo_pool_unsatisfied_child_fair_share": True,
        "total_resource_limits_consider_delay": 60000,
        "max_unpreemptable_running_job_count": 0,
        "main_resource": "gpu",
    }
    trees = parse_pool_trees({"gpu": {"config": config, "pools": {"research": {"scheduling_tag": "gpu"}}}})
    tree = trees["gpu"]
    assert tree.config.node_reconnection_timeout == 60.0  # the old name is an alias
    assert tree.config.max_unpreemptible_running_allocation_count == 0
    assert tree.pools["research"].config.scheduling_tag_filter == "gpu"
    options = {entry["option"] for entry in unsupported_options(trees)}
    # scheduling_segments, packing, node_reconnection_timeout and waiting_for_resources_on_node_timeout are
    # implemented (the last in the live service: the offline tools report it)
    assert options == {"fail_remote_copy_on_missing_resource_limits"}
    offline = {entry["option"] for entry in unsupported_options(trees, offline=True)}
    assert offline == {"fail_remote_copy_on_missing_resource_limits", "waiting_for_resources_on_node_timeout"}
    assert tree.config.enable_improved_fair_share_by_fit_factor_computation  # implemented
    # Implemented options and defaults are not in the alert.
    assert unsupported_options(parse_pool_trees({"t": {"pools": {"p": {}}}})) == []
    alert = unsupported_options_alert(unsupported_options(trees))
    assert alert is not None and len(alert["attributes"]["options"]) == 1
    assert tree.config.enable_fair_share_truncation_in_fifo_pool  # the old name is an alias
    assert unsupported_options_alert([]) is None


@pytest.mark.parametrize(
    ("model", "data", "path", "suggestion"),
    [
        (
            PoolTreeConfig,
            {"fair_share_starvation_tolerence": 0.5},
            "cfg.fair_share_starvation_tolerence",
            "fair_share_starvation_tolerance",
        ),
        (
            PoolTreeConfig,
            {"enable_step_function_for_gang_operation": True},
            "cfg.enable_step_function_for_gang_operation",
            "enable_step_function_for_gang_operations",
        ),
        (PoolConfig, {"wieght": 2}, "cfg.wieght", "weight"),
        (
            PoolConfig,
            {"strong_guarantee_resource": {"cpu": 1}},
            "cfg.strong_guarantee_resource",
            "strong_guarantee_resources",
        ),
    ],
)
def test_a_typo_is_kept_and_reported_naming_the_closest_known_option(model, data, path, suggestion) -> None:
    """YTsaurus keeps an option name it does not know and raises an alert; so does pooltree (issue 14)."""
    config = model.parse(data, "cfg")
    [(found_path, name, closest)] = config.unrecognized_options("cfg")
    assert (found_path, closest) == (path, suggestion)
    assert name == path.rsplit(".", 1)[1]


def test_spec_strategy_options_are_recognized_and_reported() -> None:
    spec = OperationSpec.parse(
        {
            "tentative_pool_trees": ["cloud"],
            "fair_share_options_per_pool_tree": {"t": {"weight": 2}},
            "scheduling_segment": "large_gpu",
            "tasks": {"main": {"command": "true", "job_count": 1, "job_time_limit": 1000}},
            "my_own_key": 1,
        }
    )
    assert spec.weight_for_tree("t") == 2  # the old name of scheduling_options_per_pool_tree
    assert spec.unrecognized_spec() == {"my_own_key": 1}
    paths = [item.path for item in unsupported_spec_options(spec)]
    assert "spec.tentative_pool_trees" not in paths  # the live service runs tentative pool trees
    offline = [item.path for item in unsupported_spec_options(spec, offline=True)]
    assert "spec.tentative_pool_trees" not in offline  # the simulator and `pooltree fair-share` too
    assert "spec.scheduling_segment" not in paths  # implemented (pooltree/strategy/segments.py)
    assert "spec.tasks.main.job_time_limit" not in paths  # implemented: the job is stopped past it
    assert spec.tasks["main"].job_time_limit == 1.0  # milliseconds in, seconds kept
    assert "use_default_tentative_pool_trees" not in SPEC_UNSUPPORTED  # live service (strategy/tentative.py)


def test_the_starvation_timeout_limit_yt_still_accepts_is_accepted_and_reported() -> None:
    """``fair_share_starvation_timeout_limit`` (issue 15: it was refused) loads on a tree and a pool."""
    doc = {
        "t": {
            "config": {"fair_share_starvation_timeout_limit": 45000},
            "pools": {"p": {"fair_share_starvation_timeout_limit": 45000}},
        }
    }
    paths = [entry["path"] for entry in unsupported_options(parse_pool_trees(doc))]
    assert paths == [
        "pool_trees.t.config.fair_share_starvation_timeout_limit",
        "pool_trees.t.pools.p.fair_share_starvation_timeout_limit",
    ]


def test_both_policy_kinds_and_the_gpu_policy_are_implemented() -> None:
    """``policy_kind`` classic and gpu and ``gpu_scheduling_policy`` are implemented (issue 30): no alert; a bad
    value is refused naming the field."""
    for kind in ("classic", "gpu"):
        config = {"policy_kind": kind, "gpu_scheduling_policy": {"mode": "allocating", "modules": ["dc"]}}
        trees = parse_pool_trees({"g": {"config": config, "pools": {}}})
        assert unsupported_options(trees) == []
    with pytest.raises(ConfigError, match=r"gpu_scheduling_policy\.mode"):
        parse_pool_trees({"g": {"config": {"gpu_scheduling_policy": {"mode": "on"}}, "pools": {}}})
