"""The tree's ``default_gpu_full_host_preemption`` map (YTsaurus's ``TStrategyDefaultGpuFullHostPreemptionConfig``);
the rule is ``pooltree/strategy/full_host_preemption.py``.

YTsaurus's defaults could not be read from its public code; pooltree's: off, ``timeout`` 10 min (as the GPU
policy's ``full_host_aggressive_preemption_timeout`` here), ``max_preemption_penalty`` 0 GPU-seconds (only
allocations without non-preemptible progress are cleared unless the tree allows more).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pooltree.config.base import check_option_map, option_flag, raw_extras
from pooltree.errors import ConfigError, join_path
from pooltree.resources import parse_duration

OPTION = "default_gpu_full_host_preemption"


@dataclass(frozen=True)
class DefaultGpuFullHostPreemptionConfig:
    """``{enable, timeout, max_preemption_penalty}``: ``timeout`` in seconds, the penalty in GPU-seconds."""

    enable: bool = False
    timeout: float = 600.0
    max_preemption_penalty: float = 0.0

    @classmethod
    def parse(cls, raw: Any, path: str = OPTION) -> DefaultGpuFullHostPreemptionConfig:
        if raw is None:
            return cls()
        raw = check_option_map(raw, path, ("enable", "timeout", "max_preemption_penalty"))
        enable = option_flag(raw, "enable", path)
        timeout = (
            cls.timeout
            if raw.get("timeout") is None
            else parse_duration(raw["timeout"], join_path(path, "timeout"))
        )
        penalty = raw.get("max_preemption_penalty", 0.0)
        if isinstance(penalty, bool) or not isinstance(penalty, int | float) or not penalty >= 0:
            raise ConfigError(
                join_path(path, "max_preemption_penalty"), f"expected a number >= 0, got {penalty!r}"
            )
        return cls(enable, timeout, float(penalty))


def full_host_preemption_config(tree_config: Any, path: str) -> DefaultGpuFullHostPreemptionConfig:
    """The tree config's ``default_gpu_full_host_preemption`` (kept raw in the model's extras), validated."""
    extra = raw_extras(tree_config)
    return DefaultGpuFullHostPreemptionConfig.parse(extra.get(OPTION), join_path(path, OPTION))
