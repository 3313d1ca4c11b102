"""Snapshot documents (PRODUCT.md §2): cluster totals per tree, operations, update clock, and every error path."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from pooltree.config import load_snapshot, parse_snapshot
from pooltree.errors import ConfigError

GI = 1024**3


def base() -> dict[str, Any]:
    return {
        "cluster": {
            "nodes": [
                {
                    "address": "n",
                    "count": 4,
                    "resource_limits": {"cpu": 16, "memory": "64Gi", "user_slots": 16},
                },
                {
                    "address": "g",
                    "count": 2,
                    "resource_limits": {"cpu": 8, "gpu": 4, "user_slots": 8},
                    "tags": ["gpu"],
                },
            ]
        },
        "default_pool_tree": "physical",
        "pool_trees": {
            "physical": {"config": {"node_tag_filter": "!gpu"}, "pools": {"batch": {}, "adhoc": {}}},
            "gpu": {"config": {"node_tag_filter": "gpu"}, "pools": {"training": {}}},
        },
        "operations": [
            {
                "type": "map",
                "user": "alice",
                "start_time": 10,
                "spec": {"pool": "batch"},
                "jobs": [
                    {"resources": {"cpu": 1, "memory": "2Gi", "user_slots": 1}, "running": 20, "pending": 80},
                    {"resources": {"cpu": 2, "user_slots": 1}, "running": 1},
                ],
            },
            {
                "id": "train",
                "type": "vanilla",
                "user": "bob",
                "start_time": "2024-05-01T00:00:00Z",
                "spec": {"pool_trees": ["gpu"], "pool": "training"},
                "resource_usage": {"gpu": 4, "cpu": 4, "user_slots": 1},
                "resource_demand": {"gpu": 8, "cpu": 8, "user_slots": 2},
            },
        ],
        "fair_share_update": {
            "now": 120,
            "previous_update_time": 60,
            "accumulated_resource_volume": {"training": {"gpu": 600}},
        },
    }


def expect_error(doc: Any, path: str, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_snapshot(doc)
    assert info.value.path == path, info.value
    assert text in info.value.reason


def test_parse_full_snapshot() -> None:
    snapshot = parse_snapshot(base())
    assert snapshot.default_pool_tree == "physical"
    assert snapshot.tree_nodes == {"physical": ("n",), "gpu": ("g",)}
    assert snapshot.tree_total_resources["physical"].tolist() == [64, 64, 0, 256 * GI, 0]
    assert snapshot.tree_total_resources["gpu"].tolist() == [16, 16, 8, 0, 0]
    first, second = snapshot.operations
    assert first.id == "op-1" and second.id == "train"
    assert first.resource_usage.tolist() == [21, 22, 0, 40 * GI, 0]
    assert first.resource_demand.tolist() == [101, 102, 0, 200 * GI, 0]
    assert first.pool_trees == ("physical",) and first.pools == {"physical": "batch"}
    assert second.pool_trees == ("gpu",) and second.pools == {"gpu": "training"}
    assert second.start_time == 1714521600.0
    assert [op.id for op in snapshot.operations_in_tree("gpu")] == ["train"]
    update = snapshot.fair_share_update
    assert update is not None and update.now == 120 and update.previous_update_time == 60
    assert update.accumulated_resource_volume["training"][2] == 600


def test_total_resources_and_single_tree_default() -> None:
    doc = {
        "cluster": {"total_resources": {"user_slots": 100, "cpu": 100, "memory": "1000Mi"}},
        "pool_trees": {"t": {"pools": {"a": {}}}},
        "operations": [{"spec": {"pool": "a"}, "resource_usage": {"cpu": 5}}],
    }
    snapshot = parse_snapshot(doc)
    assert snapshot.default_pool_tree == "t"
    assert snapshot.tree_total_resources["t"].tolist() == [100, 100, 0, 1000 * 1024**2, 0]
    operation = snapshot.operations[0]
    assert operation.resource_demand.tolist() == operation.resource_usage.tolist()  # demand defaults to usage
    assert operation.user == "root" and operation.type == "map"


def test_generated_ids_skip_explicit_ones() -> None:
    doc = base()
    doc["operations"] = [
        {"spec": {"pool": "batch"}},
        {"id": "op-2", "spec": {"pool": "batch"}},
        {"spec": {"pool": "adhoc"}},
    ]
    assert [op.id for op in parse_snapshot(doc).operations] == ["op-1", "op-2", "op-3"]
    doc["operations"] = [{"id": "op-1", "spec": {"pool": "batch"}}, {"spec": {"pool": "batch"}}]
    assert [op.id for op in parse_snapshot(doc).operations] == ["op-1", "op-2"]
    doc["operations"] = [{"id": "op-2", "spec": {"pool": "batch"}}, {"spec": {"pool": "batch"}}]
    assert [op.id for op in parse_snapshot(doc).operations] == ["op-2", "op-3"]
    doc["operations"] = [{"spec": {"pool": "batch"}}, {"id": "op-1", "spec": {"pool": "batch"}}]
    assert [op.id for op in parse_snapshot(doc).operations] == ["op-2", "op-1"]


def test_extra_top_level_keys_for_callers() -> None:
    doc = base()
    doc["scheduler"] = {"fair_share_update_period": "1s"}
    expect_error(doc, "scheduler", "unknown key 'scheduler'")
    assert parse_snapshot(doc, extra_keys=("scheduler",)).default_pool_tree == "physical"


def mutate(path: list[Any], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(base())
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "error_path", "text"),
    [
        (["operations", 1, "resource_usage", "cpu"], -1, "operations[1].resource_usage.cpu", "non-negative"),
        (
            ["operations", 1, "resource_demand", "gpu"],
            2,
            "operations[1].resource_demand.gpu",
            "resource_demand is less than resource_usage (2 < 4)",
        ),
        (["operations", 0, "id"], "train", "operations[1].id", 'duplicate operation id "train"'),
        (
            ["operations", 0, "spec", "pool"],
            "training",
            "operations[0].spec.pool",
            'pool "training" is a configured pool of tree "gpu", not of tree "physical"',
        ),
        (
            ["operations", 0, "spec", "scheduling_options_per_pool_tree"],
            {"cloud": {"pool": "x"}},
            "operations[0].spec.scheduling_options_per_pool_tree.cloud",
            'unknown pool tree "cloud"',
        ),
        (
            ["operations", 0, "spec", "pool_trees"],
            ["physical", "cloud"],
            "operations[0].spec.pool_trees[1]",
            "unknown pool tree",
        ),
        (
            ["default_pool_tree"],
            "cloud",
            "default_pool_tree",
            'default pool tree "cloud" is not a configured pool tree',
        ),
        (["operations", 0, "jobs", 0, "running"], -1, "operations[0].jobs[0].running", "integer ≥ 0"),
        (["operations", 0, "resource_usage"], {"cpu": 1}, "operations[0].resource_usage", "either jobs or"),
        (["operations", 0, "type"], "spark", "operations[0].type", "unknown operation type"),
        (["operations", 0, "start_time"], "yesterday", "operations[0].start_time", "cannot parse time"),
        (["operations", 0, "colour"], "red", "operations[0].colour", "unknown key 'colour'"),
        (["operations", 0, "spec", "weight"], "x", "operations[0].spec.weight", "valid number"),
        (["cluster", "total_resources"], {"cpu": 1}, "cluster", "exactly one of total_resources and nodes"),
        (["cluster", "nodes", 1, "address"], "n", "cluster.nodes[1].address", "duplicate node address"),
        (["cluster", "nodes", 0, "count"], 0, "cluster.nodes[0].count", "integer ≥ 1"),
        (
            ["pool_trees", "physical", "config", "node_tag_filter"],
            "",
            "cluster.nodes[1].tags",
            "several pool trees (physical, gpu)",
        ),
        (
            ["pool_trees", "gpu", "config", "node_tag_filter"],
            "",
            "cluster.nodes[0].tags",
            "must not share nodes",
        ),
        (
            ["fair_share_update", "previous_update_time"],
            200,
            "fair_share_update.previous_update_time",
            "after now",
        ),
        (
            ["fair_share_update", "accumulated_resource_volume"],
            {"ghost": {}},
            "fair_share_update.accumulated_resource_volume.ghost",
            "unknown pool",
        ),
        (["pool_trees"], {}, "pool_trees", "at least one pool tree"),
        (
            ["pool_trees", "physical", "pools", "batch", "weight"],
            -3,
            "pool_trees.physical.pools.batch.weight",
            "0",
        ),
    ],
)
def test_errors(path: list[Any], value: Any, error_path: str, text: str) -> None:
    expect_error(mutate(path, value), error_path, text)


def test_default_tree_required_with_several_trees() -> None:
    doc = base()
    del doc["default_pool_tree"]
    expect_error(doc, "default_pool_tree", "must be specified")


def test_load_snapshot_reports_file_errors(tmp_path: Path) -> None:
    path = tmp_path / "snap.yaml"
    path.write_text(
        "cluster: {total_resources: {cpu: 1}}\npool_trees: {t: {}}\noperations: [{spec: {pool: 1}}]\n"
    )
    with pytest.raises(ConfigError) as info:
        load_snapshot(path)
    assert info.value.path == "operations[0].spec.pool"
