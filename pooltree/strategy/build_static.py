"""The static part of a strategy element's spec (everything but its shares), computed from the pool tree runtime's
configuration objects (kept in the tree's projection entries, `pooltree.tree.projection`, by the key they are
computed from; `pooltree.strategy.build`).

A pool's part reads its config (or ephemeral config) and effective parameters; an operation's reads its spec,
limits, pool and running/suspended flags. Both are plain dicts turned into an `ElementSpec` with the element's
shares by `_spec`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING
from dataclasses import fields as dataclass_fields
from functools import partial
from typing import Any

import numpy as np

from pooltree.config import TagFilter
from pooltree.config.operation_preemption import (
    specified_non_preemptible_threshold,
    specified_starvation_timeout,
    specified_starvation_tolerance,
)
from pooltree.resources import Vector
from pooltree.strategy.limits_tolerance import overcommit_tolerance
from pooltree.strategy.model import SchedulingStatus
from pooltree.strategy.snapshot import ROOT_ID, ElementSpec
from pooltree.tree.delta import RuntimeTree
from pooltree.tree.elements import PoolElement, TreeOperation

_BELOW = SchedulingStatus.BELOW_FAIR_SHARE
_NORMAL = SchedulingStatus.NORMAL


def _option(source: Any, name: str, default: Any = None) -> Any:
    if source is None:
        return default
    value = source.get(name) if isinstance(source, dict) else getattr(source, name, None)
    return default if value is None else value


def _frozen(array: Vector | None) -> Vector | None:
    """A read-only copy: cached vectors are shared by the specs of many updates, nobody may change them."""
    if array is None:
        return None
    out = np.array(array, dtype=float)
    out.flags.writeable = False
    return out


def _limits(config: Any) -> Vector | None:
    limits = _option(config, "resource_limits")
    vector = getattr(limits, "vector", limits)
    if vector is None:
        return None
    array = np.asarray(vector, dtype=float)
    return _frozen(array) if np.any(np.isfinite(array)) else None


_SPEC_DEFAULTS: dict[str, Any] = {
    spec_field.name: spec_field.default
    for spec_field in dataclass_fields(ElementSpec)
    if spec_field.default is not MISSING
}
"""Defaults of `ElementSpec`'s fields with plain defaults."""
_SPEC_FACTORIES: tuple[tuple[str, Any], ...] = tuple(
    (spec_field.name, spec_field.default_factory)
    for spec_field in dataclass_fields(ElementSpec)
    if spec_field.default_factory is not MISSING
)
"""Fields with a default factory (``fair_share``, always given here; any other gets its factory's value)."""


def _spec(static: dict[str, Any], **shares: Any) -> ElementSpec:
    """``ElementSpec(**static, **shares)`` without the keyword-argument call (one per element per update)."""
    spec = object.__new__(ElementSpec)
    values = spec.__dict__
    values.update(_SPEC_DEFAULTS)
    values.update(static)
    values.update(shares)
    for name, factory in _SPEC_FACTORIES:
        if name not in values:
            values[name] = factory()
    return spec


def _pool_static(pool_tree: RuntimeTree, pool_name: str, pool: PoolElement) -> dict[str, Any]:
    pool_config = pool.config if pool.config is not None else pool.ephemeral_config
    threshold = _option(pool_config, "non_preemptible_resource_usage_threshold")
    return {
        "id": ROOT_ID if pool.is_root else pool_name,
        "parent": None if pool.is_root else (ROOT_ID if pool.parent.is_root else pool.parent.name),
        "kind": "pool",
        "specified_resource_limits": None if pool.is_root else _limits(pool_config),
        "fifo": pool.mode == "fifo",
        "fair_share_starvation_tolerance": None
        if pool.is_root
        else _option(pool_config, "fair_share_starvation_tolerance"),
        "fair_share_starvation_timeout": None
        if pool.is_root
        else _option(pool_config, "fair_share_starvation_timeout"),
        "enable_aggressive_starvation": _option(pool_config, "enable_aggressive_starvation"),
        "non_preemptible_resource_usage_threshold": None
        if pool.is_root or threshold is None
        else _frozen(pool_tree.effective_parameters(pool_name).non_preemptible_resource_usage_threshold),
        "allow_normal_preemption": _option(pool_config, "allow_normal_preemption"),
        "allow_aggressive_preemption": _option(pool_config, "allow_aggressive_preemption"),
        "use_pool_satisfaction_for_scheduling": _option(pool_config, "use_pool_satisfaction_for_scheduling"),
        "resource_limits_overcommit_tolerance": None if pool.is_root else overcommit_tolerance(pool_config),
    }


def _operation_static(pool_tree: RuntimeTree, op_id: str, op: TreeOperation) -> dict[str, Any]:
    spec = op.spec
    tag_text = str(_option(spec, "scheduling_tag_filter", "") or "")
    tag_filter = (
        TagFilter.parse(tag_text, f"operations.{op_id}.spec.scheduling_tag_filter") if tag_text else None
    )
    is_gang = bool(_option(spec, "is_gang", False))
    return {
        "id": op_id,
        "parent": ROOT_ID if op.pool.is_root else op.pool.name,
        "kind": "operation",
        "specified_resource_limits": _limits({"resource_limits": op.resource_limits}),
        "schedulable": bool(op.running and not op.suspended),
        "start_time": float(op.start_time),
        "enable_aggressive_starvation": True
        if _option(spec, "enable_aggressive_starvation", False)
        else None,
        # the spec's own values: the settings combine them with the pool's (config.operation_preemption)
        "fair_share_starvation_tolerance": specified_starvation_tolerance(spec),
        "fair_share_starvation_timeout": specified_starvation_timeout(spec),
        "non_preemptible_resource_usage_threshold": _frozen(specified_non_preemptible_threshold(spec)),
        "preemption_mode": str(_option(spec, "preemption_mode", "normal")),
        "scheduling_tag_filter": tag_filter,
        "interruption_signal": _option(spec, "interruption_signal"),
        "is_gang": is_gang,
        "allow_aggressive_preemption": operation_aggressive_preemption_allowed(pool_tree, spec),
    }


def operation_aggressive_preemption_allowed(pool_tree: RuntimeTree, spec: Any) -> bool | None:
    """YTsaurus ``IsAggressivePreemptionAllowed`` of an operation (its orchid's ``aggressive_preemption_allowed``):
    a gang operation is not aggressively preemptible unless the tree allows it
    (``allow_aggressive_preemption_for_gang_operations``, default true); otherwise None, it inherits."""
    return _aggressive_preemption_allowed(
        spec, bool(pool_tree.config.allow_aggressive_preemption_for_gang_operations)
    )


def aggressive_preemption_rule(pool_tree: RuntimeTree) -> Callable[[Any], bool | None]:
    """`operation_aggressive_preemption_allowed` for many operations of one tree (the read snapshot's capture, under
    the scheduling lock): the tree's option read once, and while the tree allows gang operations' aggressive
    preemption (the default) every answer is None, with no spec read."""
    if pool_tree.config.allow_aggressive_preemption_for_gang_operations:
        return _inherits
    return partial(_aggressive_preemption_allowed, gang_aggressive=False)


def _aggressive_preemption_allowed(spec: Any, gang_aggressive: bool) -> bool | None:
    return False if not gang_aggressive and bool(_option(spec, "is_gang", False)) else None


def _inherits(spec: Any) -> None:
    return None


# CPython (3.11+) keeps an instance's attributes inline only while the class's shared key table knows their
# names; the table stops growing after a few dozen instances made without them (`_spec` assigns ``__dict__``).
# One instance through ``__init__`` before any `_spec` enters every field's name, in declaration order.
ElementSpec(id=ROOT_ID, parent=None)
