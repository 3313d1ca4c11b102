"""The tree config's ``packing`` map (YTsaurus's ``TStrategyPackingConfig``); the rule is
``pooltree/strategy/packing.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pooltree.config.base import check_option_map, option_flag
from pooltree.errors import ConfigError, join_path
from pooltree.resources import parse_duration

METRICS = ("angle", "angle_length")


@dataclass(frozen=True)
class PackingConfig:
    """The tree config's ``packing`` map (YTsaurus's defaults)."""

    enable: bool = False
    metric: str = "angle_length"
    max_better_past_snapshots: int = 2
    absolute_metric_value_tolerance: float = 0.05
    relative_metric_value_tolerance: float = 1.5
    min_window_size_for_schedule: int = 0
    max_heartbeat_window_size: int = 10
    max_heartbeat_age: float = 3600.0
    """Seconds."""

    @classmethod
    def parse(cls, raw: Any, path: str = "packing") -> PackingConfig:
        if raw is None:
            return cls()
        raw = check_option_map(raw, path, cls.__dataclass_fields__)
        enable = option_flag(raw, "enable", path)
        metric = raw.get("metric", "angle_length")
        if metric not in METRICS:
            raise ConfigError(join_path(path, "metric"), f"expected one of {list(METRICS)}, got {metric!r}")
        ints = {}
        for name, default, minimum in (
            ("max_better_past_snapshots", 2, None),
            ("min_window_size_for_schedule", 0, 0),
            ("max_heartbeat_window_size", 10, 0),
        ):
            value = raw.get(name, default)
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or (minimum is not None and value < minimum)
            ):
                bound = f" >= {minimum}" if minimum is not None else ""
                raise ConfigError(join_path(path, name), f"expected an integer{bound}, got {value!r}")
            ints[name] = value
        floats = {}
        for name, default, minimum in (
            ("absolute_metric_value_tolerance", 0.05, 0.0),
            ("relative_metric_value_tolerance", 1.5, 1.0),
        ):
            value = raw.get(name, default)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= minimum:
                raise ConfigError(join_path(path, name), f"expected a number >= {minimum}, got {value!r}")
            floats[name] = float(value)
        age = parse_duration(raw.get("max_heartbeat_age", 3600000), join_path(path, "max_heartbeat_age"))
        return cls(
            enable,
            metric,
            ints["max_better_past_snapshots"],
            floats["absolute_metric_value_tolerance"],
            floats["relative_metric_value_tolerance"],
            ints["min_window_size_for_schedule"],
            ints["max_heartbeat_window_size"],
            age,
        )
