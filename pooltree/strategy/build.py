"""Build the strategy's `SchedulingTree` from the pool tree runtime and one fair-share result.

Per update only the shares change for most elements; the rest of an element's spec (parent, limits, starvation and
preemption options, effective thresholds, tag filter) is a function of the pool tree's immutable configuration
objects. The tree's projection (`pooltree.tree.projection`) keeps those static parts keyed by the exact objects they
were computed from (configs and specs are frozen models, `Resources` vectors are immutable), so an unchanged element
costs one key comparison; a build takes the previous build's rows (`BuildRows`) and returns its own.
Shares are read in bulk from the result's arrays (``result.elements.arrays`` / ``.index``) when it offers them.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import numpy as np

from pooltree.resources import RESOURCE_COUNT, Vector
from pooltree.strategy.build_rows import BuildRows, _operation_changes, _unchanged_structure
from pooltree.strategy.build_static import _BELOW, _NORMAL, _operation_static, _pool_static, _spec
from pooltree.strategy.model import SchedulingStatus
from pooltree.strategy.snapshot import ElementSpec, SchedulingTree, StrategyConfig
from pooltree.tree.delta import PeriodDelta, RuntimeTree
from pooltree.tree.elements import frozen_spec
from pooltree.tree.projection import TreeProjection

_ARRAY_KEYS = frozenset({"fair_share", "demand_share", "below", "weight", "fifo_index"})
"""Arrays of ``ElementResults`` read in bulk; a result without them is read element by element."""


def _bulk(result_elements: Any) -> bool:
    """Whether a result offers the arrays the bulk path reads."""
    arrays = getattr(result_elements, "arrays", None)
    return (
        isinstance(arrays, Mapping)
        and isinstance(getattr(result_elements, "index", None), Mapping)
        and isinstance(getattr(result_elements, "ids", None), list)
        and arrays.keys() >= _ARRAY_KEYS
    )


class _Shares:
    """Per-element published values of one fair-share result: (fair_share, demand_share, status, weight, fifo)."""

    def __init__(self, elements: Mapping[str, Any]):
        arrays = getattr(elements, "arrays", None)
        index = getattr(elements, "index", None)
        self._elements = elements
        self._index: Mapping[str, int] | None = None
        if isinstance(arrays, Mapping) and isinstance(index, Mapping) and arrays.keys() >= _ARRAY_KEYS:
            # one copy of each array: specs hold row views, independent of the result object
            self._fair_share = np.array(arrays["fair_share"], dtype=float)
            self._demand_share = np.array(arrays["demand_share"], dtype=float)
            self._below = np.asarray(arrays["below"], dtype=bool).tolist()
            self._weight = np.asarray(arrays["weight"], dtype=float).tolist()
            self._fifo = arrays["fifo_index"]
            self._index = index

    def get(self, element_id: str) -> tuple[Vector, Vector, SchedulingStatus, float, int] | None:
        index = self._index
        if index is not None:
            i = index.get(element_id)
            if i is None:
                return None
            fifo = self._fifo.get(i)
            return (
                self._fair_share[i],
                self._demand_share[i],
                _BELOW if self._below[i] else _NORMAL,
                self._weight[i],
                int(fifo or 0),
            )
        share = self._elements.get(element_id)
        if share is None:
            return None
        return (
            np.array(share.fair_share, dtype=float),
            np.array(share.demand_share, dtype=float),
            SchedulingStatus(share.scheduling_status),
            float(share.weight),
            int(share.fifo_index or 0),
        )


def scheduling_tree_from_runtime(
    pool_tree: RuntimeTree,
    result: Any,
    total_resources: Vector,
    config: StrategyConfig | None = None,
) -> SchedulingTree:
    """A one-off snapshot of ``pool_tree`` (``pooltree.tree.PoolTree``) with the shares of ``result`` (a
    FairShareResult): `build_scheduling_tree` through a fresh projection, with the delta of a tree built for the
    first time (every element walked). A caller that builds the tree period after period keeps a
    `pooltree.strategy.kept.KeptState` and hands `build_scheduling_tree` its projection, rows and delta instead."""
    projection = TreeProjection()
    tree, _ = build_scheduling_tree(
        pool_tree, result, total_resources, config, projection, None, projection.delta(pool_tree)
    )
    return tree


def build_scheduling_tree(
    pool_tree: RuntimeTree,
    result: Any,
    total_resources: Vector,
    config: StrategyConfig | None,
    projection: TreeProjection,
    previous: BuildRows | None,
    delta: PeriodDelta,
) -> tuple[SchedulingTree, BuildRows]:
    """Snapshot of ``pool_tree`` with the shares of ``result``, and its rows for the next build of the tree.

    Pools pass their own starvation/preemption options (the snapshot resolves inheritance); operations pass
    their spec's preemption mode, scheduling tag filter, interruption signal and effective non-preemptible
    usage threshold. Elements missing from ``result`` get zero fair share. ``projection`` (the tree's, kept by the
    caller) skips recomputing the static part of elements whose configuration is unchanged; ``previous`` (the rows
    the last build of the tree returned, or None) and ``delta`` (the period's changes of the tree,
    `pooltree.tree.delta`: `KeptState.delta`, a fresh projection's for a first build) say whether the previous rows stand as they are, need only
    some operations' rows, or the tree must be walked. ``previous`` is the next rows' material: it may be re-made
    in place, and is not to be built from again.
    """
    name = pool_tree.name
    config = config or StrategyConfig.from_options(pool_tree.config, f"pool_trees.{name}.config")
    bulk = _bulk(result.elements)
    last = previous
    key = None if last is None else last.key
    built_at = None if key is None or key[0] is not pool_tree else key[1]
    projection.advance(pool_tree, delta)
    runtime_key = (pool_tree, delta.revision, pool_tree.config, config, name)
    if (
        bulk
        and last is not None
        and key is not None
        and last.published is not None
        and delta.applies_to(pool_tree, built_at)
        and all(map(operator.is_, key[2:], runtime_key[2:]))
    ):
        tree = _brought_up_to_date(
            pool_tree, result.elements, total_resources, projection, last, runtime_key, delta
        )
        if tree is not None:
            return tree, last
    walk = _Walk(pool_tree, projection, _Shares(result.elements))
    walk.pools()
    walk.operations()
    statics, elements = walk.statics, walk.elements
    if (
        last is not None
        and last.config is config
        and last.tree.name == name
        and len(last.statics) == len(statics)
        and all(map(operator.is_, last.statics, statics))
    ):
        tree = last.tree.with_shares(total_resources, elements)
    else:
        tree = SchedulingTree(total_resources, elements, config, name=name)
    readable = bulk and walk.cacheable
    rows = BuildRows(
        runtime_key if readable else None, walk.ids, statics, elements, tree, config, walk.registration
    )
    if readable:
        rows.read(result.elements)
    return tree, rows


def _brought_up_to_date(
    pool_tree: RuntimeTree,
    result_elements: Any,
    total_resources: Vector,
    projection: TreeProjection,
    last: BuildRows,
    runtime_key: tuple[Any, ...],
    delta: PeriodDelta,
) -> SchedulingTree | None:
    """The previous build's tree with this result's shares, when the delta allows it: the same rows (an unchanged
    revision), or rows brought up to date for the operations the delta names (`_operation_changes`); None when
    the tree must be walked. (When it raises, ``last`` may be half brought up to date: the caller drops it.)"""
    if delta.unchanged:
        return _unchanged_structure(result_elements, total_resources, last)
    found = projection.changes_with(delta)
    if found is None:
        return None  # the projection walked the tree: so does this build
    changes = _operation_changes(pool_tree, projection, last, runtime_key, found)
    if changes is None:
        return None
    # no row changed: the structure is the previous one (`with_shares`, same skeleton)
    rows_changed = changes if changes.removed or changes.added else None
    return _unchanged_structure(result_elements, total_resources, last, rows_changed)


class _Walk:
    """Every row anew, from the projection's walk of the tree (`TreeProjection`): every pool in the tree's order,
    then every running operation in registration order, each with its static part (its projection entry's, made
    there the first time) and its shares."""

    def __init__(self, pool_tree: RuntimeTree, projection: TreeProjection, shares: _Shares) -> None:
        self.pool_tree = pool_tree
        self.projection = projection
        self.shares = shares
        self.elements: list[ElementSpec] = []
        self.statics: list[dict[str, Any]] = []
        self.ids: list[str] = []
        self.cacheable = True
        """False when an operation's spec is a plain map (it may change in place without a revision)."""
        self.registration: list[int] | None = []
        """The operation rows' registration indices, None when they are not increasing (see `BuildRows`)."""

    def add(self, element_id: str, static: dict[str, Any], is_operation: bool) -> None:
        """One row: the element's static part and its spec with the result's shares (zero when it has none)."""
        self.statics.append(static)
        self.ids.append(element_id)
        share = self.shares.get(element_id)
        if share is None:
            spec = _spec(static, fair_share=np.zeros(RESOURCE_COUNT))
        elif is_operation:
            fair_share, demand_share, status, weight, fifo_index = share
            spec = _spec(
                static,
                fair_share=fair_share,
                demand_share=demand_share,
                scheduling_status=status,
                weight=weight,
                fifo_index=fifo_index,
            )
        else:
            fair_share, demand_share, status, _, _ = share
            spec = _spec(static, fair_share=fair_share, demand_share=demand_share, scheduling_status=status)
        self.elements.append(spec)

    def pools(self) -> None:
        pool_tree = self.pool_tree
        for pool_name, entry in self.projection.pools.items():
            static = entry.row
            if static is None:
                static = entry.row = _pool_static(pool_tree, pool_name, entry.key[0])
            self.add(pool_name, static, False)

    def operations(self) -> None:
        pool_tree = self.pool_tree
        registration = self.registration
        for op_id, entry in self.projection.running(pool_tree).items():
            op = entry.key[0]
            if registration is not None:
                index = op.registration_index
                if registration and index <= registration[-1]:
                    registration = None
                else:
                    registration.append(index)
            spec = op.spec
            if self.cacheable and spec is not None and not frozen_spec(spec):
                self.cacheable = False  # a plain-map spec may change in place without a revision
            static = entry.row
            if static is None:
                static = entry.row = _operation_static(pool_tree, op_id, op)
            self.add(op_id, static, True)
        self.registration = registration
