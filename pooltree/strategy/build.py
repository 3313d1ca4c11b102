"""Build the strategy's `SchedulingTree` from the pool tree runtime and one fair-share result."""

from __future__ import annotations

from typing import Any

import numpy as np

from pooltree.config import TagFilter
from pooltree.resources import Vector
from pooltree.strategy.model import SchedulingStatus
from pooltree.strategy.snapshot import ROOT_ID, ElementSpec, SchedulingTree, StrategyConfig


def _option(source: Any, name: str, default: Any = None) -> Any:
    if source is None:
        return default
    value = source.get(name) if isinstance(source, dict) else getattr(source, name, None)
    return default if value is None else value


def _limits(config: Any) -> Vector | None:
    limits = _option(config, "resource_limits")
    vector = getattr(limits, "vector", limits)
    if vector is None:
        return None
    array = np.asarray(vector, dtype=float)
    return array if np.any(np.isfinite(array)) else None


def scheduling_tree_from_runtime(
    pool_tree: Any,
    result: Any,
    total_resources: Vector,
    config: StrategyConfig | None = None,
) -> SchedulingTree:
    """Snapshot of ``pool_tree`` (``pooltree.tree.PoolTree``) with the shares of ``result`` (a FairShareResult).

    Pools pass their own starvation/preemption options (the snapshot resolves inheritance); operations pass
    their spec's preemption mode, scheduling tag filter, interruption signal and effective non-preemptible
    usage threshold. Elements missing from ``result`` get zero fair share.
    """
    name = pool_tree.name
    config = config or StrategyConfig.from_options(pool_tree.config, f"pool_trees.{name}.config")
    shares = result.elements
    elements: list[ElementSpec] = []
    for pool_name, pool in pool_tree.pools.items():
        share = shares.get(pool_name)
        pool_config = pool.config if pool.config is not None else pool.ephemeral_config
        element_id = ROOT_ID if pool.is_root else pool_name
        threshold = _option(pool_config, "non_preemptible_resource_usage_threshold")
        elements.append(
            ElementSpec(
                id=element_id,
                parent=None if pool.is_root else (ROOT_ID if pool.parent.is_root else pool.parent.name),
                kind="pool",
                fair_share=np.array(share.fair_share, dtype=float) if share is not None else np.zeros(5),
                demand_share=np.array(share.demand_share, dtype=float) if share is not None else None,
                scheduling_status=SchedulingStatus(share.scheduling_status) if share is not None else None,
                specified_resource_limits=None if pool.is_root else _limits(pool_config),
                fifo=pool.mode == "fifo",
                fair_share_starvation_tolerance=None
                if pool.is_root
                else _option(pool_config, "fair_share_starvation_tolerance"),
                fair_share_starvation_timeout=None
                if pool.is_root
                else _option(pool_config, "fair_share_starvation_timeout"),
                enable_aggressive_starvation=_option(pool_config, "enable_aggressive_starvation"),
                non_preemptible_resource_usage_threshold=None
                if pool.is_root or threshold is None
                else pool_tree.effective_parameters(pool_name).non_preemptible_resource_usage_threshold,
                allow_normal_preemption=_option(pool_config, "allow_normal_preemption"),
                allow_aggressive_preemption=_option(pool_config, "allow_aggressive_preemption"),
            )
        )
    for op_id, op in pool_tree.operations.items():
        share = shares.get(op_id)
        spec = op.spec
        tag_text = str(_option(spec, "scheduling_tag_filter", "") or "")
        tag_filter = (
            TagFilter.parse(tag_text, f"operations.{op_id}.spec.scheduling_tag_filter") if tag_text else None
        )
        params = pool_tree.operation_effective_parameters(op_id)
        elements.append(
            ElementSpec(
                id=op_id,
                parent=ROOT_ID if op.pool.is_root else op.pool.name,
                kind="operation",
                fair_share=np.array(share.fair_share, dtype=float) if share is not None else np.zeros(5),
                demand_share=np.array(share.demand_share, dtype=float) if share is not None else None,
                scheduling_status=SchedulingStatus(share.scheduling_status) if share is not None else None,
                specified_resource_limits=_limits({"resource_limits": op.resource_limits}),
                weight=float(share.weight) if share is not None else 1.0,
                fifo_index=int(share.fifo_index or 0) if share is not None else 0,
                schedulable=bool(op.running and not op.suspended),
                start_time=float(op.start_time),
                enable_aggressive_starvation=True
                if _option(spec, "enable_aggressive_starvation", False)
                else None,
                non_preemptible_resource_usage_threshold=params.non_preemptible_resource_usage_threshold,
                preemption_mode=str(_option(spec, "preemption_mode", "normal")),
                scheduling_tag_filter=tag_filter,
                interruption_signal=_option(spec, "interruption_signal"),
            )
        )
    return SchedulingTree(total_resources, elements, config, name=name)
