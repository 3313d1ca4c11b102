"""Operation spec: defaults, unrecognized keys, per-tree options, memory digest options, errors with paths."""

from __future__ import annotations

import math

import pytest

from pooltree.config import OperationSpec
from pooltree.errors import ConfigError


def test_defaults() -> None:
    spec = OperationSpec.parse({})
    assert spec.pool is None and spec.pool_trees is None and spec.weight is None
    assert spec.preemption_mode == "normal"
    assert spec.max_failed_job_count == 10
    assert spec.user_job_memory_digest_default_value == 0.5
    assert spec.user_job_memory_digest_lower_bound == 0.05
    assert spec.memory_reserve_factor is None
    digest = spec.job_proxy_memory_digest
    assert (digest.lower_bound, digest.upper_bound, digest.default_value) == (0.5, 2.0, 1.0)
    assert spec.is_gang is False and spec.apply_specified_resource_limits_to_demand is False
    assert all(math.isinf(x) for x in spec.resource_limits.vector)
    assert spec.unrecognized_spec() == {}


def test_unknown_keys_are_kept_not_errors() -> None:
    spec = OperationSpec.parse(
        {
            "pool": "a",
            "my_option": {"x": 1},
            "input_table_paths": ["//tmp/in"],
            "tasks": {"main": {"command": "sleep 1", "job_count": 1, "fancy": True, "file_paths": []}},
            "scheduling_options_per_pool_tree": {"gpu": {"pool": "g", "other": 2}},
        }
    )
    assert spec.unrecognized_spec() == {
        "my_option": {"x": 1},
        "tasks": {"main": {"fancy": True}},
        "scheduling_options_per_pool_tree": {"gpu": {"other": 2}},
    }


def test_per_tree_options() -> None:
    spec = OperationSpec.parse(
        {
            "pool": "batch",
            "weight": 2,
            "resource_limits": {"user_slots": 200},
            "max_share_ratio": 0.5,
            "scheduling_options_per_pool_tree": {
                "gpu": {"pool": "g", "weight": 3, "resource_limits": {"gpu": 8}}
            },
        }
    )
    assert spec.pool_for_tree("gpu", "alice") == "g"
    assert spec.pool_for_tree("physical", "alice") == "batch"
    assert OperationSpec.parse({}).pool_for_tree("physical", "alice") == "alice"
    assert spec.weight_for_tree("gpu") == 3 and spec.weight_for_tree("physical") == 2
    assert spec.resource_limits_for_tree("gpu")["gpu"] == 8
    assert spec.resource_limits_for_tree("physical")["user_slots"] == 200
    assert spec.max_share_ratio_for_tree("gpu") == 0.5
    assert spec.pool_trees_or("physical") == ("physical",)


def test_memory_digest_parameters() -> None:
    spec = OperationSpec.parse(
        {
            "user_job_memory_digest_lower_bound": 0.1,
            "tasks": {
                "plain": {"command": "x", "job_count": 1},
                "own": {"command": "x", "job_count": 1, "user_job_memory_digest_default_value": 0.3},
                "tmpfs": {
                    "command": "x",
                    "job_count": 1,
                    "memory_limit": "1Gi",
                    "tmpfs_path": "tmpfs",
                    "tmpfs_size": "768Mi",
                },
            },
        }
    )
    assert spec.tasks["plain"].memory_limit == 512 * 1024**2
    assert spec.tasks["plain"].memory_digest_parameters(spec) == (0.1, 0.5)
    assert spec.tasks["own"].memory_digest_parameters(spec) == (0.1, 0.3)
    assert spec.tasks["tmpfs"].memory_digest_parameters(spec) == (0.75, 0.75)
    factor = OperationSpec.parse({"memory_reserve_factor": 0.8, "mapper": {"command": "cat"}})
    assert factor.user_jobs()["mapper"].memory_digest_parameters(factor) == (0.8, 0.8)


@pytest.mark.parametrize(
    ("data", "path", "text"),
    [
        ({"weight": "heavy"}, "spec.weight", "valid number"),
        ({"preemption_mode": "soft"}, "spec.preemption_mode", "'normal' or 'graceful'"),
        ({"pool_trees": []}, "spec.pool_trees", "at least 1"),
        ({"pool_trees": ["a", "a"]}, "spec.pool_trees", "more than once"),
        ({"resource_limits": {"cpu": -2}}, "spec.resource_limits.cpu", "non-negative"),
        ({"max_share_ratio": 2}, "spec.max_share_ratio", "less than or equal to 1"),
        ({"interruption_signal": "SIGNOPE"}, "spec.interruption_signal", "unknown signal"),
        ({"scheduling_tag_filter": "&"}, "spec.scheduling_tag_filter", "position 0"),
        (
            {"max_unpreemptible_job_count": -1},
            "spec.max_unpreemptible_allocation_count",
            "greater than or equal to 0",
        ),
        (
            {"user_job_memory_digest_lower_bound": 0},
            "spec.user_job_memory_digest_lower_bound",
            "greater than 0",
        ),
        ({"tasks": {"t": {"command": "x"}}}, "spec.tasks.t.job_count", "required"),
        ({"tasks": {"t": {"job_count": 1}}}, "spec.tasks.t.command", "required"),
        (
            {"tasks": {"t": {"command": "x", "job_count": 0}}},
            "spec.tasks.t.job_count",
            "greater than or equal to 1",
        ),
        (
            {
                "tasks": {
                    "t": {
                        "command": "x",
                        "job_count": 1,
                        "memory_limit": "1Gi",
                        "tmpfs_size": "2Gi",
                        "tmpfs_path": "t",
                    }
                }
            },
            "spec.tasks.t.tmpfs_size",
            "must not exceed memory_limit",
        ),
        (
            {"tasks": {"t": {"command": "x", "job_count": 1, "tmpfs_size": 1}}},
            "spec.tasks.t.tmpfs_path",
            "requires",
        ),
        (
            {"scheduling_options_per_pool_tree": {"t": {"weight": -1}}},
            "spec.scheduling_options_per_pool_tree.t.weight",
            "0",
        ),
        (
            {"job_proxy_memory_digest": {"lower_bound": 1.0, "upper_bound": 0.5}},
            "spec.job_proxy_memory_digest.upper_bound",
            "less than lower_bound",
        ),
        ([], "spec", "expected a map"),
    ],
)
def test_errors_name_the_field(data: object, path: str, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        OperationSpec.parse(data, "spec")
    assert info.value.path == path
    assert text in info.value.reason
