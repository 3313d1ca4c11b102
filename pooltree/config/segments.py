"""The tree's ``scheduling_segments`` option and the spec's ``scheduling_segment*`` options, as YTsaurus reads them.

YTsaurus's classic scheduling policy splits a GPU tree's nodes into *segments*: ``default`` for every operation
and ``large_gpu`` for full-host operations (8 GPUs per allocation), the latter split further by *module* (a data
center or an InfiniBand cluster) so that a full-host gang runs inside one network module. The options below are
``TStrategySchedulingSegmentsConfig`` (tree) and the strategy spec's ``scheduling_segment`` /
``scheduling_segment_modules``; defaults are YTsaurus's. Durations are YTsaurus milliseconds or strings with units;
the parsed values are seconds. The algorithm lives in ``pooltree/strategy/segments.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pooltree.errors import ConfigError, join_path
from pooltree.resources import parse_duration

DEFAULT_SEGMENT = "default"
LARGE_GPU_SEGMENT = "large_gpu"
SEGMENTS = (DEFAULT_SEGMENT, LARGE_GPU_SEGMENT)
MODULE_AWARE_SEGMENTS = frozenset({LARGE_GPU_SEGMENT})
MODES = ("disabled", "large_gpu")
MODULE_TYPES = ("data_center", "infiniband_cluster")
ASSIGNMENT_HEURISTICS = ("max_remaining_capacity", "min_remaining_feasible_capacity")
PREEMPTION_HEURISTICS = ("greedy",)
FULL_HOST_GPU_DEMAND = 8
"""YTsaurus's ``FullHostGpuAllocationGpuDemand``: an allocation of this many GPUs takes a whole host."""

INFINIBAND_CLUSTER_TAG_PREFIX = "infiniband_cluster:"
"""How a node's InfiniBand cluster appears among its tags (``pooltree node --infiniband-cluster``)."""


def module_from_tags(tags: Iterable[str], module_type: str, modules: Iterable[str]) -> str | None:
    """A node's module of ``module_type`` among ``modules``: its tag naming a data center, or its
    ``infiniband_cluster:NAME`` tag; None when it has neither (the first in tag order when several match)."""
    known = set(modules)
    for tag in sorted(tags):
        if module_type == "data_center":
            if tag in known:
                return tag
        elif (
            tag.startswith(INFINIBAND_CLUSTER_TAG_PREFIX)
            and tag[len(INFINIBAND_CLUSTER_TAG_PREFIX) :] in known
        ):
            return tag[len(INFINIBAND_CLUSTER_TAG_PREFIX) :]
    return None


_ALIASES = {
    "satisfaction_margins": "reserve_fair_resource_amount",
    "data_center_reconsideration_timeout": "module_reconsideration_timeout",
    "data_center_assignment_heuristic": "module_assignment_heuristic",
}
_DURATIONS = {
    "initialization_timeout": 300.0,
    "manage_period": 10.0,
    "unsatisfied_segments_rebalancing_timeout": 300.0,
    "module_reconsideration_timeout": 1200.0,
    "priority_module_assignment_timeout": 900.0,
}
_FLAGS = {
    "enable_infiniband_cluster_tag_validation": False,
    "allow_only_gang_operations_in_large_segment": False,
    "enable_detailed_logs": False,
    "enable_module_reset_on_zero_fair_share_and_usage": False,
}
_KNOWN = (
    set(_DURATIONS)
    | set(_FLAGS)
    | {
        "mode",
        "reserve_fair_resource_amount",
        "data_centers",
        "infiniband_clusters",
        "module_type",
        "module_assignment_heuristic",
        "module_preemption_heuristic",
        "module_oversatisfaction_threshold",
        "module_share_to_network_priority",
    }
)


@dataclass(frozen=True)
class SchedulingSegmentsConfig:
    """A tree's ``scheduling_segments`` (YTsaurus's ``TStrategySchedulingSegmentsConfig``), seconds for durations."""

    mode: str = "disabled"
    reserve_fair_resource_amount: Mapping[str, Any] = field(default_factory=dict)
    """Segment -> GPUs kept for it beyond its fair amount: a number (``default``) or module -> number."""
    initialization_timeout: float = 300.0
    manage_period: float = 10.0
    unsatisfied_segments_rebalancing_timeout: float = 300.0
    module_reconsideration_timeout: float = 1200.0
    priority_module_assignment_timeout: float = 900.0
    data_centers: tuple[str, ...] = ()
    infiniband_clusters: tuple[str, ...] = ()
    module_type: str = "data_center"
    module_assignment_heuristic: str = "max_remaining_capacity"
    module_preemption_heuristic: str = "greedy"
    module_oversatisfaction_threshold: float | None = None
    enable_infiniband_cluster_tag_validation: bool = False
    allow_only_gang_operations_in_large_segment: bool = False
    enable_detailed_logs: bool = False
    enable_module_reset_on_zero_fair_share_and_usage: bool = False

    @property
    def enabled(self) -> bool:
        return self.mode != "disabled"

    @property
    def modules(self) -> tuple[str, ...]:
        """The configured modules of the ``module_type`` (sorted: every walk over them is deterministic)."""
        return tuple(
            sorted(self.data_centers if self.module_type == "data_center" else self.infiniband_clusters)
        )

    def reserve(self, segment: str, module: str | None = None) -> float:
        value = self.reserve_fair_resource_amount.get(segment)
        if value is None:
            return 0.0
        if segment in MODULE_AWARE_SEGMENTS:
            return float(value.get(module, 0.0)) if isinstance(value, Mapping) else 0.0
        return float(value)

    @classmethod
    def from_options(cls, raw: Any, path: str = "scheduling_segments") -> SchedulingSegmentsConfig:
        """Validate a raw ``scheduling_segments`` map; errors name the field."""
        if raw is None:
            return cls()
        if isinstance(raw, SchedulingSegmentsConfig):
            return raw
        if not isinstance(raw, Mapping):
            raise ConfigError(path, f"expected a map, got {type(raw).__name__}")
        values: dict[str, Any] = {}
        for key, value in raw.items():
            name = _ALIASES.get(str(key), str(key))
            where = join_path(path, str(key))
            if name not in _KNOWN:
                raise ConfigError(where, "unknown scheduling segments option")
            if name in values:
                raise ConfigError(where, f"given twice (as {name!r} and an alias)")
            values[name] = _parse_value(name, value, where)
        config = cls(**values)
        config._check(path)
        return config

    def _check(self, path: str) -> None:
        for segment, value in self.reserve_fair_resource_amount.items():
            where = join_path(join_path(path, "reserve_fair_resource_amount"), segment)
            if segment not in SEGMENTS:
                raise ConfigError(where, f"unknown segment; known: {', '.join(SEGMENTS)}")
            if segment in MODULE_AWARE_SEGMENTS:
                if not isinstance(value, Mapping):
                    raise ConfigError(where, "expected a map of module -> amount for a module-aware segment")
                for module in value:
                    if module not in self.modules:
                        raise ConfigError(
                            join_path(where, module),
                            f"reserve fair resource amount can be specified only for configured modules "
                            f"{list(self.modules)}",
                        )


def _parse_value(name: str, value: Any, where: str) -> Any:
    if name in _DURATIONS:
        seconds = parse_duration(value, where)
        if seconds < 0:
            raise ConfigError(where, "must be a non-negative duration")
        return seconds
    if name in _FLAGS:
        if not isinstance(value, bool):
            raise ConfigError(where, f"expected a boolean, got {value!r}")
        return value
    if name == "mode":
        return _choice(value, MODES, where)
    if name == "module_type":
        return _choice(value, MODULE_TYPES, where)
    if name == "module_assignment_heuristic":
        return _choice(value, ASSIGNMENT_HEURISTICS, where)
    if name == "module_preemption_heuristic":
        return _choice(value, PREEMPTION_HEURISTICS, where)
    if name in ("data_centers", "infiniband_clusters"):
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(where, "expected a list of non-empty names")
        return tuple(dict.fromkeys(value))
    if name == "module_oversatisfaction_threshold":
        return None if value is None else _amount(value, where)
    if name == "module_share_to_network_priority":
        return value  # network priorities are an exec-node concern: accepted, no effect here
    # reserve_fair_resource_amount: {segment: amount} or {segment: {module: amount}}
    if not isinstance(value, Mapping):
        raise ConfigError(where, "expected a map of segment -> amount")
    parsed: dict[str, Any] = {}
    for segment, amount in value.items():
        inner = join_path(where, str(segment))
        if isinstance(amount, Mapping):
            parsed[str(segment)] = {str(m): _amount(a, join_path(inner, str(m))) for m, a in amount.items()}
        else:
            parsed[str(segment)] = _amount(amount, inner)
    return parsed


def _choice(value: Any, allowed: tuple[str, ...], where: str) -> str:
    if value not in allowed:
        raise ConfigError(where, f"expected one of {', '.join(allowed)}, got {value!r}")
    return str(value)


def _amount(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigError(where, f"expected a non-negative amount, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class SegmentSpec:
    """An operation spec's segment options: ``scheduling_segment`` and ``scheduling_segment_modules``."""

    segment: str | None = None
    modules: tuple[str, ...] | None = None

    @classmethod
    def from_spec(cls, spec: Any, path: str = "spec") -> SegmentSpec:
        """Read them from an ``OperationSpec`` (kept in its extras) or a plain map; errors name the field."""
        if spec is None:
            return cls()
        if isinstance(spec, Mapping):
            source: Mapping[str, Any] = spec
        else:
            source = {**(getattr(spec, "model_extra", None) or {})}
        segment = source.get("scheduling_segment")
        if segment is not None and segment not in SEGMENTS:
            raise ConfigError(
                join_path(path, "scheduling_segment"),
                f"expected one of {', '.join(SEGMENTS)}, got {segment!r}",
            )
        modules = None
        for key in ("scheduling_modules", "scheduling_segment_modules", "scheduling_segment_data_centers"):
            if source.get(key) is not None:
                value = source[key]
                if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
                    raise ConfigError(join_path(path, key), "expected a list of module names")
                modules = tuple(dict.fromkeys(value))
                break
        return cls(segment=segment, modules=modules)
