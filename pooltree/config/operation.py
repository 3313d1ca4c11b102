"""The scheduler-relevant part of an operation spec, with YTsaurus defaults.

Unknown spec keys are not errors: YTsaurus accepts them and reports them in the ``unrecognized_spec``
operation attribute, so :meth:`OperationSpec.unrecognized_spec` returns them (nested as in the spec). Keys that
YTsaurus knows but the scheduler model does not use (table paths, formats, files...) are accepted silently.
A known key with a bad value is a ConfigError naming its path.
"""

from __future__ import annotations

import copy
import functools
import math
import posixpath
import signal
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from pooltree.config.base import (
    ConfigModel,
    Duration,
    GuaranteeResources,
    LimitResources,
    Resources,
    Size,
    TagFilterText,
    as_validation_error,
    invalid,
)
from pooltree.config.pool import MAX_SCHEDULABLE_WEIGHT, MIN_SCHEDULABLE_WEIGHT
from pooltree.config.segments import SegmentSpec
from pooltree.config.support import (
    OPERATION_UNSUPPORTED,
    SPEC_IMPLEMENTED_EXTRA,
    SPEC_UNSUPPORTED,
    USER_JOB_UNSUPPORTED,
)
from pooltree.errors import ConfigError

PreemptionMode = Literal["normal", "graceful"]

DEFAULT_MEMORY_LIMIT = 512 * 1024**2
MAX_DIGEST_BUCKETS = 1000

# YTsaurus spec keys the scheduler model does not interpret; they are not "unrecognized".
KNOWN_SPEC_KEYS = frozenset(
    {
        "acl",
        "alias",
        "annotations",
        "auto_merge",
        "data_size_per_job",
        "data_weight_per_job",
        "description",
        "input_table_paths",
        "job_io",
        "map_job_io",
        "max_data_weight_per_job",
        "output_table_paths",
        "owners",
        "reduce_by",
        "reduce_job_io",
        "secure_vault",
        "sort_by",
        "sort_job_io",
        "started_by",
        "table_writer",
        "ordered",
        "partition_count",
        "job_node_account",
        "intermediate_data_account",
        "tentative_pool_trees",
    }
)
DEFAULT_CUSTOM_STATISTICS_COUNT_LIMIT = 128
MAX_CUSTOM_STATISTICS_COUNT_LIMIT = 1024
"""YTsaurus's user job ``custom_statistics_count_limit``: default 128, at most 1024 (``node/user_statistics.py``)."""
KNOWN_USER_JOB_KEYS = frozenset(
    {
        "check_input_fully_consumed",
        "copy_files",
        "file_paths",
        "format",
        "input_format",
        "output_format",
        "use_yamr_descriptors",
        "redirect_stdout_to_stderr",
        "disk_request",
        "title",
    }
)


def _check_signal(value: str | None) -> str | None:
    if value is None:
        return None
    name = value if value.startswith("SIG") else f"SIG{value}"
    if name not in signal.Signals.__members__:
        raise ValueError(f"unknown signal {value!r} (use a name such as SIGINT or SIGUSR1)")
    return value


class SpecModel(ConfigModel):
    """Base of spec models: unknown keys are kept (``model_extra``) instead of failing."""

    model_config = ConfigDict(extra="allow", frozen=True)
    KEEP_UNRECOGNIZED: ClassVar[bool] = True

    KNOWN_EXTRA: ClassVar[frozenset[str]] = frozenset()

    def unrecognized(self) -> dict[str, Any]:
        """Unknown keys of this model and of nested spec models, nested like the spec."""
        found: dict[str, Any] = {
            key: value for key, value in (self.model_extra or {}).items() if key not in self.KNOWN_EXTRA
        }
        for name in type(self).model_fields:
            value = getattr(self, name)
            nested: dict[str, Any] = {}
            if isinstance(value, SpecModel):
                nested = value.unrecognized()
            elif isinstance(value, dict):
                for key, item in value.items():
                    if isinstance(item, SpecModel) and (inner := item.unrecognized()):
                        nested[key] = inner
            if nested:
                found[name] = nested
        return found


def is_sandbox_path(value: object) -> bool:
    """A path inside a job's sandbox: relative, normalized, not leaving it (``tmpfs``, ``data/cache``); the rule
    of the spec's tmpfs paths and of the node's job spec."""
    return (
        isinstance(value, str)
        and bool(value)
        and not value.startswith("/")
        and "\0" not in value
        and posixpath.normpath(value) == value
        and value != "."
        and value.split("/")[0] != ".."
    )


def _in_sandbox(value: str | None) -> str | None:
    """A tmpfs path: relative to the job's sandbox and normalized (``tmpfs``, ``data/cache``)."""
    if value is not None and not is_sandbox_path(value):
        raise ValueError(f"must be a normalized path inside the job's sandbox, got {value!r}")
    return value


class TmpfsVolume(SpecModel):
    size: Size
    path: str = Field(min_length=1)

    _path = field_validator("path")(classmethod(lambda cls, value: _in_sandbox(value)))


class UserJobSpec(SpecModel):
    """A user job (``mapper``, ``reducer`` or a vanilla task): command, limits and memory digest options."""

    KNOWN_EXTRA: ClassVar[frozenset[str]] = KNOWN_USER_JOB_KEYS | frozenset(USER_JOB_UNSUPPORTED)

    command: str
    memory_limit: Size = float(DEFAULT_MEMORY_LIMIT)
    cpu_limit: float = Field(default=1.0, ge=0)
    gpu_limit: int = Field(default=0, ge=0)
    tmpfs_size: Size | None = None
    tmpfs_path: str | None = None
    tmpfs_volumes: tuple[TmpfsVolume, ...] = ()
    environment: dict[str, str] = Field(default_factory=dict)
    interruption_signal: str | None = None
    restart_exit_code: int | None = None
    user_job_memory_digest_default_value: float | None = Field(default=None, gt=0, le=1)
    """``None`` → the operation spec's value."""
    user_job_memory_digest_lower_bound: float | None = Field(default=None, gt=0, le=1)
    """``None`` → the operation spec's value."""
    memory_reserve_factor: float | None = Field(default=None, gt=0, le=1)
    job_time_limit: Duration | None = None
    """A job running longer is stopped with YTsaurus's "Job time limit exceeded" (1202); seconds."""
    custom_statistics_count_limit: int = Field(
        default=DEFAULT_CUSTOM_STATISTICS_COUNT_LIMIT, ge=1, le=MAX_CUSTOM_STATISTICS_COUNT_LIMIT
    )
    """How many custom statistics paths a job may write to descriptor 5 (``pooltree/node/user_statistics.py``)."""
    job_speculation_timeout: Duration | None = None
    """A job running longer gets a speculative copy (`pooltree.controllers.speculative`); ``None`` → the
    operation spec's value; seconds."""

    _signal = field_validator("interruption_signal")(classmethod(lambda cls, value: _check_signal(value)))
    _tmpfs_path = field_validator("tmpfs_path")(classmethod(lambda cls, value: _in_sandbox(value)))

    @model_validator(mode="after")
    def _check_tmpfs(self) -> UserJobSpec:
        if self.tmpfs_size is not None and self.tmpfs_path is None and not self.tmpfs_volumes:
            raise invalid("tmpfs_size requires tmpfs_path", "tmpfs_path")
        if (self.tmpfs_size is not None or self.tmpfs_path is not None) and self.tmpfs_volumes:
            raise invalid(  # YTsaurus's TUserJobSpec says so too
                "tmpfs_size and tmpfs_path cannot be specified together with tmpfs_volumes", "tmpfs_volumes"
            )
        paths = [path for path, _ in self.tmpfs_mounts()]
        for index, path in enumerate(paths):
            if any(
                other == path or other.startswith(path + "/") or path.startswith(other + "/")
                for other in paths[:index]
            ):
                raise invalid(
                    f"tmpfs path {path!r} lies in or over another tmpfs of the job", "tmpfs_volumes"
                )
        if self.tmpfs_total_size > self.memory_limit:
            raise invalid(
                f"total tmpfs size {self.tmpfs_total_size:.0f} must not exceed memory_limit {self.memory_limit:.0f}",
                "tmpfs_size" if self.tmpfs_size is not None else "tmpfs_volumes",
            )
        return self

    def tmpfs_mounts(self) -> list[tuple[str, int]]:
        """(path in the sandbox, bytes) of every tmpfs the job gets: ``tmpfs_path`` (of ``tmpfs_size``, else of
        the whole ``memory_limit``: a tmpfs lives in the job's memory) and each of ``tmpfs_volumes``."""
        mounts = [(volume.path, int(volume.size)) for volume in self.tmpfs_volumes]
        if self.tmpfs_path is not None:
            size = self.tmpfs_size if self.tmpfs_size is not None else self.memory_limit
            mounts.insert(0, (self.tmpfs_path, int(size)))
        return mounts

    @property
    def tmpfs_total_size(self) -> float:
        return (self.tmpfs_size or 0.0) + sum(volume.size for volume in self.tmpfs_volumes)

    def memory_digest_parameters(self, spec: OperationSpec) -> tuple[float, float]:
        """(lower bound, default value) of the user job memory digest after YTsaurus normalization (§g.2).

        ``memory_reserve_factor`` (job, else operation) sets both; tmpfs raises both to the tmpfs fraction
        of ``memory_limit``; the default is never below the lower bound.
        """
        lower = _first(self.user_job_memory_digest_lower_bound, spec.user_job_memory_digest_lower_bound)
        default = _first(self.user_job_memory_digest_default_value, spec.user_job_memory_digest_default_value)
        factor = _first(self.memory_reserve_factor, spec.memory_reserve_factor)
        if factor is not None:
            lower = default = factor
        if self.memory_limit > 0 and self.tmpfs_total_size > 0:
            fraction = self.tmpfs_total_size / self.memory_limit
            default = min(1.0, max(default, fraction))
            lower = min(1.0, max(lower, fraction))
        return lower, max(lower, default)


def _first(value: Any, fallback: Any) -> Any:
    return fallback if value is None else value


MAX_VANILLA_TASK_COUNT = 100
MAX_VANILLA_TOTAL_JOB_COUNT = 100_000
"""YTsaurus's controller agent limits (``vanilla_operation_options``): a vanilla operation has at most 100 tasks
and 100,000 jobs in all; a larger ``job_count`` would cost the scheduler memory per pending job."""


class GangOptions(SpecModel):
    """A vanilla task's ``gang_options`` (YTsaurus's gang controller): ``size`` jobs hold a gang rank (default
    ``job_count``); losing a ranked job restarts every job of the operation in its allocation."""

    size: int | None = Field(default=None, ge=1)


class VanillaTaskSpec(UserJobSpec):
    """One task of a vanilla operation (``tasks.<name>``)."""

    job_count: int = Field(ge=1)
    gang_options: GangOptions | None = None
    restart_completed_jobs: bool = False
    """YTsaurus's vanilla task option: a job that completes is started again (counted lost), so the task runs
    until the operation is completed or aborted (services)."""

    @model_validator(mode="after")
    def _gang_size(self) -> VanillaTaskSpec:
        if self.gang_options is not None and (self.gang_options.size or 0) > self.job_count:
            raise invalid(
                f"must not exceed job_count ({self.job_count}), got {self.gang_options.size}",
                "gang_options.size",
            )
        return self

    @property
    def gang_size(self) -> int | None:
        """Ranked jobs of the task (``gang_options.size``, else ``job_count``); ``None`` without gang_options."""
        if self.gang_options is None:
            return None
        return self.gang_options.size or self.job_count


class LogDigestConfig(SpecModel):
    """A log digest's bounds (``job_proxy_memory_digest``)."""

    lower_bound: float = Field(default=0.5, gt=0)
    upper_bound: float = Field(default=2.0, gt=0)
    default_value: float | None = Field(default=1.0, gt=0)
    relative_precision: float = Field(default=0.01, gt=0)

    @model_validator(mode="after")
    def _check(self) -> LogDigestConfig:
        if self.upper_bound < self.lower_bound:
            raise invalid(
                f"upper_bound {self.upper_bound} is less than lower_bound {self.lower_bound}", "upper_bound"
            )
        if self.upper_bound > self.lower_bound:
            buckets = math.log(self.upper_bound / self.lower_bound) / math.log(1 + self.relative_precision)
            if buckets > MAX_DIGEST_BUCKETS:
                raise invalid(
                    f"the digest would need {buckets:.0f} buckets, more than {MAX_DIGEST_BUCKETS}",
                    "relative_precision",
                )
        return self


class TreeSchedulingOptions(SpecModel):
    """``scheduling_options_per_pool_tree.<tree>``: per-tree overrides of pool, weight and limits."""

    pool: str | None = Field(default=None, min_length=1)
    weight: float | None = Field(default=None, ge=MIN_SCHEDULABLE_WEIGHT, le=MAX_SCHEDULABLE_WEIGHT)
    resource_limits: LimitResources | None = None
    max_share_ratio: float | None = Field(default=None, ge=0, le=1)


class OperationSpec(SpecModel):
    """The operation spec options the scheduler reads (pool placement, weights, limits, preemption, memory).

    YTsaurus strategy options that pooltree does not implement (``support.SPEC_UNSUPPORTED``) are recognized
    (not in ``unrecognized_spec``) and reported by ``support.unsupported_spec_options``.
    """

    ALIASES: ClassVar[dict[str, str]] = {
        "max_unpreemptible_job_count": "max_unpreemptible_allocation_count",
        "max_unpreemptable_job_count": "max_unpreemptible_allocation_count",
        "fair_share_options_per_pool_tree": "scheduling_options_per_pool_tree",
    }
    KNOWN_EXTRA: ClassVar[frozenset[str]] = (
        KNOWN_SPEC_KEYS
        | frozenset(SPEC_UNSUPPORTED)
        | frozenset(OPERATION_UNSUPPORTED)
        | frozenset(SPEC_IMPLEMENTED_EXTRA)
    )

    pool: str | None = Field(default=None, min_length=1)
    """``None`` → the user name (YTsaurus)."""
    pool_trees: tuple[str, ...] | None = Field(default=None, min_length=1)
    """``None`` → the default pool tree."""
    weight: float | None = Field(default=None, ge=MIN_SCHEDULABLE_WEIGHT, le=MAX_SCHEDULABLE_WEIGHT)
    resource_limits: LimitResources = Field(default_factory=Resources.unlimited)
    max_share_ratio: float | None = Field(default=None, ge=0, le=1)
    scheduling_options_per_pool_tree: dict[str, TreeSchedulingOptions] = Field(default_factory=dict)
    preemption_mode: PreemptionMode = "normal"
    scheduling_tag_filter: TagFilterText = ""
    interruption_signal: str | None = None
    title: str | None = None
    enable_aggressive_starvation: bool = False
    fair_share_starvation_tolerance: float | None = Field(default=None, ge=0, le=1)
    """Only lowers the pool's effective tolerance (``operation_preemption``)."""
    fair_share_starvation_timeout: Duration | None = None
    """Only raises the pool's effective starvation timeout (``operation_preemption``)."""
    non_preemptible_resource_usage_threshold: GuaranteeResources | None = None
    """Only lowers the pool's effective threshold, resource by resource (``operation_preemption``)."""
    max_unpreemptible_allocation_count: int | None = Field(default=None, ge=0)
    """Caps the non-preemptible ``user_slots`` usage (``operation_preemption.specified_non_preemptible_threshold``)."""
    apply_specified_resource_limits_to_demand: bool = False
    is_gang: bool = False
    time_limit: Duration | None = None
    """An operation running longer fails with "Operation is running for too long, aborted"; seconds."""
    max_failed_job_count: int = Field(default=10, ge=0)
    job_speculation_timeout: Duration | None = None
    """A job running longer gets a speculative copy, unless its user job sets its own (seconds;
    `pooltree.controllers.speculative`)."""
    max_speculative_job_count_per_task: int = Field(default=10, ge=0)
    """Speculative requests in flight per task at most (YTsaurus's default 10; 0: none)."""
    try_avoid_duplicating_jobs: bool = False
    """No speculative copies at all (YTsaurus: the cap becomes 0)."""
    job_count: int | None = Field(default=None, ge=0)
    user_job_memory_digest_default_value: float = Field(default=0.5, gt=0, le=1)
    user_job_memory_digest_lower_bound: float = Field(default=0.05, gt=0, le=1)
    memory_reserve_factor: float | None = Field(default=None, gt=0, le=1)
    job_proxy_memory_digest: LogDigestConfig = Field(default_factory=LogDigestConfig)
    tasks: dict[str, VanillaTaskSpec] = Field(default_factory=dict)
    mapper: UserJobSpec | None = None
    reducer: UserJobSpec | None = None

    _signal = field_validator("interruption_signal")(classmethod(lambda cls, value: _check_signal(value)))

    @model_validator(mode="after")
    def _check_segment_options(self) -> OperationSpec:
        try:
            SegmentSpec.from_spec(self, "")
        except ConfigError as error:
            raise as_validation_error(error) from None
        return self

    @field_validator("pool_trees")
    @classmethod
    def _unique_trees(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError(f"pool trees are listed more than once: {list(value)}")
        return value

    @field_validator("tasks")
    @classmethod
    def _vanilla_limits(cls, value: dict[str, VanillaTaskSpec]) -> dict[str, VanillaTaskSpec]:
        # YTsaurus controller agent's vanilla_operation_options: max_task_count 100, max_total_job_count 100,000
        if len(value) > MAX_VANILLA_TASK_COUNT:
            raise ValueError(f"too many tasks: {len(value)} > max_task_count {MAX_VANILLA_TASK_COUNT}")
        total = sum(task.job_count for task in value.values())
        if total > MAX_VANILLA_TOTAL_JOB_COUNT:
            raise ValueError(
                f"too many jobs: {total} in all tasks > max_total_job_count {MAX_VANILLA_TOTAL_JOB_COUNT}"
            )
        return value

    def unrecognized_spec(self) -> dict[str, Any]:
        """Spec keys pooltree does not know, nested as in the spec (YTsaurus ``unrecognized_spec``); a copy of what
        the (frozen) spec's first call found (a start stores and alerts it: each walk was ~0.1 ms)."""
        found = self._unrecognized_found
        return copy.deepcopy(found) if found else {}

    @functools.cached_property
    def _unrecognized_found(self) -> dict[str, Any]:
        return self.unrecognized()

    def pool_trees_or(self, default_tree: str | None) -> tuple[str, ...]:
        """The trees the operation runs in: ``pool_trees`` or the default tree."""
        if self.pool_trees is not None:
            return self.pool_trees
        return (default_tree,) if default_tree is not None else ()

    def pool_for_tree(self, tree: str, user: str) -> str:
        """The pool named for ``tree``: per-tree option, else ``pool``, else the user name."""
        options = self.scheduling_options_per_pool_tree.get(tree)
        if options is not None and options.pool is not None:
            return options.pool
        return self.pool if self.pool is not None else user

    def weight_for_tree(self, tree: str) -> float | None:
        """Per-tree weight, else the spec weight; ``None`` → inferred or 1.0 by the runtime."""
        options = self.scheduling_options_per_pool_tree.get(tree)
        if options is not None and options.weight is not None:
            return options.weight
        return self.weight

    def resource_limits_for_tree(self, tree: str) -> Resources:
        """Per-tree ``resource_limits`` if given, else the spec's (unset resources unlimited)."""
        options = self.scheduling_options_per_pool_tree.get(tree)
        if options is not None and options.resource_limits is not None:
            return options.resource_limits
        return self.resource_limits

    def max_share_ratio_for_tree(self, tree: str) -> float:
        options = self.scheduling_options_per_pool_tree.get(tree)
        if options is not None and options.max_share_ratio is not None:
            return options.max_share_ratio
        return 1.0 if self.max_share_ratio is None else self.max_share_ratio

    def user_jobs(self) -> dict[str, UserJobSpec]:
        """Every user job of the spec by name: vanilla tasks, ``mapper``, ``reducer``."""
        jobs: dict[str, UserJobSpec] = dict(self.tasks)
        if self.mapper is not None:
            jobs.setdefault("mapper", self.mapper)
        if self.reducer is not None:
            jobs.setdefault("reducer", self.reducer)
        return jobs
