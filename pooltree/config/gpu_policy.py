"""The tree's ``policy_kind`` and ``gpu_scheduling_policy`` options, as YTsaurus reads them.

YTsaurus's strategy has two scheduling policies: ``classic`` (the heartbeat stages, with optional
``scheduling_segments``) and ``gpu`` (an assignment planner: ``strategy/policy/gpu`` in its code). A tree runs
the GPU policy when it sets ``policy_kind: gpu`` and ``gpu_scheduling_policy: {mode: allocating}``; with
``mode: dry_run`` the planner runs beside the classic policy and only shows its plan; ``noop`` (the default) runs
nothing. The options are ``TGpuSchedulingPolicyConfig``. Durations are YTsaurus milliseconds or strings with
units; the parsed values are seconds. The algorithm lives in ``pooltree/strategy/gpu_policy.py``.

The defaults of the durations could not be read from YTsaurus's public code; the ones here are pooltree's
(the classic segments' equivalents where one exists: ``module_reconsideration_timeout``,
``initialization_timeout``, ``priority_module_binding_timeout`` as the segments'
``priority_module_assignment_timeout``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pooltree.errors import ConfigError, join_path
from pooltree.resources import parse_duration

POLICY_KINDS = ("classic", "gpu")
GPU_POLICY_MODES = ("noop", "dry_run", "allocating")
MODULE_TYPES = ("data_center", "infiniband_cluster")
_DURATIONS = {
    "plan_update_period": 1.0,
    "module_reconsideration_timeout": 1200.0,
    "priority_module_binding_timeout": 900.0,
    "full_host_aggressive_preemption_timeout": 600.0,
    "min_assignment_preemptible_duration": 60.0,
    "initialization_timeout": 0.0,
}
_KNOWN = set(_DURATIONS) | {"mode", "module_type", "modules", "testing_options"}


@dataclass(frozen=True)
class GpuPolicyConfig:
    """A tree's ``gpu_scheduling_policy`` (YTsaurus's ``TGpuSchedulingPolicyConfig``) and its ``policy_kind``."""

    policy_kind: str = "classic"
    mode: str = "noop"
    plan_update_period: float = 1.0
    module_reconsideration_timeout: float = 1200.0
    priority_module_binding_timeout: float = 900.0
    full_host_aggressive_preemption_timeout: float = 600.0
    min_assignment_preemptible_duration: float = 60.0
    initialization_timeout: float = 0.0
    """No planning before this long after the policy starts (YTsaurus waits for its persistent state)."""
    module_type: str = "data_center"
    modules: tuple[str, ...] = ()

    @property
    def planning(self) -> bool:
        """Whether the planner runs (``dry_run`` or ``allocating``)."""
        return self.mode != "noop"

    @property
    def allocating(self) -> bool:
        """Whether the plan schedules the tree's allocations (``policy_kind: gpu`` and ``mode: allocating``)."""
        return self.policy_kind == "gpu" and self.mode == "allocating"

    @classmethod
    def from_tree_options(cls, policy_kind: Any, raw: Any, path: str) -> GpuPolicyConfig:
        """Validate ``policy_kind`` and ``gpu_scheduling_policy``; errors name the field."""
        kind = "classic" if policy_kind is None else policy_kind
        if kind not in POLICY_KINDS:
            raise ConfigError(join_path(path, "policy_kind"), f"expected one of classic, gpu, got {kind!r}")
        where = join_path(path, "gpu_scheduling_policy")
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ConfigError(where, f"expected a map, got {type(raw).__name__}")
        values: dict[str, Any] = {"policy_kind": kind}
        for key, value in raw.items():
            name = str(key)
            at = join_path(where, name)
            if name not in _KNOWN:
                raise ConfigError(at, "unknown GPU scheduling policy option")
            if name in _DURATIONS:
                seconds = parse_duration(value, at)
                if seconds < 0:
                    raise ConfigError(at, "must be a non-negative duration")
                values[name] = seconds
            elif name == "mode":
                values[name] = _choice(value, GPU_POLICY_MODES, at)
            elif name == "module_type":
                values[name] = _choice(value, MODULE_TYPES, at)
            elif name == "modules":
                if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
                    raise ConfigError(at, "expected a list of non-empty module names")
                values[name] = tuple(sorted(dict.fromkeys(value)))
            # testing_options: YTsaurus's testing delays, no effect here
        if values.get("plan_update_period", 1.0) <= 0:
            raise ConfigError(join_path(where, "plan_update_period"), "must be a positive duration")
        return cls(**values)


def _choice(value: Any, allowed: tuple[str, ...], where: str) -> str:
    if value not in allowed:
        raise ConfigError(where, f"expected one of {', '.join(allowed)}, got {value!r}")
    return str(value)
