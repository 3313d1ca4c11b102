"""Build the fair-share update's input (``pooltree.fairshare.model``) from one pool tree at run time (§b.1).

Controllers own operation usage and pending allocations, so the caller hands them in (a mapping or a
callback: operation id → ``(usage, needed)``, absolute vectors; ``needed`` is the sum of the resources of the
operation's pending allocations in this tree). Demand = usage + needed for an operation that runs in the tree and is
not suspended; otherwise demand = usage and the operation is not schedulable.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

from pooltree.config import TagFilter
from pooltree.config.operation_preemption import (
    operation_starvation_tolerance,
    specified_starvation_tolerance,
)
from pooltree.fairshare.historic_usage import historic_usage_halflife
from pooltree.fairshare.model import IntegralGuarantees, Operation, Pool, UpdateSettings
from pooltree.resources import USER_SLOTS, Vector, zeros
from pooltree.tree.delta import PeriodDelta, RuntimeTree
from pooltree.tree.elements import PoolElement, TreeOperation, frozen_spec
from pooltree.tree.projection import OperationChanges, Projected, TreeProjection
from pooltree.tree.values import spec_option

OperationResources = Mapping[str, tuple[Vector, Vector]] | Callable[[str], tuple[Vector, Vector] | None]
"""Operation id → (usage, needed): a mapping (missing ids count as idle) or a callback returning None for idle."""

NodeResources = Mapping[str, tuple[Iterable[str], Vector]]
"""Node address → (tags, resource limits) for the nodes of one tree (used for scheduling tag filters)."""


def update_settings(tree: RuntimeTree) -> UpdateSettings:
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
        enable_discretized_fair_share=bool(cfg.enable_discretized_fair_share),
        max_discretized_steps=int(cfg.max_discretized_steps),
    )


class _TagLimits:
    """Sum of node limits matching a tree filter AND an element filter (cached per filter text).

    The nodes are read only when some element has a tag filter (most trees have none), so building the input
    does not walk every node of a large cluster each period.
    """

    def __init__(self, nodes: NodeResources | None):
        self._source = nodes
        self._nodes: dict[str, tuple[frozenset[str], Vector]] | None = None
        self._cache: dict[str, Vector] = {}

    def limits(self, filter_text: str) -> Vector | None:
        if not filter_text or not self._source:
            return None
        cached = self._cache.get(filter_text)
        if cached is None:
            tag_filter = TagFilter.parse(filter_text, "scheduling_tag_filter")
            if tag_filter.is_empty:
                return None
            if self._nodes is None:
                self._nodes = {
                    address: (frozenset(tags), np.asarray(limits, dtype=float))
                    for address, (tags, limits) in self._source.items()
                }
            cached = zeros()
            for tags, limits in self._nodes.values():
                if tag_filter.matches(tags):
                    cached = cached + limits
            self._cache[filter_text] = cached
        return cached.copy()


class FairShareInput(NamedTuple):
    """One read of a tree's fair-share input (`read_input`): the root and the settings, and what this read
    changed in the input objects of the previous read (its rows), for the update that reads it
    (``UpdateState.written``, ``.relaid``)."""

    root: Pool
    settings: UpdateSettings
    written: list[Operation] | None
    """The operation elements whose usage, demand and pending count this read wrote (repeats possible; any other
    change of an element is a new element object); None: not known (it walked the tree), every row is read."""
    relaid: frozenset[str] | None
    """The pools whose model element got a new ``children`` list in this read (the pools of the operations the
    period's delta names); None: not known (it walked the tree)."""
    renewed: frozenset[str]
    """The operations among those pools' children whose model element this read made anew (arrived, re-made,
    moved): every other child of those pools is the element the previous read had under its id."""
    rows: InputRows | None = None
    """This read's rows, for the next read of the tree (`read_input`)."""


def _found(source: OperationResources, operation_id: str) -> tuple[Vector, Vector] | None:
    if callable(source):
        return source(operation_id)
    return source.get(operation_id)


def _tree_option(spec: Any, tree: str, name: str) -> Any:
    per_tree = spec_option(spec, "scheduling_options_per_pool_tree", None)
    if per_tree:
        options = per_tree.get(tree)
        if options is not None:
            value = spec_option(options, name, None)
            if value is not None:
                return value
    return spec_option(spec, name, None)


def _operation_static(tree: RuntimeTree, op: TreeOperation, tolerance: float, tags: _TagLimits) -> Operation:
    """The operation's model element without usage and demand (written by ``_write_found``)."""
    schedulable = op.running and not op.suspended
    max_share_ratio = _tree_option(op.spec, tree.name, "max_share_ratio")
    return Operation(
        id=op.id,
        weight=op.weight,
        specified_resource_limits=np.array(op.resource_limits, dtype=float),
        max_share_ratio=1.0 if max_share_ratio is None else float(max_share_ratio),
        tag_filter_resource_limits=tags.limits(str(spec_option(op.spec, "scheduling_tag_filter", "") or "")),
        starvation_tolerance=operation_starvation_tolerance(
            tolerance, specified_starvation_tolerance(op.spec)
        ),
        start_time=op.start_time,
        schedulable=schedulable,
        is_gang=_gang_like(tree, op),
        apply_specified_resource_limits_to_demand=bool(
            spec_option(op.spec, "apply_specified_resource_limits_to_demand", False)
        ),
    )


class InputRows:
    """The rows of a tree's input read, the one thing a read hands the next (`read_input` takes the previous rows
    and returns its own; it may bring the previous ones up to date in place, so they are the next read's alone):
    what the read was made from (``key``; None: it cannot be brought up to date, a plain-map spec may change in
    place), its root and, per operation id, the operation's model element with the ``(usage, needed)`` object its
    resources were last written from (``None``: the source had none); and the tag-filter limits of its nodes and
    the update settings of its tree config, made again only when those objects change."""

    __slots__ = ("key", "operations", "root", "settings", "tags")

    def __init__(
        self,
        key: tuple[Any, ...] | None,
        root: Pool,
        operations: dict[str, list[Any]],
        tags: _TagLimits,
        settings: tuple[Any, UpdateSettings],
    ):
        self.key = key
        self.root = root
        self.operations = operations
        self.tags = tags
        self.settings = settings


def _write_found(element: Operation, found: tuple[Vector, Vector] | None) -> None:
    """Write what the source answered (usage, needed; None: idle) into the operation's model element."""
    if found is None:
        _write_resources(element, zeros(), zeros())
    else:
        _write_resources(element, np.array(found[0], dtype=float), np.array(found[1], dtype=float))


def _write_resources(element: Operation, usage: Vector, needed: Vector) -> Operation:
    if element.schedulable:
        element.usage = usage
        element.demand = usage + needed
        element.pending_allocation_count = round(float(needed[USER_SLOTS]))
    else:
        element.usage = usage
        element.demand = usage.copy()
        element.pending_allocation_count = 0
    return element


def _gang_like(tree: RuntimeTree, op: TreeOperation) -> bool:
    """YTsaurus ``IsGangLike``: spec ``is_gang``, or a vanilla operation of a single allocation when the tree
    sets ``consider_single_allocation_vanilla_operations_as_gang``."""
    if spec_option(op.spec, "is_gang", False):
        return True
    if not tree.config.consider_single_allocation_vanilla_operations_as_gang:
        return False
    if op.operation_type != "vanilla":
        return False
    tasks = spec_option(op.spec, "tasks", None) or {}
    counts = [spec_option(task, "job_count", 0) for task in tasks.values()]
    return sum(int(count or 0) for count in counts) == 1


def _integral(config: Any, tree: RuntimeTree) -> IntegralGuarantees:
    """The pool's integral guarantees."""
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


def _pool_static(tree: RuntimeTree, pool: PoolElement, tags: _TagLimits, tolerance: float) -> Pool:
    """The pool's model element without children."""
    config = pool.config
    if config is not None:
        limits = np.array(config.resource_limits.vector, dtype=float)
    elif pool.ephemeral_config is not None:
        limits = np.array(pool.ephemeral_config.resource_limits.vector, dtype=float)
    else:
        limits = np.full(len(zeros()), np.inf)
    return Pool(
        id=pool.name,
        weight=None if config is None or config.weight is None else float(config.weight),
        specified_resource_limits=limits,
        max_share_ratio=1.0 if config is None else float(config.effective_max_share_ratio),
        tag_filter_resource_limits=tags.limits(config.scheduling_tag_filter if config is not None else ""),
        starvation_tolerance=tolerance,
        children=[],
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
        historic_usage_halflife=historic_usage_halflife(config),
        enable_fair_share_truncation_in_fifo_pool=bool(
            tree.config.enable_fair_share_truncation_in_fifo_pool
            if config is None or config.enable_fair_share_truncation_in_fifo_pool is None
            else config.enable_fair_share_truncation_in_fifo_pool
        ),
    )


def _operation_input(
    tree: RuntimeTree, op: TreeOperation, entry: Projected, nodes: Any, tags: _TagLimits
) -> tuple[Operation, bool]:
    """The operation's model element without usage and demand: its projection entry's while it was made with
    these nodes, else made anew (and kept there unless the spec is a plain map); and whether it may be kept."""
    element = entry.input
    if element is not None and entry.input_nodes is nodes:
        return element, True
    element = _operation_static(tree, op, entry.tolerance, tags)
    if not frozen_spec(op.spec):
        return element, False
    entry.input = element
    entry.input_nodes = nodes
    return element, True


def _pool_input(tree: RuntimeTree, pool: PoolElement, entry: Projected, nodes: Any, tags: _TagLimits) -> Pool:
    """The pool's model element without children: its projection entry's while it was made with these nodes."""
    element = entry.input
    if element is None or entry.input_nodes is not nodes:
        element = entry.input = _pool_static(tree, pool, tags, entry.tolerance)
        entry.input_nodes = nodes
    return element


class _CachedBuild:
    """The input made from the projection's walk of the tree (same order and values as ``_pool_element``): each
    pool's children are its child pools and running operations as the projection lists them, each element's model
    object is its projection entry's."""

    def __init__(
        self,
        tree: RuntimeTree,
        source: OperationResources,
        tags: _TagLimits,
        projection: TreeProjection,
        nodes: Any,
    ):
        self.tree = tree
        self.source = source
        self.tags = tags
        self.projection = projection
        self.nodes = nodes
        self.operations: dict[str, list[Any]] = {}
        self.cacheable = True
        """False when an operation's spec is a plain map (it may change in place without a revision)."""

    def pool(self, name: str) -> Pool:
        tree, nodes, tags = self.tree, self.nodes, self.tags
        entry = self.projection.pools[name]
        element = _pool_input(tree, entry.key[0], entry, nodes, tags)
        children: list[Any] = [self.pool(child) for child in entry.children]
        projected = self.projection.operations
        for op_id in entry.running:
            op_entry = projected[op_id]
            static, kept = _operation_input(tree, op_entry.key[0], op_entry, nodes, tags)
            if not kept:
                self.cacheable = False
            found = _found(self.source, op_id)
            _write_found(static, found)
            self.operations[op_id] = [static, found]
            children.append(static)
        element.children = children
        return element


def build_fair_share_input(
    tree: RuntimeTree,
    operation_resources: OperationResources,
    *,
    nodes: NodeResources | None = None,
) -> tuple[Pool, UpdateSettings]:
    """A one-off fair-share model of ``tree`` (the root pool, id ``<Root>``, with every pool and operation) and the
    tree's update settings: `read_input` through a fresh projection, with the delta of a tree read for the first
    time (every element walked). A caller that reads the tree period after period keeps a
    `pooltree.strategy.kept.KeptState` and hands `read_input` its projection, rows and delta instead."""
    projection = TreeProjection()
    read = read_input(
        tree,
        operation_resources,
        nodes=nodes,
        projection=projection,
        previous=None,
        delta=projection.delta(tree),
    )
    return read.root, read.settings


def read_input(
    tree: RuntimeTree,
    operation_resources: OperationResources,
    *,
    nodes: NodeResources | None,
    projection: TreeProjection,
    previous: InputRows | None,
    delta: PeriodDelta,
) -> FairShareInput:
    """The fair-share model of ``tree``: the root pool (id ``<Root>``) with every pool and operation, the tree's
    update settings, what this read wrote into the previous read's objects, and this read's rows for the next
    read. ``nodes`` (this tree's nodes) is needed only for elements with a ``scheduling_tag_filter``; without it
    such elements get no tag-filter limits. ``projection`` (the tree's, kept by the caller) and ``previous`` (the
    rows the last read of the tree returned, or None; it may be brought up to date in place, and is not to be
    read from again) reuse the model objects of unchanged elements; the input is the same either way.

    ``delta``: the period's changes of the tree (`pooltree.tree.delta`), found once per period for every
    consumer (`KeptState.delta`; a fresh projection's for a tree read for the first time). Its ``resources`` is a
    change notification instead of a poll: the operations whose answer from ``operation_resources`` may have
    moved since the previous read (every other operation's must be what it was, as ``SchedulerCore``'s
    notifications guarantee). Only these are then asked, instead of every running operation. ``None``: unknown,
    every running operation is asked (a snapshot's mapping, for instance).
    """
    last = previous
    built_at = None if last is None or last.key is None or last.key[0] is not tree else last.key[1]
    projection.advance(tree, delta)
    key = (tree, delta.revision, tree.config, nodes)
    changed = delta.resources
    tags = last.tags if last is not None and last.tags._source is nodes else _TagLimits(nodes)
    settings = (
        last.settings
        if last is not None and last.settings[0] is tree.config
        else (tree.config, update_settings(tree))
    )
    same_source = (
        last is not None
        and last.key is not None
        and delta.applies_to(tree, built_at)
        and last.key[2] is tree.config
        and last.key[3] is nodes
    )
    written: list[Operation] | None = []
    relaid: set[str] = set()
    renewed: set[str] = set()
    if same_source and delta.unchanged:
        assert last is not None
        _refresh_resources(last.operations, operation_resources, changed, written)
        rows = last
    elif same_source and _changes_applied(
        tree, last, projection, tags, operation_resources, nodes, delta, (written, relaid, renewed)
    ):
        assert last is not None
        last.key = key
        _refresh_resources(last.operations, operation_resources, changed, written)
        rows = last
    else:
        written = None  # every element written: the update reads every row and lays the tree anew
        build = _CachedBuild(tree, operation_resources, tags, projection, nodes)
        root = build.pool(tree.root.name)
        rows = InputRows(key if build.cacheable else None, root, build.operations, tags, settings)
    rows.tags, rows.settings = tags, settings
    if written is None:
        return FairShareInput(rows.root, settings[1], None, None, frozenset(), rows)
    return FairShareInput(rows.root, settings[1], written, frozenset(relaid), frozenset(renewed), rows)


def _changes_applied(
    tree: RuntimeTree,
    last: InputRows,
    projection: TreeProjection,
    tags: _TagLimits,
    source: OperationResources,
    nodes: Any,
    delta: PeriodDelta,
    told: tuple[list[Operation], set[str], set[str]],
) -> bool:
    """`_apply_operation_changes` with the changes the projection found for this delta (none: the projection
    walked, and so does this read). When it raises, ``last`` may be half brought up to date: the caller drops it."""
    changes = projection.changes_with(delta)
    if changes is None:
        return False
    return _apply_operation_changes(tree, last, projection, tags, source, nodes, told, changes)


def _apply_operation_changes(
    tree: RuntimeTree,
    last: InputRows,
    projection: TreeProjection,
    tags: _TagLimits,
    source: OperationResources,
    nodes: Any,
    told: tuple[list[Operation], set[str], set[str]],
    changes: OperationChanges,
) -> bool:
    """Bring the previous build up to the tree's revision when only some operations changed since (arrived, left,
    activated, suspended, moved, new parameters: the period's delta, as the projection classified it): the pools
    they ran in or run in now get a new ``children`` list, built exactly as the walk builds it (child pools, then
    the running operations in the pool's order), and only the changed operations' model elements are looked up or
    made. Every other pool keeps its list and every other operation its element. False when a pool of the changes
    is gone, a model element of the previous build is missing from the projection or a changed operation's spec
    is not a frozen model: the caller then walks the whole tree (which sets everything this may have begun anew).
    ``told`` collects what the read tells the update (the elements written, the pools re-laid, the operations whose
    element is made anew)."""
    if not changes.frozen:
        return False
    written, relaid, renewed = told
    pools = projection.pools
    touched = changes.pools()
    if any(pools[child].input is None for name in touched for child in (name, *pools[name].children)):
        return False
    changed = {op_id for _, op_id, _ in changes.running}
    projected = projection.operations
    entries: dict[str, list[Any]] = {}
    for name in touched:
        entry = pools[name]
        children: list[Any] = [pools[child].input for child in entry.children]
        for op_id in entry.running:
            if op_id in changed:
                op_entry = projected[op_id]
                if op_entry.input is None or op_entry.input_nodes is not nodes:
                    renewed.add(op_id)  # its element is made anew below
                static, _ = _operation_input(tree, op_entry.key[0], op_entry, nodes, tags)
                found = _found(source, op_id)
                _write_found(static, found)
                written.append(static)
                entries[op_id] = [static, found]
            else:
                static = projected[op_id].input
                if static is None:
                    return False
            children.append(static)
        entry.input.children = children
    relaid.update(touched)
    if changes.before or entries:
        by_id = last.operations
        for op_id in changes.before:
            by_id.pop(op_id, None)
        by_id.update(entries)
    return True


def _refresh_resources(
    operations: dict[str, list[Any]],
    source: OperationResources,
    changed: Collection[str] | None = None,
    written: list[Operation] | None = None,
) -> None:
    """Write current usage and demand into the cached operations' model elements: of every cached operation (a
    poll: ``changed`` None), or of the cached ones among ``changed`` only, the period's notified operations (the
    source answers the others as last time). Each one written is reported in ``written``.

    A poll's answer that is the very object written last time (a snapshot's map hands out the same tuple every
    time) is not written again.
    """
    lookup = source if callable(source) else source.get
    if changed is None:
        entries: Iterable[list[Any]] = operations.values()
    else:
        find = operations.get
        entries = [entry for op_id in changed if (entry := find(op_id)) is not None]
    for entry in entries:
        element = entry[0]
        found = lookup(element.id)
        if found is entry[1]:
            continue
        entry[1] = found
        if written is not None:
            written.append(element)
        _write_found(element, found)


def tree_total_resources(nodes: NodeResources) -> Vector:
    """Sum of the resource limits of a tree's nodes (shares are fractions of this)."""
    total = zeros()
    for _tags, limits in nodes.values():
        total = total + np.asarray(limits, dtype=float)
    return total
