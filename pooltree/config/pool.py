"""Pool options (``scheduler_pool`` attributes) with the seeds' defaults and the master-side checks on one pool.

Unset optional options are ``None``: the pool tree runtime resolves them (operation count limits from the tree's
``*_per_pool`` defaults; starvation tolerance/timeout, aggressive starvation, preemption flags and the
non-preemptible usage threshold from the nearest ancestor that sets them, then the tree).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from pooltree.config.base import (
    ConfigModel,
    Duration,
    GuaranteeResources,
    LimitResources,
    Resources,
    TagFilterText,
    invalid,
)
from pooltree.config.ssd_preemption import regular_allocations_allowed
from pooltree.config.support import POOL_ALIASES, POOL_IMPLEMENTED_EXTRA, POOL_UNSUPPORTED
from pooltree.errors import ConfigError, join_path

PoolMode = Literal["fair_share", "fifo"]
MIN_SCHEDULABLE_WEIGHT = 1.4901161193847656e-08
"""YTsaurus ``MinSchedulableWeight`` = sqrt(double epsilon): weights of pools and operations lie in
[MIN_SCHEDULABLE_WEIGHT, MAX_SCHEDULABLE_WEIGHT] so that their ratio keeps its precision."""
MAX_SCHEDULABLE_WEIGHT = 1.0 / MIN_SCHEDULABLE_WEIGHT
MAX_OPERATION_COUNT = 2**31 - 1
"""Operation counts are C++ ``int`` in YTsaurus's configs: a larger value does not fit and is refused."""

FifoSortParameter = Literal["start_time", "weight", "pending_job_count", "pending_allocation_count"]
IntegralGuaranteeType = Literal["none", "burst", "relaxed"]

DEFAULT_FIFO_SORT_PARAMETERS: tuple[FifoSortParameter, ...] = ("weight", "start_time")


class PoolIntegralGuaranteesConfig(ConfigModel):
    """Pool ``integral_guarantees``: burst or relaxed guarantees fed by an accumulated resource volume."""

    model_config = ConfigDict(extra="allow", frozen=True, validate_default=False)
    KEEP_UNRECOGNIZED: ClassVar[bool] = True

    guarantee_type: IntegralGuaranteeType = "none"
    burst_guarantee_resources: GuaranteeResources = Field(default_factory=Resources.zero)
    resource_flow: GuaranteeResources = Field(default_factory=Resources.zero)
    relaxed_share_multiplier_limit: float | None = Field(default=None, ge=1.0, le=10.0)
    """``None`` → the tree's ``integral_guarantees.relaxed_share_multiplier_limit`` (3)."""
    can_accept_free_volume: bool = True
    should_distribute_free_volume_among_children: bool | None = None
    """``None`` → the tree's ``should_distribute_free_volume_among_children``."""

    @model_validator(mode="after")
    def _relaxed_has_no_burst(self) -> PoolIntegralGuaranteesConfig:
        if self.guarantee_type == "relaxed" and any(self.burst_guarantee_resources.vector > 0):
            raise invalid(
                'burst guarantees are not allowed for pools with guarantee_type "relaxed"',
                "burst_guarantee_resources",
            )
        return self

    @property
    def is_integral(self) -> bool:
        """Whether the pool itself receives integral guarantees (type burst or relaxed)."""
        return self.guarantee_type != "none"

    @property
    def has_integral_resources(self) -> bool:
        """Whether the pool configures any integral resources (type, burst guarantee or resource flow)."""
        return (
            self.is_integral
            or bool(self.burst_guarantee_resources.specified)
            or bool(self.resource_flow.specified)
        )


class EphemeralSubpoolConfig(ConfigModel):
    """``ephemeral_subpool_config``: what ephemeral subpools ``pool$user`` of this pool get."""

    model_config = ConfigDict(extra="allow", frozen=True, validate_default=False)
    KEEP_UNRECOGNIZED: ClassVar[bool] = True

    mode: PoolMode = "fair_share"
    max_running_operation_count: int | None = Field(default=None, ge=0, le=MAX_OPERATION_COUNT)
    max_operation_count: int | None = Field(default=None, ge=0, le=MAX_OPERATION_COUNT)
    resource_limits: LimitResources = Field(default_factory=Resources.unlimited)

    @model_validator(mode="after")
    def _counts_consistent(self) -> EphemeralSubpoolConfig:
        check_operation_counts(self.max_operation_count, self.max_running_operation_count)
        return self


class OffloadingPoolSettings(ConfigModel):
    """One entry of ``offloading_settings``: the pool of another tree that takes part of this pool's jobs."""

    model_config = ConfigDict(extra="allow", frozen=True, validate_default=False)
    KEEP_UNRECOGNIZED: ClassVar[bool] = True

    pool: str = Field(min_length=1)
    weight: float | None = Field(default=None, ge=MIN_SCHEDULABLE_WEIGHT, le=MAX_SCHEDULABLE_WEIGHT)
    resource_limits: LimitResources = Field(default_factory=Resources.unlimited)


def check_operation_counts(max_operation_count: int | None, max_running_operation_count: int | None) -> None:
    """YTsaurus check: ``max_operation_count`` ≥ ``max_running_operation_count`` when both are set."""
    if (
        max_operation_count is not None
        and max_running_operation_count is not None
        and max_operation_count < max_running_operation_count
    ):
        raise invalid(
            '"max_operation_count" must be greater than or equal to "max_running_operation_count", '
            f"but {max_operation_count} < {max_running_operation_count}",
            "max_running_operation_count",
        )


class PoolConfig(ConfigModel):
    """Every option of a pool (seeds: pool-tree configuration, preemption, operation count limits)."""

    model_config = ConfigDict(extra="allow", frozen=True, validate_default=False)
    ACCEPTED_EXTRA: ClassVar[frozenset[str]] = frozenset(POOL_UNSUPPORTED) | frozenset(POOL_IMPLEMENTED_EXTRA)
    KEEP_UNRECOGNIZED: ClassVar[bool] = True

    ALIASES: ClassVar[dict[str, str]] = {
        **POOL_ALIASES,
        "allow_gang_operations": "always_allow_gang_operations",
        "min_share_resources": "strong_guarantee_resources",
        "fair_share_preemption_timeout": "fair_share_starvation_timeout",
    }

    weight: float | None = Field(default=None, ge=MIN_SCHEDULABLE_WEIGHT, le=MAX_SCHEDULABLE_WEIGHT)
    """``None`` → inferred from guarantees (tree multiplier) or 1.0."""
    strong_guarantee_resources: GuaranteeResources = Field(default_factory=Resources.zero)
    resource_limits: LimitResources = Field(default_factory=Resources.unlimited)
    max_share_ratio: float | None = Field(default=None, ge=0, le=1)
    mode: PoolMode = "fair_share"
    max_running_operation_count: int | None = Field(default=None, ge=0, le=MAX_OPERATION_COUNT)
    """``None`` → tree ``max_running_operation_count_per_pool`` (default 8, the seeds' pool table)."""
    max_operation_count: int | None = Field(default=None, ge=0, le=MAX_OPERATION_COUNT)
    """``None`` → tree ``max_operation_count_per_pool`` (default 50, the seeds' pool table)."""
    fifo_sort_parameters: tuple[FifoSortParameter, ...] = Field(
        default=DEFAULT_FIFO_SORT_PARAMETERS, min_length=1
    )
    forbid_immediate_operations: bool = False
    create_ephemeral_subpools: bool = False
    ephemeral_subpool_config: EphemeralSubpoolConfig | None = None
    offloading_settings: dict[str, OffloadingPoolSettings] = Field(default_factory=dict)
    config_preset: str | None = None
    config_presets: tuple[str, ...] = ()
    integral_guarantees: PoolIntegralGuaranteesConfig = Field(default_factory=PoolIntegralGuaranteesConfig)
    scheduling_tag_filter: TagFilterText = ""
    fair_share_starvation_tolerance: float | None = Field(default=None, ge=0, le=1)
    fair_share_starvation_timeout: Duration | None = None
    enable_aggressive_starvation: bool | None = None
    allow_aggressive_preemption: bool | None = None
    allow_normal_preemption: bool | None = None
    use_pool_satisfaction_for_scheduling: bool | None = None
    """YTsaurus: overrides the tree's option for this pool and, unless they set their own, its descendants."""
    resource_limits_overcommit_tolerance: GuaranteeResources | None = None
    """YTsaurus: how far a preemptive stage may start an allocation past this pool's ``resource_limits``
    (``strategy/limits_tolerance.py``)."""
    non_preemptible_resource_usage_threshold: GuaranteeResources | None = None
    enable_lightweight_operations: bool = False
    compute_promised_guarantee_fair_share: bool = False
    enable_priority_strong_guarantee_adjustment: bool = False
    enable_priority_strong_guarantee_adjustment_donorship: bool = False
    infer_children_weights_from_historic_usage: bool = False
    """YTsaurus: the children's weights are multiplied by 2^-(their historic dominant usage share)
    (``fairshare/historic_usage.py``)."""
    historic_usage_aggregation_period: Duration | None = Field(default=None, ge=0)
    """The half-life of that historic usage; ``None`` → 10 s. No effect without
    ``infer_children_weights_from_historic_usage`` (YTsaurus's postprocessor drops it then)."""
    always_allow_gang_operations: bool = False
    """Gang operations may run here even in fair_share mode (tree ``allow_gang_operations_only_in_fifo_pools``)."""
    enable_step_function_for_gang_operations: bool = True
    enable_fair_share_truncation_in_fifo_pool: bool | None = None
    """``None`` → the tree's option: a FIFO pool truncates the fair share of unsatisfied gang operations."""
    """Whether gang operations in this pool get the step fair-share function (when the tree enables it)."""
    allow_children_guarantees: bool = True
    """Whether child pools may have guarantees (strong, burst, resource flow) this pool has: YTsaurus's master
    refuses a child's guarantee under a pool that sets it to false (validation only; no effect on fair share)."""
    abc: dict[str, Any] | None = None
    """Free-form accounting metadata (``{id, slug, name}`` in YTsaurus); kept as is."""

    @model_validator(mode="after")
    def _check(self) -> PoolConfig:
        check_operation_counts(self.max_operation_count, self.max_running_operation_count)
        if self.mode == "fifo" and self.create_ephemeral_subpools:  # YTsaurus TPoolConfig::Validate
            raise invalid("Fifo pool cannot create ephemeral subpools", "create_ephemeral_subpools")
        if self.config_preset is not None and self.config_presets:
            raise invalid(
                '"config_preset" and "config_presets" cannot be specified together', "config_presets"
            )
        try:
            regular_allocations_allowed(self)  # `config/ssd_preemption.py`
        except ConfigError as error:
            raise invalid(error.reason, error.path) from None
        priority = (self.model_extra or {}).get("enable_priority_scheduling_segment_module_assignment")
        if priority is not None and not isinstance(priority, bool):
            raise invalid(
                f"expected a boolean, got {priority!r}",
                "enable_priority_scheduling_segment_module_assignment",
            )
        return self

    @property
    def presets(self) -> tuple[str, ...]:
        """Names of the presets applied to this pool, in application order."""
        if self.config_preset is not None:
            return (self.config_preset,)
        return self.config_presets

    @property
    def effective_max_share_ratio(self) -> float:
        return 1.0 if self.max_share_ratio is None else self.max_share_ratio

    @property
    def has_strong_guarantee(self) -> bool:
        return bool(self.strong_guarantee_resources.specified)

    def limits_vector(self) -> Any:
        """The specified ``resource_limits`` vector (``inf`` where unset)."""
        return self.resource_limits.vector

    def is_fifo(self) -> bool:
        return self.mode == "fifo"


PRESET_FORBIDDEN_OPTIONS = frozenset({"config_preset", "config_presets"})


def validate_preset(content: Any, path: str) -> dict[str, Any]:
    """Check a preset as pool options (presets cannot name presets); return its plain content."""
    if content is None:
        return {}
    if not isinstance(content, dict):
        raise ConfigError(path, f"a preset must be a map of pool options, got {type(content).__name__}")
    for key in content:
        if key in PRESET_FORBIDDEN_OPTIONS:
            raise ConfigError(join_path(path, str(key)), "a preset cannot refer to other presets")
    PoolConfig.parse(content, path)
    return dict(content)
