"""Pool trees document: structure, presets, and the master-side validation rules with their texts and paths."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from treekit import seed_document

from pooltree.config import ROOT_POOL, PoolTreeDefinition, parse_pool_trees, resolve_default_tree
from pooltree.config.support import unrecognized_options
from pooltree.errors import ConfigError


def project_tree() -> dict[str, Any]:
    """The seeds' project example beside a research pool."""
    return seed_document(config={"main_resource": "cpu"}, extra_pools={"research": None})


def parse_one(doc: dict[str, Any]) -> PoolTreeDefinition:
    return parse_pool_trees(doc)["physical"]


def expect_error(doc: Any, path: str, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_pool_trees(doc)
    assert info.value.path == path
    assert text in info.value.reason
    return info.value


def test_project_example_structure() -> None:
    tree = parse_one(project_tree())
    assert list(tree.pools) == [
        "project-root",
        "project-adhoc",
        "project-batch",
        "project-backup",
        "research",
    ]
    assert tree.top_level_pools == ("project-root", "research")
    root = tree.pools["project-root"]
    assert root.parent == ROOT_POOL
    assert root.children == ("project-adhoc", "project-batch", "project-backup")
    assert tree.pools["project-batch"].full_path == "/project-root/project-batch"
    assert tree.pools["project-batch"].config.weight == 10
    assert tree.pools["project-adhoc"].config.strong_guarantee_resources["cpu"] == 80
    assert list(tree.ancestors("project-backup")) == ["project-root"]
    assert tree.children_of(ROOT_POOL) == ("project-root", "research")


def test_operation_count_defaults_come_from_the_tree() -> None:
    # Without tree options a pool gets the seeds' pool table defaults: 8 running, 50 in total.
    plain = parse_one(project_tree())
    assert (plain.max_running_operation_count("research"), plain.max_operation_count("research")) == (8, 50)
    doc = project_tree()
    doc["physical"]["config"]["max_running_operation_count_per_pool"] = 7
    tree = parse_one(doc)
    assert tree.max_running_operation_count("research") == 7
    assert tree.max_operation_count("research") == 50
    assert tree.max_running_operation_count("project-batch") == 4
    assert tree.max_running_operation_count(ROOT_POOL) == 2000
    assert tree.max_operation_count(ROOT_POOL) == 50000


def test_children_guarantee_sum_exceeds_parent() -> None:
    doc = project_tree()
    doc["physical"]["pools"]["project-root"]["pools"]["project-adhoc"]["strong_guarantee_resources"][
        "cpu"
    ] = 90
    expect_error(
        doc,
        "pool_trees.physical.pools.project-root.strong_guarantee_resources.cpu",
        'Strong guarantee of resource "cpu" for pool "project-root" is less than the sum of children guarantees: '
        "100 < 110",
    )


def test_guarantee_without_main_resource() -> None:
    doc = project_tree()
    doc["physical"]["pools"]["research"] = {"strong_guarantee_resources": {"memory": "10Gi"}}
    expect_error(
        doc,
        "pool_trees.physical.pools.research.strong_guarantee_resources",
        "Main resource guarantee must be specified in order to set guarantees for any other resource",
    )


def test_child_guarantees_resource_parent_does_not() -> None:
    doc = project_tree()
    adhoc = doc["physical"]["pools"]["project-root"]["pools"]["project-adhoc"]
    adhoc["strong_guarantee_resources"]["memory"] = "1Gi"
    expect_error(
        doc,
        "pool_trees.physical.pools.project-root.pools.project-adhoc.strong_guarantee_resources.memory",
        'Strong guarantee of resource "memory" is explicitly configured at child pool "project-adhoc" '
        'but is not configured at parent pool "project-root"',
    )


def test_fifo_pool_cannot_have_subpools() -> None:
    doc = project_tree()
    doc["physical"]["pools"]["research"] = {"mode": "fifo", "pools": {"r1": {}}}
    expect_error(
        doc,
        "pool_trees.physical.pools.research.pools",
        'Pool "research" cannot have subpools since it is in FIFO mode',
    )


def test_duplicate_pool_names_at_different_depths() -> None:
    doc = project_tree()
    doc["physical"]["pools"]["research"] = {"pools": {"project-batch": {}}}
    error = expect_error(
        doc, "pool_trees.physical.pools.research.pools.project-batch", 'Duplicate pool "project-batch"'
    )
    assert "pool_trees.physical.pools.project-root.pools.project-batch" in error.reason


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("a$b", "must not contain '$'"),
        ("<Root>", "reserved"),
        ("", "non-empty"),
        ("a/b", "must not contain '/'"),
    ],
)
def test_invalid_pool_names(name: str, text: str) -> None:
    doc = project_tree()
    doc["physical"]["pools"][name] = {}
    expect_error(doc, f"pool_trees.physical.pools.{name}" if name else "pool_trees.physical.pools", text)


def test_max_running_above_max_operation_count() -> None:
    doc = project_tree()
    doc["physical"]["pools"]["research"] = {"max_running_operation_count": 60, "max_operation_count": 40}
    expect_error(
        doc,
        "pool_trees.physical.pools.research.max_running_operation_count",
        '"max_operation_count" must be greater than or equal to "max_running_operation_count", but 40 < 60',
    )


def test_unknown_pool_option_is_kept_and_reported_unknown_tree_key_is_an_error() -> None:
    doc = project_tree()
    doc["physical"]["pools"]["project-root"]["pools"]["project-batch"]["wieght"] = 3
    trees = parse_pool_trees(doc)
    [entry] = unrecognized_options(trees)
    assert entry["path"] == "pool_trees.physical.pools.project-batch.wieght"
    assert entry["closest"] == "weight"
    assert trees["physical"].pools["project-batch"].config.weight == 10.0  # kept, no effect (the seed weight)
    # The document's own structure is pooltree's, not a YTsaurus struct: an unknown key there is an error.
    doc = project_tree()
    doc["physical"]["pool"] = {}
    expect_error(doc, "pool_trees.physical.pool", "unknown pool tree key 'pool'")


def test_integral_pool_cannot_have_integral_children() -> None:
    doc = project_tree()
    doc["physical"]["pools"]["research"] = {
        "strong_guarantee_resources": {"cpu": 10},
        "integral_guarantees": {"guarantee_type": "burst", "burst_guarantee_resources": {"cpu": 20}},
        "pools": {"r1": {"integral_guarantees": {"guarantee_type": "relaxed", "resource_flow": {"cpu": 5}}}},
    }
    expect_error(
        doc,
        "pool_trees.physical.pools.research.pools.r1.integral_guarantees",
        'Integral pool "research" cannot have children with integral resources',
    )


def test_burst_children_need_parent_burst_resources_and_fit_the_sum() -> None:
    doc = project_tree()
    doc["physical"]["pools"]["research"] = {
        "integral_guarantees": {"burst_guarantee_resources": {"cpu": 30}, "resource_flow": {"cpu": 10}},
        "pools": {
            "b1": {
                "integral_guarantees": {"guarantee_type": "burst", "burst_guarantee_resources": {"cpu": 20}}
            },
            "b2": {
                "integral_guarantees": {
                    "guarantee_type": "burst",
                    "burst_guarantee_resources": {"cpu": 10},
                    "resource_flow": {"cpu": 10},
                }
            },
        },
    }
    tree = parse_one(doc)
    assert tree.pools["b2"].config.integral_guarantees.resource_flow["cpu"] == 10
    doc["physical"]["pools"]["research"]["pools"]["b1"]["integral_guarantees"]["burst_guarantee_resources"][
        "cpu"
    ] = 25
    expect_error(
        doc,
        "pool_trees.physical.pools.research.integral_guarantees.burst_guarantee_resources.cpu",
        'Burst guarantee of resource "cpu" for pool "research" is less than the sum of children guarantees: 30 < 35',
    )


def test_default_tree_resolution() -> None:
    trees = parse_pool_trees({"a": {}, "b": {"config": {"node_tag_filter": "b"}}})
    assert resolve_default_tree(trees, "b") == "b"
    with pytest.raises(ConfigError, match="must be specified when there are several"):
        resolve_default_tree(trees, None)
    with pytest.raises(ConfigError, match='default pool tree "c" is not a configured pool tree'):
        resolve_default_tree(trees, "c")
    assert resolve_default_tree({"only": trees["a"]}, None) == "only"


def test_non_map_inputs() -> None:
    expect_error([], "pool_trees", "expected a map")
    expect_error({"t": 5}, "pool_trees.t", "a pool tree must be a map")
    expect_error({"t": {"pools": {"a": 5}}}, "pool_trees.t.pools.a", "pool options must be a map")
    expect_error({"t": {"pools": {"a": {"pools": [1]}}}}, "pool_trees.t.pools.a.pools", "pools must be a map")


def test_does_not_mutate_input() -> None:
    doc = project_tree()
    before = copy.deepcopy(doc)
    parse_pool_trees(doc)
    assert doc == before


def test_allow_children_guarantees_false_refuses_a_child_guarantee() -> None:
    """YTsaurus's master: a child may not have a guarantee its parent has when the parent does not allow it."""
    trees = {
        "t": {
            "pools": {
                "parent": {
                    "strong_guarantee_resources": {"cpu": 100},
                    "allow_children_guarantees": False,
                    "pools": {"child": {"strong_guarantee_resources": {"cpu": 10}}},
                }
            }
        }
    }
    with pytest.raises(ConfigError, match="does not allow children guarantees"):
        parse_pool_trees(trees)
    trees["t"]["pools"]["parent"]["allow_children_guarantees"] = True
    parsed = parse_pool_trees(trees)
    assert parsed["t"].pools["child"].config.strong_guarantee_resources.to_dict()["cpu"] == 10


def test_a_fifo_pool_cannot_create_ephemeral_subpools() -> None:
    """YTsaurus's ``TPoolConfig::Validate``: ``mode=fifo`` and ``create_ephemeral_subpools`` refuse each other."""
    trees = {"t": {"pools": {"hub": {"mode": "fifo", "create_ephemeral_subpools": True}}}}
    with pytest.raises(ConfigError, match="Fifo pool cannot create ephemeral subpools"):
        parse_pool_trees(trees)


def test_a_tree_non_preemptible_threshold_cannot_be_null() -> None:
    """YTsaurus refuses a null ``non_preemptible_resource_usage_threshold`` (its test_config_postprocessor)."""
    with pytest.raises(ConfigError, match="got null"):
        parse_pool_trees({"t": {"config": {"non_preemptible_resource_usage_threshold": None}}})
