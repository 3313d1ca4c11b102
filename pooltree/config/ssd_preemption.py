"""The tree's ``ssd_priority_preemption`` map and the pool's ``allow_regular_allocations_on_ssd_nodes``
(YTsaurus's ``TStrategySsdPriorityPreemptionConfig`` and pool preset option); the rule is
``pooltree/strategy/ssd_preemption.py``.

A disk request names its medium (``disk_request: {disk_space, medium_name}`` of a user job; without
``medium_name`` the job uses the node's ``default`` medium, as in YTsaurus). pooltree keeps no medium directory,
so every medium name is accepted (YTsaurus raises the scheduler alert "Config contains unknown SSD priority
preemption media" for names its master does not know).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pooltree.config.base import check_option_map, option_flag, raw_extras
from pooltree.config.tags import TagFilter
from pooltree.errors import ConfigError, join_path

DEFAULT_MEDIUM = "default"
"""The medium of a disk request that names none (YTsaurus's default medium)."""

POOL_OPTION = "allow_regular_allocations_on_ssd_nodes"
POOL_OPTION_ALIAS = "allow_regular_jobs_on_ssd_nodes"
"""The pool option (default true) and its old name: false keeps the pool's operations that need no SSD medium
off the tree's SSD nodes while SSD priority preemption is on."""


@dataclass(frozen=True)
class SsdPriorityPreemptionConfig:
    """The tree config's ``ssd_priority_preemption`` (YTsaurus's defaults: off, no filter, no media)."""

    enable: bool = False
    node_tag_filter: TagFilter = field(default_factory=TagFilter)
    medium_names: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, raw: Any, path: str = "ssd_priority_preemption") -> SsdPriorityPreemptionConfig:
        """Validate the map; ``enable`` with an empty ``node_tag_filter`` is refused, as YTsaurus refuses it."""
        if raw is None:
            return cls()
        raw = check_option_map(raw, path, ("enable", "node_tag_filter", "medium_names"))
        enable = option_flag(raw, "enable", path)
        tag_filter = TagFilter.parse(raw.get("node_tag_filter"), join_path(path, "node_tag_filter"))
        names = raw.get("medium_names", [])
        if isinstance(names, str) or not isinstance(names, list | tuple):
            raise ConfigError(join_path(path, "medium_names"), "expected a list of medium names")
        for index, name in enumerate(names):
            if not isinstance(name, str) or not name:
                raise ConfigError(f"{join_path(path, 'medium_names')}[{index}]", "expected a medium name")
        if enable and tag_filter.is_empty:
            raise ConfigError(
                join_path(path, "node_tag_filter"),
                "SSD priority preemption requires a non-empty node tag filter",
            )
        return cls(enable, tag_filter, frozenset(names))


def ssd_preemption_config(tree_config: Any, path: str) -> SsdPriorityPreemptionConfig:
    """The tree config's ``ssd_priority_preemption`` (kept raw in the model's extras), validated."""
    extra = raw_extras(tree_config)
    return SsdPriorityPreemptionConfig.parse(
        extra.get("ssd_priority_preemption"), join_path(path, "ssd_priority_preemption")
    )


def regular_allocations_allowed(pool_config: Any, path: str = "") -> bool:
    """A pool's own ``allow_regular_allocations_on_ssd_nodes`` (alias ``allow_regular_jobs_on_ssd_nodes``)."""
    extra: Mapping[str, Any] = getattr(pool_config, "model_extra", None) or {}
    for name in (POOL_OPTION, POOL_OPTION_ALIAS):
        value = extra.get(name)
        if value is not None:
            if not isinstance(value, bool):
                raise ConfigError(join_path(path, name), f"expected a boolean, got {value!r}")
            return value
    return True
