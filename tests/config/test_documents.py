"""YAML/JSON/YSON documents: equivalence, parse errors naming the file, duplicates, Cypress dumps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yt.yson as yson

from pooltree.config import (
    Snapshot,
    cypress_default_tree,
    cypress_dump_to_pool_trees,
    load_document,
    load_snapshot,
    loads_document,
    parse_pool_trees,
)
from pooltree.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def canonical(snapshot: Snapshot) -> Any:
    """A comparable view of a snapshot (numpy arrays as lists)."""

    def plain(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return value.tolist()
        if isinstance(value, dict):
            return {key: plain(item) for key, item in value.items()}
        if isinstance(value, tuple | list):
            return [plain(item) for item in value]
        return value

    return {
        "default": snapshot.default_pool_tree,
        "totals": plain(snapshot.tree_total_resources),
        "nodes": plain(snapshot.tree_nodes),
        "cluster": [
            (g.address, g.count, g.resource_limits.tolist(), sorted(g.tags)) for g in snapshot.cluster.nodes
        ],
        "trees": {
            name: (
                tree.config.model_dump(),
                {p: (d.parent, d.children, d.config.model_dump()) for p, d in tree.pools.items()},
            )
            for name, tree in snapshot.pool_trees.items()
        },
        "operations": [
            (
                o.id,
                o.type,
                o.user,
                o.start_time,
                o.spec.model_dump(),
                plain(o.resource_usage),
                plain(o.resource_demand),
                o.pools,
            )
            for o in snapshot.operations
        ],
        "update": snapshot.fair_share_update,
    }


def test_project_example_is_identical_in_all_formats() -> None:
    snapshots = [load_snapshot(EXAMPLES / f"project-root.{ext}") for ext in ("yaml", "json", "yson")]
    views = [canonical(snapshot) for snapshot in snapshots]
    assert views[0] == views[1] == views[2]
    assert load_document(EXAMPLES / "project-root.yaml") == load_document(EXAMPLES / "project-root.yson")


def test_project_example_content() -> None:
    snapshot = load_snapshot(EXAMPLES / "project-root.yaml")
    tree = snapshot.pool_trees["physical"]
    assert tree.children_of("project-root") == ("project-adhoc", "project-batch", "project-backup")
    expected = {
        "project-root": (100, 1, 10, 50),
        "project-adhoc": (80, 1, 10, 50),
        "project-batch": (0, 10, 4, 50),
        "project-backup": (20, 1, 2, 50),
    }
    for name, (cpu, weight, running, total) in expected.items():
        config = tree.pools[name].config
        assert (config.strong_guarantee_resources["cpu"], config.weight) == (cpu, weight)
        assert (config.max_running_operation_count, config.max_operation_count) == (running, total)
    assert snapshot.tree_total_resources["physical"][1] == 160  # more than the project's 100 cpu
    pools = {operation.id: operation.pools["physical"] for operation in snapshot.operations}
    assert {"project-adhoc", "project-batch", "project-backup"} <= set(pools.values())


def test_yson_conversion_to_plain_python() -> None:
    value = loads_document(b'{a=%true; b=#; c=1u; d=2.5; e="s"; f=[1; <x=1>2]}', "yson")
    assert value == {
        "a": True,
        "b": None,
        "c": 1,
        "d": 2.5,
        "e": "s",
        "f": [1, {"$attributes": {"x": 1}, "$value": 2}],
    }
    assert type(value["a"]) is bool and type(value["c"]) is int and type(value["e"]) is str


@pytest.mark.parametrize(
    ("name", "content", "text"),
    [
        ("bad.yaml", "a: [1,\nb: 2\n", "invalid YAML at line"),
        ("bad.json", '{\n  "a": 1,\n  "b": \n}', "invalid JSON at line 4, column 1"),
        ("bad.yson", "{a=1;b=}", "invalid YSON"),
        ("dup.yaml", "pools:\n  a: {}\n  a: {}\n", "duplicate key 'a' at line 3"),
        ("dup.json", '{"a": 1, "a": 2}', "duplicate key 'a'"),
        ("dup.yson", "{a=1;a=2}", "Duplicate map key"),
    ],
)
def test_malformed_files_name_the_file(tmp_path: Path, name: str, content: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_document(path)
    assert info.value.path == str(path)
    assert text in info.value.reason


def test_unknown_extension_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown file extension '\.toml'"):
        load_document(tmp_path / "x.toml")
    with pytest.raises(ConfigError, match="cannot read file"):
        load_document(tmp_path / "missing.yaml")


def test_yaml_timestamps_stay_strings() -> None:
    assert loads_document("t: 2024-05-01T00:00:00Z\n", "yaml") == {"t": "2024-05-01T00:00:00Z"}


CYPRESS_JSON = {
    "$attributes": {"default_tree": "physical"},
    "$value": {
        "physical": {
            "$attributes": {"config": {"main_resource": "cpu", "nodes_filter": "default"}, "id": "1-2-3-4"},
            "$value": {
                "project-root": {
                    "$attributes": {
                        "strong_guarantee_resources": {"cpu": 100},
                        "weight": 1.0,
                        "type": "scheduler_pool",
                    },
                    "$value": {
                        "project-adhoc": {
                            "$attributes": {"strong_guarantee_resources": {"cpu": 80}},
                            "$value": {},
                        },
                        "project-batch": {"$attributes": {"weight": 10.0, "mode": "fifo"}, "$value": {}},
                    },
                },
                "research": {},
            },
        },
        "gpu": {"$attributes": {"config": {"node_tag_filter": "gpu"}}, "$value": {}},
    },
}

EXPECTED_NESTED = {
    "physical": {
        "config": {"main_resource": "cpu", "nodes_filter": "default"},
        "pools": {
            "project-root": {
                "strong_guarantee_resources": {"cpu": 100},
                "weight": 1.0,
                "pools": {
                    "project-adhoc": {"strong_guarantee_resources": {"cpu": 80}},
                    "project-batch": {"weight": 10.0, "mode": "fifo"},
                },
            },
            "research": {},
        },
    },
    "gpu": {"config": {"node_tag_filter": "gpu"}, "pools": {}},
}


def test_cypress_json_dump() -> None:
    nested = cypress_dump_to_pool_trees(CYPRESS_JSON)
    assert nested == EXPECTED_NESTED
    assert cypress_default_tree(CYPRESS_JSON) == "physical"
    trees = parse_pool_trees(nested)
    assert trees["physical"].pools["project-batch"].config.mode == "fifo"
    assert trees["physical"].config.node_tag_filter == "default"


def test_cypress_yson_dump_matches_json(tmp_path: Path) -> None:
    text = (
        b"<default_tree=physical>{"
        b'physical=<config={main_resource=cpu;nodes_filter=default};id="1-2-3-4">{'
        b'"project-root"=<strong_guarantee_resources={cpu=100};weight=1.;type=scheduler_pool>{'
        b'"project-adhoc"=<strong_guarantee_resources={cpu=80}>{};'
        b'"project-batch"=<weight=10.;mode=fifo>{}};'
        b"research={}};"
        b"gpu=<config={node_tag_filter=gpu}>{}}"
    )
    path = tmp_path / "pool_trees.yson"
    path.write_bytes(text)
    document = load_document(path)
    assert cypress_dump_to_pool_trees(document) == EXPECTED_NESTED
    assert cypress_default_tree(document) == "physical"
    json_path = tmp_path / "pool_trees.json"
    json_path.write_text(json.dumps(CYPRESS_JSON))
    assert cypress_dump_to_pool_trees(load_document(json_path)) == EXPECTED_NESTED


def test_cypress_dump_without_attributes_and_bad_nodes() -> None:
    assert cypress_dump_to_pool_trees({"t": {"a": {"b": {}}}}) == {
        "t": {"pools": {"a": {"pools": {"b": {}}}}}
    }
    assert cypress_dump_to_pool_trees(yson.YsonEntity()) == {}
    with pytest.raises(ConfigError) as info:
        cypress_dump_to_pool_trees({"t": {"a": 5}})
    assert info.value.path == "//sys/pool_trees/t/a"
