"""Pool config presets: single and list form, application order, explicit options win, errors."""

from __future__ import annotations

from typing import Any

import pytest

from pooltree.config import parse_pool_trees
from pooltree.config.support import unrecognized_options
from pooltree.errors import ConfigError

PRESETS = {
    "small": {
        "max_running_operation_count": 2,
        "max_operation_count": 10,
        "resource_limits": {"cpu": 10, "memory": "8Gi"},
    },
    "heavy": {"weight": 5, "resource_limits": {"cpu": 100}, "enable_aggressive_starvation": True},
    "fifo": {"mode": "fifo", "fifo_sort_parameters": ["start_time"]},
}


def tree_with(pool: dict[str, Any]) -> dict[str, Any]:
    return {"t": {"config": {"pool_config_presets": PRESETS}, "pools": {"p": pool}}}


def test_single_preset_is_the_base() -> None:
    pool = parse_pool_trees(tree_with({"config_preset": "small"}))["t"].pools["p"]
    assert pool.applied_presets == ("small",)
    assert pool.config.max_running_operation_count == 2
    assert pool.config.resource_limits["cpu"] == 10
    assert pool.config.explicit("max_running_operation_count")


def test_presets_earlier_in_the_list_win() -> None:
    # YTsaurus's test_multiple_presets: [presetA, presetB] takes A's tolerance and B's timeout
    pool = parse_pool_trees(tree_with({"config_presets": ["heavy", "small"]}))["t"].pools["p"]
    assert pool.applied_presets == ("heavy", "small")
    assert pool.config.resource_limits["cpu"] == 100  # heavy, listed first, wins over small
    assert pool.config.resource_limits["memory"] == 8 * 1024**3  # maps merge key by key
    assert pool.config.weight == 5
    reverse = parse_pool_trees(tree_with({"config_presets": ["small", "heavy"]}))["t"].pools["p"]
    assert reverse.config.resource_limits["cpu"] == 10


def test_explicit_options_win_over_presets() -> None:
    pool = parse_pool_trees(
        tree_with({"config_presets": ["small", "heavy"], "weight": 2, "resource_limits": {"cpu": 7}})
    )["t"].pools["p"]
    assert pool.config.weight == 2
    assert pool.config.resource_limits["cpu"] == 7
    assert pool.config.resource_limits["memory"] == 8 * 1024**3
    assert pool.config.max_operation_count == 10


def test_preset_mode_fifo_forbids_subpools() -> None:
    with pytest.raises(ConfigError, match='Pool "p" cannot have subpools since it is in FIFO mode'):
        parse_pool_trees(tree_with({"config_preset": "fifo", "pools": {"c": {}}}))


def test_unknown_preset() -> None:
    with pytest.raises(ConfigError) as info:
        parse_pool_trees(tree_with({"config_presets": ["small", "huge"]}))
    assert info.value.path == "pool_trees.t.pools.p.config_presets[1]"
    assert info.value.reason == 'Config preset "huge" is not found'
    with pytest.raises(ConfigError) as info:
        parse_pool_trees(tree_with({"config_preset": "huge"}))
    assert info.value.path == "pool_trees.t.pools.p.config_preset"


def test_both_preset_forms() -> None:
    with pytest.raises(ConfigError) as info:
        parse_pool_trees(tree_with({"config_preset": "small", "config_presets": ["heavy"]}))
    assert info.value.path == "pool_trees.t.pools.p.config_presets"
    assert "cannot be specified together" in info.value.reason


def test_preset_content_is_validated_as_pool_options() -> None:
    doc = tree_with({})
    doc["t"]["config"]["pool_config_presets"] = {"bad": {"weight": "heavy"}}
    with pytest.raises(ConfigError) as info:
        parse_pool_trees(doc)
    assert info.value.path == "pool_trees.t.config.pool_config_presets.bad.weight"
    doc["t"]["config"]["pool_config_presets"] = {"bad": {"colour": "red"}}
    # An unknown name in a preset is kept and reported, as YTsaurus does (its alert "contains unrecognized
    # options" for a preset with an unrecognized option).
    paths = [entry["path"] for entry in unrecognized_options(parse_pool_trees(doc))]
    assert paths == ["pool_trees.t.config.pool_config_presets.bad.colour"]


def test_merged_result_is_validated_at_the_pool() -> None:
    with pytest.raises(ConfigError) as info:
        parse_pool_trees(tree_with({"config_preset": "small", "max_running_operation_count": 20}))
    assert info.value.path == "pool_trees.t.pools.p.max_running_operation_count"
    assert "but 10 < 20" in info.value.reason
