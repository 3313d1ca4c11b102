"""Pool tree options (the ``config`` attribute of a ``scheduler_pool_tree``) with YTsaurus defaults.

Durations are float seconds; resource maps are :class:`~pooltree.config.base.Resources`. Defaults follow
yt-semantics.md §c, §e.6 and §f; operation count limits: 50000 total / 2000 running for the root (§f), per pool
8 running / 50 total (the seeds' pool table, which wins over §f's per-pool running default 50).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import ConfigDict, Field, field_validator, model_validator

from pooltree.config.base import (
    ConfigModel,
    Duration,
    GuaranteeResources,
    TagFilterText,
    as_validation_error,
    invalid,
)
from pooltree.config.full_host_preemption import OPTION as FULL_HOST_OPTION
from pooltree.config.full_host_preemption import DefaultGpuFullHostPreemptionConfig
from pooltree.config.gpu_policy import GpuPolicyConfig
from pooltree.config.node_waiting import waiting_for_resources_timeout
from pooltree.config.packing import PackingConfig
from pooltree.config.pool import MAX_OPERATION_COUNT, PoolConfig, validate_preset
from pooltree.config.segments import SchedulingSegmentsConfig
from pooltree.config.ssd_preemption import SsdPriorityPreemptionConfig
from pooltree.config.support import TREE_ALIASES, TREE_IMPLEMENTED_EXTRA, TREE_UNSUPPORTED
from pooltree.config.tags import TagFilter
from pooltree.errors import ConfigError, join_path
from pooltree.resources import RESOURCE_ALIASES, RESOURCES, Vector, parse_duration, parse_resources

ROOT_POOL = "<Root>"
MAX_GRACEFUL_PREEMPTION_TIMEOUT = 600.0

ResourceName = Literal["user_slots", "cpu", "gpu", "memory", "network"]


def parse_necessary_resources(raw: Any, path: str = "necessary_resources_for_operation") -> tuple[str, ...]:
    """The option's resource names (YTsaurus's ``EJobResourceType`` names; ``user_memory`` is ``memory``), in
    pooltree's resource order; ConfigError naming the entry for anything else."""
    if raw is None:
        return ()
    if isinstance(raw, str) or not isinstance(raw, Iterable) or isinstance(raw, Mapping):
        raise ConfigError(path, f"expected a list of resource names, got {type(raw).__name__}")
    names: set[str] = set()
    for index, item in enumerate(raw):
        name = RESOURCE_ALIASES.get(str(item), str(item))
        if name not in RESOURCES:
            raise ConfigError(
                join_path(path, index), f"unknown resource {item!r}; known: {', '.join(RESOURCES)}"
            )
        names.add(name)
    return tuple(name for name in RESOURCES if name in names)


class TreeIntegralGuaranteesConfig(ConfigModel):
    """Tree ``integral_guarantees``: how accumulated volume turns into integral guarantees."""

    model_config = ConfigDict(extra="allow", frozen=True, validate_default=False)
    KEEP_UNRECOGNIZED: ClassVar[bool] = True

    smooth_period: Duration = 60.0
    pool_capacity_saturation_period: Duration = 86400.0
    relaxed_share_multiplier_limit: float = Field(default=3.0, ge=1.0, le=10.0)

    @field_validator("smooth_period", "pool_capacity_saturation_period")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be positive")
        return value


class PoolTreeConfig(ConfigModel):
    """Every tree option the seeds list plus the starvation, preemption and limit options of YTsaurus.

    The other YTsaurus tree options are accepted and kept in ``model_extra`` (``support.TREE_UNSUPPORTED``);
    ``support.unsupported_options`` reports the ones an input sets.
    """

    model_config = ConfigDict(extra="allow", frozen=True, validate_default=False)
    ACCEPTED_EXTRA: ClassVar[frozenset[str]] = frozenset(TREE_UNSUPPORTED) | frozenset(TREE_IMPLEMENTED_EXTRA)
    KEEP_UNRECOGNIZED: ClassVar[bool] = True

    ALIASES: ClassVar[dict[str, str]] = {
        **TREE_ALIASES,
        "nodes_filter": "node_tag_filter",
        "max_ephemeral_pool_per_user": "max_ephemeral_pools_per_user",
        "infer_weight_from_strong_guarantee_share_multiplier": "infer_weight_from_guarantees_share_multiplier",
        "infer_weight_from_min_share_ratio_multiplier": "infer_weight_from_guarantees_share_multiplier",
        "fair_share_preemption_timeout": "fair_share_starvation_timeout",
        "fair_share_aggressive_preemption_timeout": "fair_share_aggressive_starvation_timeout",
        "max_unpreemptible_running_job_count": "max_unpreemptible_running_allocation_count",
        "job_interrupt_timeout": "allocation_preemption_timeout",
        "job_graceful_interrupt_timeout": "allocation_graceful_preemption_timeout",
        "job_count_preemption_timeout_coefficient": "allocation_count_preemption_timeout_coefficient",
        "min_spare_job_resources_on_node": "min_spare_allocation_resources_on_node",
        "schedule_jobs_timeout": "schedule_allocations_timeout",
    }

    # Nodes, resources, pools.
    node_tag_filter: TagFilterText = ""
    main_resource: ResourceName = "cpu"
    # Tree-wide limits are the root's (yt-semantics §f: 50000 total, 2000 running). The per-pool defaults apply to
    # every pool without its own value; they follow the seeds' pool table (max_running_operation_count 8,
    # max_operation_count 50), which wins over the tree default 50 that yt-semantics §f gives for the running one.
    # An explicit tree option still overrides both.
    max_operation_count: int = Field(default=50000, ge=0, le=MAX_OPERATION_COUNT)
    max_operation_count_per_pool: int = Field(default=50, ge=0, le=MAX_OPERATION_COUNT)
    max_running_operation_count: int = Field(default=2000, ge=0, le=MAX_OPERATION_COUNT)
    max_running_operation_count_per_pool: int = Field(default=8, ge=0, le=MAX_OPERATION_COUNT)
    default_parent_pool: str = Field(default=ROOT_POOL, min_length=1)
    forbid_immediate_operations_in_root: bool = True
    max_ephemeral_pools_per_user: int = Field(default=1, ge=0)
    ephemeral_pool_name_regex: str = "[-_a-z0-9:A-Z]+"
    use_user_default_parent_pool_map: bool = False
    infer_weight_from_guarantees_share_multiplier: float | None = Field(default=None, ge=1.0)
    integral_guarantees: TreeIntegralGuaranteesConfig = Field(default_factory=TreeIntegralGuaranteesConfig)
    should_distribute_free_volume_among_children: bool = False
    pool_config_presets: dict[str, dict[str, Any]] = Field(default_factory=dict)

    # Starvation (yt-semantics §c).
    fair_share_starvation_timeout: Duration = 30.0
    fair_share_starvation_tolerance: float = Field(default=0.8, ge=0.0, le=1.0)
    fair_share_aggressive_starvation_timeout: Duration = 120.0
    enable_aggressive_starvation: bool = False
    enable_pool_starvation: bool = True
    non_preemptible_resource_usage_threshold: GuaranteeResources | None = None
    max_unpreemptible_running_allocation_count: int | None = Field(default=None, ge=0)
    allocation_count_preemption_timeout_coefficient: float = Field(default=1.0, ge=1.0)

    # Preemption (yt-semantics §d, §e).
    preemptive_scheduling_backoff: Duration = 5.0
    preemption_satisfaction_threshold: float = Field(default=1.0, gt=0.0)
    aggressive_preemption_satisfaction_threshold: float = Field(default=0.2, ge=0.0)
    # The CHYT seed: the standard interruption_timeout is 15 s (yt-semantics said 10 s; the seeds win).
    allocation_preemption_timeout: Duration = 15.0
    allocation_graceful_preemption_timeout: Duration = 60.0
    enable_conditional_preemption: bool = True
    preemption_check_starvation: bool = True
    preemption_check_satisfaction: bool = True
    allow_preemption_from_starving_operations: bool | None = None
    """YTsaurus: false protects a starving operation's allocations, true lets them be preempted; unset, pooltree
    checks the operation's starvation as ``preemption_check_starvation`` says (``strategy/starving_victims.py``)."""
    min_spare_allocation_resources_on_node: GuaranteeResources | None = None
    scheduling_preemption_priority_scope: Literal["operation_and_ancestors", "operation_only"] = (
        "operation_and_ancestors"
    )
    allow_aggressive_preemption_for_gang_operations: bool = True
    enable_step_function_for_gang_operations: bool = False
    enable_improved_fair_share_by_fit_factor_computation: bool = False
    enable_improved_fair_share_by_fit_factor_computation_distribution_gap: bool = False
    enable_discretized_fair_share: bool = False
    """YTsaurus: operations' fair shares are whole numbers of pending jobs (``fairshare/discretized.py``)."""
    max_discretized_steps: int = Field(default=100, gt=0)
    """YTsaurus: above this many pending allocations only a window of steps around the previous fair share is a
    staircase."""
    allow_gang_operations_only_in_fifo_pools: bool = False
    consider_single_allocation_vanilla_operations_as_gang: bool = False
    enable_fair_share_truncation_in_fifo_pool: bool = False
    """YTsaurus's rule on where gang operations may run; the default (false: anywhere) is pooltree's choice,
    YTsaurus's own default could not be confirmed from its public code."""
    enable_guarantee_priority_scheduling: bool = False
    enable_absolute_fair_share_starvation_tolerance: bool = False
    """YTsaurus: an operation whose fair share does not cover its demand stays ``normal`` while the gap between
    its fair share and usage is not above its smallest allocation (``strategy/starvation_tolerance.py``)."""

    # Scheduling order and timing (yt-semantics §e.6, §b.1).
    fifo_pool_scheduling_order: Literal["satisfaction", "fifo"] = "satisfaction"
    use_pool_satisfaction_for_scheduling: bool = False
    max_schedulable_element_count_in_fifo_pool: int | None = Field(default=None, gt=0)
    """YTsaurus: in a FIFO pool, operations past the first N with a zero fair share are not schedulable."""
    min_child_heap_size: int = Field(default=16, ge=1)
    node_reconnection_timeout: Duration = 300.0
    best_allocation_share_update_period: Duration = 60.0
    """YTsaurus: how often each operation's best allocation share is computed again (`strategy/best_allocation.py`)."""
    schedule_allocations_timeout: Duration = 40.0
    enable_unrecognized_alert: bool = True
    """YTsaurus: whether option names the tree config does not know raise the "unrecognized options" alert."""

    @field_validator("non_preemptible_resource_usage_threshold", mode="before")
    @classmethod
    def _threshold_is_a_map(cls, value: Any) -> Any:
        if value is None:  # YTsaurus: a map of resources (an empty one sets none); remove the option instead
            raise ValueError("expected a map of resources, got null")
        return value

    @field_validator("main_resource", mode="before")
    @classmethod
    def _canonical_resource(cls, value: Any) -> Any:
        return RESOURCE_ALIASES.get(value, value) if isinstance(value, str) else value

    @field_validator("ephemeral_pool_name_regex")
    @classmethod
    def _valid_regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"invalid regular expression: {error}") from None
        return value

    @field_validator("pool_config_presets", mode="before")
    @classmethod
    def _valid_presets(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError(f"expected a map of preset name → pool options, got {type(value).__name__}")
        checked: dict[str, dict[str, Any]] = {}
        for name, content in value.items():
            try:
                checked[str(name)] = validate_preset(content, str(name))
            except ConfigError as error:
                raise as_validation_error(error) from None
        return checked

    @model_validator(mode="after")
    def _check(self) -> PoolTreeConfig:
        extra = self.model_extra or {}
        try:
            if extra.get("scheduling_segments") is not None:
                SchedulingSegmentsConfig.from_options(extra["scheduling_segments"], "scheduling_segments")
            if extra.get("necessary_resources_for_operation") is not None:
                parse_necessary_resources(extra["necessary_resources_for_operation"])
            PackingConfig.parse(extra.get("packing"), "packing")
            SsdPriorityPreemptionConfig.parse(extra.get("ssd_priority_preemption"), "ssd_priority_preemption")
            DefaultGpuFullHostPreemptionConfig.parse(extra.get(FULL_HOST_OPTION), FULL_HOST_OPTION)
            waiting_for_resources_timeout(extra)
            if extra.get("tentative_tree_saturation_deactivation_period") is not None:
                parse_duration(
                    extra["tentative_tree_saturation_deactivation_period"],
                    "tentative_tree_saturation_deactivation_period",
                )
            types = extra.get("non_tentative_operation_types")
            if types is not None and (
                not isinstance(types, list) or not all(isinstance(t, str) for t in types)
            ):
                raise ConfigError("non_tentative_operation_types", "expected a list of operation types")
            GpuPolicyConfig.from_tree_options(
                extra.get("policy_kind"), extra.get("gpu_scheduling_policy"), ""
            )
            for name in ("min_job_resource_limits", "max_job_resource_limits", "min_node_resource_limits"):
                if extra.get(name) is not None:
                    if not isinstance(extra[name], dict):
                        raise ConfigError(name, "expected a map of resources")
                    parse_resources(extra[name], name)
        except ConfigError as error:
            raise as_validation_error(error) from None
        if self.aggressive_preemption_satisfaction_threshold > self.preemption_satisfaction_threshold:
            raise invalid(
                "aggressive_preemption_satisfaction_threshold must not exceed preemption_satisfaction_threshold, "
                f"but {self.aggressive_preemption_satisfaction_threshold} > {self.preemption_satisfaction_threshold}",
                "aggressive_preemption_satisfaction_threshold",
            )
        if self.fair_share_aggressive_starvation_timeout < self.fair_share_starvation_timeout:
            raise invalid(
                "fair_share_aggressive_starvation_timeout must be greater than or equal to "
                f"fair_share_starvation_timeout, but {self.fair_share_aggressive_starvation_timeout:g}s < "
                f"{self.fair_share_starvation_timeout:g}s",
                "fair_share_aggressive_starvation_timeout",
            )
        if self.allocation_graceful_preemption_timeout > MAX_GRACEFUL_PREEMPTION_TIMEOUT:
            raise invalid(
                "allocation_graceful_preemption_timeout must not exceed 10 minutes, "
                f"got {self.allocation_graceful_preemption_timeout:g}s",
                "allocation_graceful_preemption_timeout",
            )
        return self

    def unrecognized_options(self, path: str = "") -> list[tuple[str, str, str | None]]:
        """Unknown names in the config, its nested structs and its ``pool_config_presets`` (YTsaurus keeps
        presets as pool structs, so a preset's unknown name is the tree config's)."""
        found = super().unrecognized_options(path)
        for name, content in self.pool_config_presets.items():
            preset_path = join_path(join_path(path, "pool_config_presets"), name)
            found.extend(PoolConfig.parse(content, preset_path).unrecognized_options(preset_path))
        return found

    @property
    def tag_filter(self) -> TagFilter:
        """The parsed ``node_tag_filter``."""
        return TagFilter.parse(self.node_tag_filter)

    @property
    def main_resource_index(self) -> int:
        return RESOURCES.index(self.main_resource)

    def effective_non_preemptible_resource_usage_threshold(self) -> Vector:
        """Tree-level threshold vector (§c): set resources as given, unset ones infinite; all-zero if nothing set.

        ``user_slots`` falls back to ``max_unpreemptible_running_allocation_count`` when the map leaves it out.
        """
        specified: dict[str, float] = {}
        if self.non_preemptible_resource_usage_threshold is not None:
            threshold = self.non_preemptible_resource_usage_threshold
            specified = {name: threshold[name] for name in threshold.specified}
        if "user_slots" not in specified and self.max_unpreemptible_running_allocation_count is not None:
            specified["user_slots"] = float(self.max_unpreemptible_running_allocation_count)
        if not specified:
            return np.zeros(len(RESOURCES))
        vector = np.full(len(RESOURCES), math.inf)
        for name, amount in specified.items():
            vector[RESOURCES.index(name)] = amount
        return vector
