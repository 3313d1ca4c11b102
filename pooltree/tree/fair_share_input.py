"""Build the fair-share update's input (``pooltree.fairshare.model``) from one pool tree at run time (§b.1).

Controllers own operation usage and pending allocations, so the caller hands them in (a mapping or a
callback: operation id → ``(usage, needed)``, absolute vectors; ``needed`` is the sum of the resources of the
operation's pending allocations in this tree). Demand = usage + needed for an operation that runs in the tree and is
not suspended; otherwise demand = usage and the operation is not schedulable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from pooltree.config import TagFilter
from pooltree.fairshare.model import IntegralGuarantees, Operation, Pool, UpdateSettings
from pooltree.resources import USER_SLOTS, Vector, zeros
from pooltree.tree.elements import PoolElement, TreeOperation
from pooltree.tree.pool_tree import PoolTree, _spec_option

OperationResources = Mapping[str, tuple[Vector, Vector]] | Callable[[str], tuple[Vector, Vector] | None]
"""Operation id → (usage, needed): a mapping (missing ids count as idle) or a callback returning None for idle."""

NodeResources = Mapping[str, tuple[Iterable[str], Vector]]
"""Node address → (tags, resource limits) for the nodes of one tree (used for scheduling tag filters)."""


def update_settings(tree: PoolTree) -> UpdateSettings:
    """The tree-level options the fair-share update reads."""
    cfg = tree.config
    return UpdateSettings(
        main_resource=cfg.main_resource,
        infer_weight_from_guarantees_share_multiplier=cfg.infer_weight_from_guarantees_share_multiplier,
        integral_smooth_period=float(cfg.integral_guarantees.smooth_period),
        integral_pool_capacity_saturation_period=float(
            cfg.integral_guarantees.pool_capacity_saturation_period
        ),
        relaxed_share_multiplier_limit=float(cfg.integral_guarantees.relaxed_share_multiplier_limit),
        enable_step_function_for_gang_operations=bool(cfg.enable_step_function_for_gang_operations),
        enable_improved_fair_share_by_fit_factor_computation=bool(
            cfg.enable_improved_fair_share_by_fit_factor_computation
        ),
        enable_improved_fair_share_by_fit_factor_computation_distribution_gap=bool(
            cfg.enable_improved_fair_share_by_fit_factor_computation_distribution_gap
        ),
        fifo_pool_scheduling_order=cfg.fifo_pool_scheduling_order,
    )


class _TagLimits:
    """Sum of node limits matching a tree filter AND an element filter (cached per filter text)."""

    def __init__(self, nodes: NodeResources | None):
        self._nodes = {
            address: (frozenset(tags), np.asarray(limits, dtype=float))
            for address, (tags, limits) in (nodes or {}).items()
        }
        self._cache: dict[str, Vector] = {}

    def limits(self, filter_text: str) -> Vector | None:
        if not filter_text or not self._nodes:
            return None
        cached = self._cache.get(filter_text)
        if cached is None:
            tag_filter = TagFilter.parse(filter_text, "scheduling_tag_filter")
            if tag_filter.is_empty:
                return None
            cached = zeros()
            for tags, limits in self._nodes.values():
                if tag_filter.matches(tags):
                    cached = cached + limits
            self._cache[filter_text] = cached
        return cached.copy()


def _resources_of(source: OperationResources, operation_id: str) -> tuple[Vector, Vector]:
    if callable(source):
        found = source(operation_id)
    else:
        found = source.get(operation_id)
    if found is None:
        return zeros(), zeros()
    usage, needed = found
    return np.array(usage, dtype=float), np.array(needed, dtype=float)


def _tree_option(spec: Any, tree: str, name: str) -> Any:
    per_tree = _spec_option(spec, "scheduling_options_per_pool_tree", None)
    if per_tree:
        options = per_tree.get(tree)
        if options is not None:
            value = _spec_option(options, name, None)
            if value is not None:
                return value
    return _spec_option(spec, name, None)


def _operation_element(
    tree: PoolTree, op: TreeOperation, tolerance: float, source: OperationResources, tags: _TagLimits
) -> Operation:
    usage, needed = _resources_of(source, op.id)
    schedulable = op.running and not op.suspended
    demand = usage + needed if schedulable else usage.copy()
    max_share_ratio = _tree_option(op.spec, tree.name, "max_share_ratio")
    return Operation(
        id=op.id,
        weight=op.weight,
        specified_resource_limits=np.array(op.resource_limits, dtype=float),
        max_share_ratio=1.0 if max_share_ratio is None else float(max_share_ratio),
        tag_filter_resource_limits=tags.limits(str(_spec_option(op.spec, "scheduling_tag_filter", "") or "")),
        starvation_tolerance=tolerance,
        usage=usage,
        demand=demand,
        start_time=op.start_time,
        pending_allocation_count=round(float(needed[USER_SLOTS])) if schedulable else 0,
        schedulable=schedulable,
        is_gang=bool(_spec_option(op.spec, "is_gang", False)),
        apply_specified_resource_limits_to_demand=bool(
            _spec_option(op.spec, "apply_specified_resource_limits_to_demand", False)
        ),
    )


def _integral(config: Any, tree: PoolTree) -> IntegralGuarantees:
    if config is None:
        return IntegralGuarantees()
    ig = config.integral_guarantees
    distribute = ig.should_distribute_free_volume_among_children
    return IntegralGuarantees(
        guarantee_type=ig.guarantee_type,
        burst_guarantee_resources=np.array(ig.burst_guarantee_resources.vector, dtype=float),
        resource_flow=np.array(ig.resource_flow.vector, dtype=float),
        relaxed_share_multiplier_limit=ig.relaxed_share_multiplier_limit,
        can_accept_free_volume=ig.can_accept_free_volume,
        should_distribute_free_volume_among_children=bool(
            tree.config.should_distribute_free_volume_among_children if distribute is None else distribute
        ),
    )


def _pool_element(
    tree: PoolTree, pool: PoolElement, source: OperationResources, tags: _TagLimits, parent_tolerance: float
) -> Pool:
    config = pool.config
    tolerance = parent_tolerance
    if config is not None and config.fair_share_starvation_tolerance is not None:
        tolerance = float(config.fair_share_starvation_tolerance)
    if pool.is_root:
        tolerance = float(tree.config.fair_share_starvation_tolerance)
    if config is not None:
        limits = np.array(config.resource_limits.vector, dtype=float)
    elif pool.ephemeral_config is not None:
        limits = np.array(pool.ephemeral_config.resource_limits.vector, dtype=float)
    else:
        limits = np.full(len(zeros()), np.inf)
    children: list[Any] = [
        _pool_element(tree, child, source, tags, tolerance) for child in pool.children.values()
    ]
    children.extend(_operation_element(tree, op, tolerance, source, tags) for op in pool.operations.values())
    return Pool(
        id=pool.name,
        weight=None if config is None or config.weight is None else float(config.weight),
        specified_resource_limits=limits,
        max_share_ratio=1.0 if config is None else float(config.effective_max_share_ratio),
        tag_filter_resource_limits=tags.limits(config.scheduling_tag_filter if config is not None else ""),
        starvation_tolerance=tolerance,
        children=children,
        mode=pool.mode,
        strong_guarantee_resources=(
            np.array(config.strong_guarantee_resources.vector, dtype=float) if config is not None else zeros()
        ),
        specified_guarantee_resources=(
            frozenset(config.strong_guarantee_resources.specified) if config is not None else frozenset()
        ),
        integral_guarantees=_integral(config, tree),
        fifo_sort_parameters=tuple(config.fifo_sort_parameters)
        if config is not None
        else ("weight", "start_time"),
        compute_promised_guarantee_fair_share=bool(config.compute_promised_guarantee_fair_share)
        if config
        else False,
        enable_priority_strong_guarantee_adjustment=bool(
            config is not None and config.enable_priority_strong_guarantee_adjustment
        ),
        enable_priority_strong_guarantee_adjustment_donorship=bool(
            config is not None and config.enable_priority_strong_guarantee_adjustment_donorship
        ),
        allow_gang_step_function=config is None or bool(config.enable_step_function_for_gang_operations),
        enable_fair_share_truncation_in_fifo_pool=bool(
            tree.config.enable_fair_share_truncation_in_fifo_pool
            if config is None or config.enable_fair_share_truncation_in_fifo_pool is None
            else config.enable_fair_share_truncation_in_fifo_pool
        ),
    )


def build_fair_share_input(
    tree: PoolTree, operation_resources: OperationResources, *, nodes: NodeResources | None = None
) -> tuple[Pool, UpdateSettings]:
    """The fair-share model of ``tree``: the root pool (id ``<Root>``) with every pool and operation, and the
    tree's update settings. ``nodes`` (this tree's nodes) is needed only for elements with a
    ``scheduling_tag_filter``; without it such elements get no tag-filter limits.
    """
    tags = _TagLimits(nodes)
    root = _pool_element(
        tree, tree.root, operation_resources, tags, float(tree.config.fair_share_starvation_tolerance)
    )
    return root, update_settings(tree)


def tree_total_resources(nodes: NodeResources) -> Vector:
    """Sum of the resource limits of a tree's nodes (shares are fractions of this)."""
    total = zeros()
    for _tags, limits in nodes.values():
        total = total + np.asarray(limits, dtype=float)
    return total
