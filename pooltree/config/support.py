"""Which YTsaurus options pooltree implements, which it accepts without implementing, and the alert about them.

YTsaurus's pool tree config (``TStrategyTreeConfig``), pool config (``TPoolConfig`` with its schedulable,
preemption and integral-guarantee parts) and strategy operation spec (``TStrategyOperationSpec``) accept more
options than pooltree models. A dump of a production cluster carries them, so refusing them would refuse the
dump. Every YTsaurus option listed here is accepted; an option that pooltree does not implement, when the input
sets it, is reported by :func:`unsupported_options` (the "unsupported options" alert: the live orchid, the
``pooltree fair-share`` stderr and the simulator summary show it). A name that is neither a pooltree nor a
YTsaurus option is kept and ignored, as YTsaurus does, and reported by :func:`unrecognized_options` (the
"unrecognized options" alert, in the same three places) with the closest known option (:func:`closest_option`).

The lists were taken from YTsaurus's public scheduler code (``yt/yt/server/scheduler/strategy/config.h``,
``yt/yt/ytlib/scheduler/config.cpp``); old names YTsaurus still accepts are aliases in the models.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

PROFILING = "profiling and logging of YTsaurus's scheduler; pooltree has its own metrics"
PERFORMANCE = "a performance knob of YTsaurus's scheduler; pooltree's results do not depend on it"
OLD_OPTION = "an old YTsaurus option with no effect today"
IDLE_CPU = (
    "idle-CPU slots are a node job-environment feature (Porto/CRI idle_cpu_fraction); like YTsaurus's simple "
    "(process) job environment, pooltree's nodes have no idle CPU, so the flag cannot change where a job runs"
)

# Tree options: YTsaurus name -> why pooltree does not implement it.
TREE_UNSUPPORTED: dict[str, str] = {
    "heartbeat_tree_scheduling_info_log_period": PROFILING,
    "update_preemptible_list_duration_logging_threshold": PROFILING,
    "enable_operations_profiling": PROFILING,
    "custom_profiling_tag_filter": PROFILING,
    "enable_by_user_profiling": PROFILING,
    "enable_resource_tree_structure_lock_profiling": PROFILING,
    "enable_resource_tree_usage_lock_profiling": PROFILING,
    "enable_pools_vector_profiling": PROFILING,
    "enable_operations_vector_profiling": PROFILING,
    "sparsify_fair_share_profiling": PROFILING,
    "profiled_pool_resources": PROFILING,
    "profiled_operation_resources": PROFILING,
    "metering_tags": PROFILING,
    "max_event_log_pool_batch_size": PROFILING,
    "max_event_log_operation_batch_size": PROFILING,
    "enable_scheduled_and_preempted_resources_profiling": PROFILING,
    "per_pool_satisfaction_digest": PROFILING,
    "per_pool_satisfaction_profiling_quantiles": PROFILING,
    "enable_detailed_logs_for_starving_operations": PROFILING,
    "enable_detailed_logs_for_single_allocation_vanilla_operations": PROFILING,
    "use_resource_usage_with_precommit": PERFORMANCE,
    "allowed_resource_usage_staleness": PERFORMANCE,
    "cached_allocation_preemption_statuses_update_period": PERFORMANCE,
    "enable_resource_usage_snapshot": PERFORMANCE,
    "accumulated_resource_usage_update_period": PERFORMANCE,
    "accumulated_resource_distribution_update_period": PERFORMANCE,
    "running_allocation_statistics_update_period": PERFORMANCE,
    "check_operation_for_liveness_in_preschedule": PERFORMANCE,
    "batch_operation_scheduling": PERFORMANCE,
    "fail_remote_copy_on_missing_resource_limits": "remote copy operations are not modelled",
    "required_resource_limits_for_remote_copy": "remote copy operations are not modelled",
    "testing_options": "YTsaurus testing options",
    "enable_preliminary_resource_limits_check": "YTsaurus testing options",
    "enable_resource_tree_random_sleeps": "YTsaurus testing options",
    "guaranteed_job_resources": (
        "declared and registered (unset by default) by YTsaurus's tree config, but no code reading it is public "
        "(not the strategy, pool tree or fair-share update at the commit that registers it, nor anything the code, "
        "issue and documentation searches find): its rule cannot be restated"
    ),
    "fair_share_preemption_timeout_limit": "an old YTsaurus option with no effect today",
    "fair_share_starvation_timeout_limit": "an old YTsaurus option with no effect today",
    "fair_share_starvation_tolerance_limit": "an old YTsaurus option with no effect today",
    "min_share_preemption_timeout": "an old YTsaurus option with no effect today",
    "min_share_preemption_timeout_limit": "an old YTsaurus option with no effect today",
    # Modelled options without an effect yet (fields of PoolTreeConfig, reported when set).
    "min_child_heap_size": PERFORMANCE,
}

# YTsaurus options kept raw in the models' extras (nested structs with their own validation) that pooltree
# implements: option -> where.
TREE_IMPLEMENTED_EXTRA: dict[str, str] = {
    "scheduling_segments": "pooltree/config/segments.py, pooltree/strategy/segments.py",
    "policy_kind": "pooltree/config/gpu_policy.py, pooltree/strategy/gpu_policy.py",
    "gpu_scheduling_policy": "pooltree/config/gpu_policy.py, pooltree/strategy/gpu_policy.py",
    "enable_limiting_ancestor_check": "pooltree/strategy/operation_checks.py",
    "min_job_resource_limits": "pooltree/strategy/operation_checks.py",
    "max_job_resource_limits": "pooltree/strategy/operation_checks.py",
    "allow_single_job_large_gpu_operations_in_multiple_trees": "pooltree/strategy/segment_inputs.py",
    "enable_scheduling_tags": "pooltree/strategy/stages.py",
    "consider_allocation_on_fair_share_bound_preemptible": "pooltree/strategy/preemptible.py",
    "necessary_resources_for_operation": "pooltree/strategy/necessary_resources.py",
    "min_node_resource_limits": "pooltree/strategy/node_limits.py",
    "min_node_resource_limits_check_period": "pooltree/strategy/node_limits.py",
    "tentative_tree_saturation_deactivation_period": "pooltree/strategy/tentative.py",
    "non_tentative_operation_types": "pooltree/strategy/tentative.py",
    "packing": "pooltree/config/packing.py, pooltree/strategy/packing.py",
    "ssd_priority_preemption": "pooltree/config/ssd_preemption.py, pooltree/strategy/ssd_preemption.py",
    "waiting_for_resources_on_node_timeout": "pooltree/config/node_waiting.py, pooltree/node/gpu.py (live service)",
    "default_gpu_full_host_preemption": "pooltree/config/full_host_preemption.py, "
    "pooltree/strategy/full_host_preemption.py",
}
POOL_IMPLEMENTED_EXTRA: dict[str, str] = {
    "enable_priority_scheduling_segment_module_assignment": "pooltree/strategy/segments.py, "
    "pooltree/strategy/gpu_policy.py (priority module assignment / binding)",
    "allow_regular_allocations_on_ssd_nodes": "pooltree/strategy/ssd_preemption.py",
    "allow_regular_jobs_on_ssd_nodes": "pooltree/strategy/ssd_preemption.py (the old name)",
}
SPEC_IMPLEMENTED_EXTRA: dict[str, str] = {
    "scheduling_segment": "pooltree/config/segments.py",
    "scheduling_modules": "pooltree/config/segments.py",
    "scheduling_segment_modules": "pooltree/config/segments.py",
    "scheduling_segment_data_centers": "pooltree/config/segments.py",
    "enable_limiting_ancestor_check": "pooltree/strategy/operation_checks.py",
    "schedule_in_single_tree": "pooltree/strategy/single_tree.py",
    "consider_guarantees_for_single_tree": "pooltree/strategy/single_tree.py",
    "tentative_pool_trees": "pooltree/strategy/tentative.py, pooltree/server/live/tentative.py, pooltree/sim/tentative.py",
    "tentative_tree_eligibility": "pooltree/strategy/tentative.py",
    "use_default_tentative_pool_trees": "pooltree/strategy/tentative.py (the trees: pooltree scheduler "
    "--default-tentative-pool-trees, a snapshot's default_tentative_pool_trees)",
}

# Spec options the live service implements and the offline tools (the simulator, ``pooltree fair-share``) do
# not: reported by those tools (``unsupported_options(..., offline=True)``).
SPEC_OFFLINE_UNSUPPORTED: dict[str, str] = {}
TREE_OFFLINE_UNSUPPORTED: dict[str, str] = {
    "waiting_for_resources_on_node_timeout": (
        "live service only (pooltree/config/node_waiting.py): the simulator's jobs start on their nodes at once and "
        "never wait for resources"
    ),
}

TREE_ALIASES: dict[str, str] = {
    "update_preemptable_list_duration_logging_threshold": "update_preemptible_list_duration_logging_threshold",
    "best_allocation_ratio_update_period": "best_allocation_share_update_period",
    "waiting_job_timeout": "waiting_for_resources_on_node_timeout",
    "truncate_fifo_pool_unsatisfied_child_fair_share": "enable_fair_share_truncation_in_fifo_pool",
    "cached_job_preemption_statuses_update_period": "cached_allocation_preemption_statuses_update_period",
    "running_job_statistics_update_period": "running_allocation_statistics_update_period",
    "prioritized_regular_scheduling": "batch_operation_scheduling",
    "max_unpreemptable_running_job_count": "max_unpreemptible_running_allocation_count",
    "total_resource_limits_consider_delay": "node_reconnection_timeout",
}

POOL_UNSUPPORTED: dict[str, str] = {
    "historic_usage_config": OLD_OPTION,
    "allowed_profiling_tags": PROFILING,
    "enable_by_user_profiling": PROFILING,
    "enable_detailed_logs": PROFILING,
    "metering_tags": PROFILING,
    "custom_profiling_tag_filter": PROFILING,
    "fair_share_starvation_tolerance_limit": "an old YTsaurus option with no effect today",
    "fair_share_preemption_timeout_limit": "an old YTsaurus option with no effect today",
    "fair_share_starvation_timeout_limit": "an old YTsaurus option with no effect today",
    "min_share_preemption_timeout": "an old YTsaurus option with no effect today",
    "allow_idle_cpu_policy": IDLE_CPU,
    "redirect_to_cluster": "pooltree is one cluster: there is no other cluster to redirect operations to",
}

POOL_ALIASES: dict[str, str] = {
    "scheduling_tag": "scheduling_tag_filter",
    "allow_aggressive_starvation_preemption": "allow_aggressive_preemption",
    "truncate_fifo_pool_unsatisfied_child_fair_share": "enable_fair_share_truncation_in_fifo_pool",
}

# Strategy options of an operation spec that pooltree does not implement.
SPEC_UNSUPPORTED: dict[str, str] = {
    "max_concurrent_schedule_job_calls": PERFORMANCE,
    "max_concurrent_controller_schedule_job_calls": PERFORMANCE,
    "update_preemptable_jobs_list_logging_period": PROFILING,
    "custom_profiling_tag": PROFILING,
    "allow_idle_cpu_policy": IDLE_CPU,
}

# Options of a user job (mapper, reducer, vanilla task) that pooltree does not implement: job environment and
# table options outside the scheduling strategy (``docs/unsupported-options.md``, "Job and operation options").
NO_CONTAINERS = "pooltree's nodes run jobs as processes (in a bubblewrap sandbox where they can), not in Porto/CRI containers"
NO_TABLES = "pooltree has no tables: a vanilla job's output streams go to its stdout/stderr only"
USER_JOB_UNSUPPORTED: dict[str, str] = {
    "docker_image": f"{NO_CONTAINERS}: the job runs in the node's own root filesystem, not in the image",
    "layer_paths": f"{NO_CONTAINERS}: no Porto layers are mounted; the job sees the node's root filesystem",
    "make_rootfs_writable": f"{NO_CONTAINERS}: a sandboxed job's root filesystem stays read-only",
    "set_container_cpu_limit": f"{NO_CONTAINERS}: a job's CPU is not capped at its cpu_limit",
    "network_project": "pooltree's nodes have no network projects (MTN): the job shares the node's network",
    "enable_core_dump": "pooltree collects no core dumps (no core table)",
    "output_table_paths": f"{NO_TABLES}; nothing the job writes is stored in a table",
    "disk_space_limit": "pooltree's nodes do not limit a job's disk space (no disk quota resource)",
    "restart_exit_code": (
        "a job exiting with this code fails like any other (YTsaurus counts it lost and starts it again)"
    ),
    "max_stderr_size": "the node keeps at most 5 MiB of each job's stderr (YTsaurus's default), whatever the spec says",
}
# Operation spec options outside the scheduling strategy that pooltree does not implement.
OPERATION_UNSUPPORTED: dict[str, str] = {
    "stderr_table_path": f"{NO_TABLES}; job stderrs are kept by the scheduler (yt get-job-stderr), not in a table",
    "core_table_path": "pooltree collects no core dumps (no core table)",
    "max_stderr_count": "the scheduler keeps every job's stderr, not only the first max_stderr_count",
}


NOT_FEATURES = frozenset({PROFILING, PERFORMANCE, "YTsaurus testing options", OLD_OPTION})
"""Reasons that mark an option as no feature at all (profiling, performance knobs, testing, dead options)."""


def feature_unsupported_options() -> dict[str, list[str]]:
    """The feature-level options still accepted without an effect, per kind (``tree``, ``pool``, ``spec``): the
    ones ``docs/unsupported-options.md`` justifies one by one."""
    return {
        kind: sorted(name for name, reason in table.items() if reason not in NOT_FEATURES)
        for kind, table in (
            ("tree", TREE_UNSUPPORTED),
            ("pool", POOL_UNSUPPORTED),
            ("spec", SPEC_UNSUPPORTED),
        )
    }


@dataclass(frozen=True)
class UnsupportedOption:
    """One option that the input sets and pooltree accepts without implementing it."""

    path: str
    option: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "option": self.option, "reason": self.reason}


def closest_option(name: str, known: Iterable[str]) -> str | None:
    """The known option most like ``name`` (difflib), or None when nothing is close."""
    found = difflib.get_close_matches(name, sorted(set(known)), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_option_reason(name: str, known: Iterable[str]) -> str:
    """``unknown option 'x'`` plus the closest known option when there is one."""
    suggestion = closest_option(name, known)
    reason = f"unknown option {name!r}"
    return reason if suggestion is None else f"{reason}; did you mean {suggestion!r}?"


def _set_options(config: Any, unsupported: Mapping[str, str], path: str) -> list[UnsupportedOption]:
    found: list[UnsupportedOption] = []
    explicit = set(getattr(config, "model_fields_set", ())) | set(getattr(config, "model_extra", None) or {})
    extra = getattr(config, "model_extra", None) or {}
    for name in sorted(explicit):
        if name in unsupported and extra.get(name, _ANY) != IMPLEMENTED_VALUES.get(name, _NONE):
            found.append(UnsupportedOption(f"{path}.{name}" if path else name, name, unsupported[name]))
    return found


_ANY = object()
_NONE = object()
IMPLEMENTED_VALUES: dict[str, Any] = {
    "make_rootfs_writable": False,
    "set_container_cpu_limit": False,
    "enable_core_dump": False,
    "output_table_paths": [],
}
"""Unsupported options whose value is what pooltree does anyway (the job options' defaults: a client may send
them explicitly)."""


def unsupported_tree_options(definition: Any, path: str = "") -> list[UnsupportedOption]:
    """Unimplemented options set in one ``PoolTreeDefinition``: its config, then its pools in order."""
    prefix = path or f"pool_trees.{definition.name}"
    found = _set_options(definition.config, TREE_UNSUPPORTED, f"{prefix}.config")
    for name, pool in definition.pools.items():
        found.extend(_set_options(pool.config, POOL_UNSUPPORTED, f"{prefix}.pools.{name}"))
    return found


def unsupported_spec_options(
    spec: Any, path: str = "spec", *, offline: bool = False
) -> list[UnsupportedOption]:
    """Unimplemented strategy options set in an operation spec (and in its user jobs); ``offline``: for the
    simulator and ``pooltree fair-share``, which also lack the live-only options."""
    strategy = {**SPEC_UNSUPPORTED, **SPEC_OFFLINE_UNSUPPORTED} if offline else SPEC_UNSUPPORTED
    found = _set_options(spec, {**strategy, **OPERATION_UNSUPPORTED}, path)
    user_jobs = getattr(spec, "user_jobs", None)
    if user_jobs is not None:
        for name, job in user_jobs().items():
            where = f"{path}.tasks.{name}" if name in getattr(spec, "tasks", {}) else f"{path}.{name}"
            found.extend(_set_options(job, USER_JOB_UNSUPPORTED, where))
    return found


def unsupported_options(
    trees: Mapping[str, Any] | Iterable[Any],
    operations: Iterable[tuple[str, Any]] = (),
    *,
    offline: bool = False,
) -> list[dict[str, str]]:
    """The "unsupported options" alert: every option set in the input that pooltree accepts but ignores.

    ``trees`` are ``PoolTreeDefinition`` objects (a mapping by name or an iterable); ``operations`` are
    ``(operation id, OperationSpec)`` pairs. Each entry is ``{"path", "option", "reason"}``. ``offline``: the
    simulator's and ``pooltree fair-share``'s list, with the options only the live service implements.
    """
    definitions = trees.values() if isinstance(trees, Mapping) else trees
    found: list[UnsupportedOption] = []
    for definition in definitions:
        found.extend(unsupported_tree_options(definition))
        if offline:
            found.extend(
                _set_options(
                    definition.config, TREE_OFFLINE_UNSUPPORTED, f"pool_trees.{definition.name}.config"
                )
            )
    for operation_id, spec in operations:
        found.extend(unsupported_spec_options(spec, f"operations.{operation_id}.spec", offline=offline))
    return [item.to_dict() for item in found]


def unrecognized_tree_options(definition: Any, path: str = "") -> list[dict[str, str]]:
    """Option names set in one ``PoolTreeDefinition`` that neither pooltree nor YTsaurus knows.

    YTsaurus keeps such a name (its YSON structs keep unrecognized keys) and raises the tree alert "Pool tree
    config contains unrecognized options" unless the tree sets ``enable_unrecognized_alert`` to false; pooltree
    does the same for the tree config and always reports the pools' (each pool's config, its presets merged).
    """
    prefix = path or f"pool_trees.{definition.name}"
    found: list[tuple[str, str, str | None]] = []
    if getattr(definition.config, "enable_unrecognized_alert", True):
        found.extend(definition.config.unrecognized_options(f"{prefix}.config"))
    for name, pool in definition.pools.items():
        found.extend(pool.config.unrecognized_options(f"{prefix}.pools.{name}"))
    return [_unrecognized_entry(*item) for item in found]


def _unrecognized_entry(path: str, option: str, closest: str | None) -> dict[str, str]:
    reason = "unrecognized option: kept and ignored, as YTsaurus does"
    entry = {"path": path, "option": option, "reason": reason}
    if closest is not None:
        entry["closest"] = closest
        entry["reason"] = f"{reason}; did you mean {closest!r}?"
    return entry


def unrecognized_options(
    trees: Mapping[str, Any] | Iterable[Any], operations: Iterable[tuple[str, Any]] = ()
) -> list[dict[str, str]]:
    """The "unrecognized options" alert: option names in the input that pooltree does not know (nor YTsaurus,
    as far as pooltree's lists go), each with the closest known option when one is close (difflib).

    ``trees`` are ``PoolTreeDefinition`` objects; ``operations`` are ``(operation id, OperationSpec)`` pairs
    (their unknown keys are YTsaurus's ``unrecognized_spec``). Entries: ``{"path", "option", "reason"}`` plus
    ``"closest"`` when there is one.
    """
    definitions = trees.values() if isinstance(trees, Mapping) else trees
    found: list[dict[str, str]] = []
    for definition in definitions:
        found.extend(unrecognized_tree_options(definition))
    for operation_id, spec in operations:
        found.extend(
            _unrecognized_entry(*item)
            for item in spec.unrecognized_options(f"operations.{operation_id}.spec")
        )
    return found


UNRECOGNIZED_OPTIONS_ALERT = "unrecognized_pool_tree_config_options"


def unrecognized_options_alert(entries: list[dict[str, str]]) -> dict[str, Any] | None:
    """YTsaurus's tree alert ``unrecognized_pool_tree_config_options`` for ``unrecognized_options`` entries."""
    if not entries:
        return None
    return {
        "code": 1,
        "message": "Pool tree config contains unrecognized options",
        "attributes": {"alert_type": UNRECOGNIZED_OPTIONS_ALERT, "unrecognized": entries},
    }


UNSUPPORTED_OPTIONS_ALERT = "unsupported_options"


def unsupported_options_alert(entries: list[dict[str, str]]) -> dict[str, Any] | None:
    """The alert (YTsaurus error shape) for ``unsupported_options`` entries, or None when there are none."""
    if not entries:
        return None
    return {
        "code": 1,
        "message": "Options are accepted but not implemented by pooltree; they have no effect",
        "attributes": {"alert_type": UNSUPPORTED_OPTIONS_ALERT, "options": entries},
    }
