"""Tree and pool option models: YTsaurus defaults, aliases, units, explicit-option tracking, single-model checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pooltree.config import PoolConfig, PoolTreeConfig, Resources
from pooltree.config.operation import OperationSpec
from pooltree.errors import ConfigError


def error_of(model: type[PoolConfig] | type[PoolTreeConfig], data: object, path: str = "cfg") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        model.parse(data, path)
    return info.value


def test_tree_defaults_follow_ytsaurus() -> None:
    config = PoolTreeConfig.parse({})
    assert config.node_tag_filter == ""
    assert config.tag_filter.is_empty
    assert config.main_resource == "cpu"
    assert (config.max_operation_count, config.max_running_operation_count) == (50000, 2000)
    assert (config.max_operation_count_per_pool, config.max_running_operation_count_per_pool) == (50, 8)
    assert config.default_parent_pool == "<Root>"
    assert config.forbid_immediate_operations_in_root is True
    assert config.max_ephemeral_pools_per_user == 1
    assert config.ephemeral_pool_name_regex == "[-_a-z0-9:A-Z]+"
    assert config.infer_weight_from_guarantees_share_multiplier is None
    assert config.integral_guarantees.smooth_period == 60.0
    assert config.integral_guarantees.pool_capacity_saturation_period == 86400.0
    assert config.integral_guarantees.relaxed_share_multiplier_limit == 3.0
    assert config.preemptive_scheduling_backoff == 5.0
    assert config.fair_share_starvation_timeout == 30.0
    assert config.fair_share_starvation_tolerance == 0.8
    assert config.fair_share_aggressive_starvation_timeout == 120.0
    assert config.enable_aggressive_starvation is False
    assert config.preemption_satisfaction_threshold == 1.0
    assert config.aggressive_preemption_satisfaction_threshold == 0.2
    assert (
        config.allocation_preemption_timeout == 15.0
    )  # the CHYT seed: the standard interruption timeout is 15 s
    assert config.allocation_graceful_preemption_timeout == 60.0
    assert config.enable_pool_starvation and config.enable_conditional_preemption
    assert config.preemption_check_starvation and config.preemption_check_satisfaction
    assert config.allocation_count_preemption_timeout_coefficient == 1.0
    assert config.fifo_pool_scheduling_order == "satisfaction"
    assert config.use_pool_satisfaction_for_scheduling is False
    assert config.scheduling_preemption_priority_scope == "operation_and_ancestors"
    assert config.allow_aggressive_preemption_for_gang_operations is True
    assert config.enable_step_function_for_gang_operations is False
    assert config.node_reconnection_timeout == 300.0
    assert config.schedule_allocations_timeout == 40.0
    assert config.enable_guarantee_priority_scheduling is False
    assert config.model_fields_set == set()


@pytest.mark.parametrize(
    ("alias", "value", "field", "expected"),
    [
        ("nodes_filter", "ssd", "node_tag_filter", "ssd"),
        ("max_ephemeral_pool_per_user", 3, "max_ephemeral_pools_per_user", 3),
        (
            "infer_weight_from_strong_guarantee_share_multiplier",
            2,
            "infer_weight_from_guarantees_share_multiplier",
            2,
        ),
        (
            "infer_weight_from_min_share_ratio_multiplier",
            5,
            "infer_weight_from_guarantees_share_multiplier",
            5,
        ),
        ("fair_share_preemption_timeout", 45000, "fair_share_starvation_timeout", 45.0),
        ("max_unpreemptible_running_job_count", 7, "max_unpreemptible_running_allocation_count", 7),
        ("job_interrupt_timeout", "20s", "allocation_preemption_timeout", 20.0),
        ("job_graceful_interrupt_timeout", "5m", "allocation_graceful_preemption_timeout", 300.0),
    ],
)
def test_tree_aliases(alias: str, value: object, field: str, expected: object) -> None:
    config = PoolTreeConfig.parse({alias: value})
    assert getattr(config, field) == expected
    assert config.explicit(field)
    assert alias not in config.model_fields_set


def test_alias_and_name_together_is_an_error() -> None:
    error = error_of(PoolTreeConfig, {"node_tag_filter": "a", "nodes_filter": "b"})
    assert error.path == "cfg.nodes_filter"
    assert "given twice" in error.reason


def test_pool_aliases() -> None:
    pool = PoolConfig.parse({"min_share_resources": {"cpu": 5}, "fair_share_preemption_timeout": "1m"})
    assert pool.strong_guarantee_resources["cpu"] == 5
    assert pool.fair_share_starvation_timeout == 60.0
    assert pool.model_fields_set == {"strong_guarantee_resources", "fair_share_starvation_timeout"}


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(30000, 30.0), ("30s", 30.0), ("250ms", 0.25), ("5m", 300.0), ("1h", 3600.0), ("1d", 86400.0)],
)
def test_durations(value: object, seconds: float) -> None:
    assert (
        PoolTreeConfig.parse({"preemptive_scheduling_backoff": value}).preemptive_scheduling_backoff
        == seconds
    )


def test_bad_duration_and_size_name_the_field() -> None:
    error = error_of(PoolTreeConfig, {"integral_guarantees": {"smooth_period": "soon"}})
    assert error.path == "cfg.integral_guarantees.smooth_period"
    assert "cannot parse duration" in error.reason
    error = error_of(PoolConfig, {"resource_limits": {"memory": "lots"}})
    assert error.path == "cfg.resource_limits.memory"
    assert "cannot parse size" in error.reason


def test_resource_maps_keep_specified_keys_and_fill() -> None:
    pool = PoolConfig.parse(
        {
            "strong_guarantee_resources": {"cpu": 10, "user_memory": "1Gi"},
            "resource_limits": {"user_slots": 5},
        }
    )
    guarantee = pool.strong_guarantee_resources
    assert guarantee.specified == frozenset({"cpu", "memory"})
    assert guarantee.vector.tolist() == [0.0, 10.0, 0.0, 1024.0**3, 0.0]
    assert not guarantee.vector.flags.writeable
    limits = pool.resource_limits.vector
    assert limits[0] == 5 and all(math.isinf(x) for x in limits[1:])
    assert PoolConfig.parse({}).resource_limits == Resources.unlimited()
    assert pool.to_document()["strong_guarantee_resources"] == {"cpu": 10.0, "memory": 1024**3}


def test_resource_errors() -> None:
    error = error_of(PoolConfig, {"strong_guarantee_resources": {"cpu": -1}})
    assert error.path == "cfg.strong_guarantee_resources.cpu"
    error = error_of(PoolConfig, {"strong_guarantee_resources": {"disk": 1}})
    assert error.path == "cfg.strong_guarantee_resources.disk"
    assert "unknown resource" in error.reason


def test_pool_defaults() -> None:
    pool = PoolConfig.parse(None)
    assert pool.weight is None
    assert pool.mode == "fair_share"
    assert pool.max_running_operation_count is None and pool.max_operation_count is None
    assert pool.fifo_sort_parameters == ("weight", "start_time")
    assert pool.forbid_immediate_operations is False
    assert pool.create_ephemeral_subpools is False
    assert pool.ephemeral_subpool_config is None
    assert pool.integral_guarantees.guarantee_type == "none"
    assert pool.integral_guarantees.can_accept_free_volume is True
    assert pool.effective_max_share_ratio == 1.0
    assert pool.enable_lightweight_operations is False
    assert not pool.has_strong_guarantee


def test_pool_nested_options() -> None:
    pool = PoolConfig.parse(
        {
            "create_ephemeral_subpools": True,
            "ephemeral_subpool_config": {
                "mode": "fifo",
                "max_running_operation_count": 2,
                "resource_limits": {"cpu": 4},
            },
            "offloading_settings": {"cloud": {"pool": "offload"}},
            "fifo_sort_parameters": ["pending_job_count", "start_time"],
            "abc": {"id": 1, "slug": "proj"},
            "integral_guarantees": {"guarantee_type": "relaxed", "resource_flow": {"cpu": 5}},
        }
    )
    assert pool.ephemeral_subpool_config is not None
    assert pool.ephemeral_subpool_config.mode == "fifo"
    assert pool.ephemeral_subpool_config.resource_limits["cpu"] == 4
    assert pool.offloading_settings["cloud"].pool == "offload"
    assert pool.integral_guarantees.is_integral


@pytest.mark.parametrize(
    ("data", "path", "text"),
    [
        ({"weight": -1}, "cfg.weight", "greater than or equal to 0"),
        ({"max_share_ratio": 1.5}, "cfg.max_share_ratio", "less than or equal to 1"),
        ({"mode": "lifo"}, "cfg.mode", "'fair_share' or 'fifo'"),
        ({"fifo_sort_parameters": []}, "cfg.fifo_sort_parameters", "at least 1"),
        ({"fifo_sort_parameters": ["size"]}, "cfg.fifo_sort_parameters[0]", "start_time"),
        (
            {"fair_share_starvation_tolerance": 2},
            "cfg.fair_share_starvation_tolerance",
            "less than or equal to 1",
        ),
        (
            {"max_running_operation_count": 10, "max_operation_count": 5},
            "cfg.max_running_operation_count",
            '"max_operation_count" must be greater than or equal to "max_running_operation_count", but 5 < 10',
        ),
        (
            {"ephemeral_subpool_config": {"max_running_operation_count": 3, "max_operation_count": 1}},
            "cfg.ephemeral_subpool_config.max_running_operation_count",
            "but 1 < 3",
        ),
        (
            {"integral_guarantees": {"guarantee_type": "relaxed", "burst_guarantee_resources": {"cpu": 1}}},
            "cfg.integral_guarantees.burst_guarantee_resources",
            "not allowed",
        ),
        (
            {"integral_guarantees": {"relaxed_share_multiplier_limit": 11}},
            "cfg.integral_guarantees.relaxed_share_multiplier_limit",
            "10",
        ),
        (
            {"config_preset": "a", "config_presets": ["b"]},
            "cfg.config_presets",
            "cannot be specified together",
        ),
        ({"scheduling_tag_filter": "a & (b"}, "cfg.scheduling_tag_filter", "expected ')' at position 6"),
        ({"offloading_settings": {"t": {}}}, "cfg.offloading_settings.t.pool", "required"),
        ("weight", "cfg", "expected a map of options"),
    ],
)
def test_pool_validation(data: object, path: str, text: str) -> None:
    error = error_of(PoolConfig, data)
    assert error.path == path
    assert text in error.reason


@pytest.mark.parametrize(
    ("data", "path", "text"),
    [
        (
            {"aggressive_preemption_satisfaction_threshold": 0.9, "preemption_satisfaction_threshold": 0.5},
            "cfg.aggressive_preemption_satisfaction_threshold",
            "must not exceed preemption_satisfaction_threshold, but 0.9 > 0.5",
        ),
        ({"preemption_satisfaction_threshold": 0}, "cfg.preemption_satisfaction_threshold", "greater than 0"),
        (
            {"fair_share_starvation_timeout": "3m"},
            "cfg.fair_share_aggressive_starvation_timeout",
            "must be greater than or equal to fair_share_starvation_timeout",
        ),
        (
            {"fair_share_starvation_tolerance": -0.1},
            "cfg.fair_share_starvation_tolerance",
            "greater than or equal to 0",
        ),
        (
            {"allocation_graceful_preemption_timeout": "11m"},
            "cfg.allocation_graceful_preemption_timeout",
            "10 minutes",
        ),
        (
            {"allocation_count_preemption_timeout_coefficient": 0.5},
            "cfg.allocation_count_preemption_timeout_coefficient",
            "1",
        ),
        (
            {"infer_weight_from_guarantees_share_multiplier": 0.5},
            "cfg.infer_weight_from_guarantees_share_multiplier",
            "1",
        ),
        ({"main_resource": "disk"}, "cfg.main_resource", "'cpu'"),
        ({"ephemeral_pool_name_regex": "[a-"}, "cfg.ephemeral_pool_name_regex", "invalid regular expression"),
        (
            {"fifo_pool_scheduling_order": "random"},
            "cfg.fifo_pool_scheduling_order",
            "'satisfaction' or 'fifo'",
        ),
        ({"node_tag_filter": "a |"}, "cfg.node_tag_filter", "position 3"),
        ({"max_operation_count": -1}, "cfg.max_operation_count", "greater than or equal to 0"),
        (
            {"pool_config_presets": {"p": {"mode": "x"}}},
            "cfg.pool_config_presets.p.mode",
            "'fair_share' or 'fifo'",
        ),
        (
            {"pool_config_presets": {"p": {"config_preset": "q"}}},
            "cfg.pool_config_presets.p.config_preset",
            "other presets",
        ),
    ],
)
def test_tree_validation(data: object, path: str, text: str) -> None:
    error = error_of(PoolTreeConfig, data)
    assert error.path == path
    assert text in error.reason


def test_main_resource_accepts_user_memory() -> None:
    assert PoolTreeConfig.parse({"main_resource": "user_memory"}).main_resource == "memory"


def test_non_preemptible_threshold_vector() -> None:
    assert np.array_equal(
        PoolTreeConfig.parse({}).effective_non_preemptible_resource_usage_threshold(), np.zeros(5)
    )
    vector = PoolTreeConfig.parse(
        {"non_preemptible_resource_usage_threshold": {"cpu": 2}, "max_unpreemptible_running_job_count": 3}
    ).effective_non_preemptible_resource_usage_threshold()
    assert vector[0] == 3 and vector[1] == 2 and math.isinf(vector[3])


def test_models_are_immutable() -> None:
    config = PoolTreeConfig.parse({})
    with pytest.raises(Exception, match="frozen"):
        config.main_resource = "gpu"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("task", "field", "reason"),
    [
        ({"tmpfs_path": "/abs"}, "tmpfs_path", "inside the job's sandbox"),
        ({"tmpfs_path": "a/../../b"}, "tmpfs_path", "inside the job's sandbox"),
        (
            {"tmpfs_volumes": [{"path": "a", "size": 1}, {"path": "a/b", "size": 1}]},
            "tmpfs_volumes",
            "lies in",
        ),
        ({"tmpfs_path": "a", "tmpfs_volumes": [{"path": "b", "size": 1}]}, "tmpfs_volumes", "together"),
    ],
)
def test_tmpfs_paths_stay_in_the_sandbox_and_apart(task: dict, field: str, reason: str) -> None:
    """YTsaurus's TUserJobSpec rules: relative paths without traversal, no volume inside another, and either
    tmpfs_path/tmpfs_size or tmpfs_volumes."""
    with pytest.raises(ConfigError) as raised:
        OperationSpec.parse({"tasks": {"main": {"command": "true", "job_count": 1, **task}}})
    assert field in raised.value.path and reason in raised.value.reason
