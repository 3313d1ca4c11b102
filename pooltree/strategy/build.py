"""Build the strategy's `SchedulingTree` from the pool tree runtime and one fair-share result.

Per update only the shares change for most elements; the rest of an element's spec (parent, limits, starvation and
preemption options, effective thresholds, tag filter) is a function of the pool tree's immutable configuration
objects. A `BuildCache` keeps those static parts keyed by the exact objects they were computed from (configs and
specs are frozen models, `Resources` vectors are immutable), so an unchanged element costs one key comparison.
Shares are read in bulk from the result's arrays (``result.elements.arrays`` / ``.index``) when it offers them.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import MISSING
from dataclasses import fields as dataclass_fields
from typing import Any

import numpy as np

from pooltree.config import TagFilter
from pooltree.config.operation_preemption import (
    specified_non_preemptible_threshold,
    specified_starvation_timeout,
    specified_starvation_tolerance,
)
from pooltree.resources import RESOURCE_COUNT, Vector
from pooltree.strategy.model import SchedulingStatus
from pooltree.strategy.snapshot import ROOT_ID, ElementSpec, SchedulingTree, SpecRows, StrategyConfig
from pooltree.tree.delta import PeriodDelta, period_delta

_SPEC_FIELDS = (
    "scheduling_tag_filter",
    "enable_aggressive_starvation",
    "max_unpreemptible_allocation_count",
    "fair_share_starvation_tolerance",
    "fair_share_starvation_timeout",
    "non_preemptible_resource_usage_threshold",
    "preemption_mode",
    "interruption_signal",
    "is_gang",
)
"""The operation spec fields the static part reads."""
_ARRAY_KEYS = frozenset({"fair_share", "demand_share", "below", "weight", "fifo_index"})
"""Arrays of ``ElementResults`` read in bulk; a result without them is read element by element."""
_BELOW = SchedulingStatus.BELOW_FAIR_SHARE
_NORMAL = SchedulingStatus.NORMAL


def _option(source: Any, name: str, default: Any = None) -> Any:
    if source is None:
        return default
    value = source.get(name) if isinstance(source, dict) else getattr(source, name, None)
    return default if value is None else value


_FROZEN_TYPES: dict[type, bool] = {}


def _is_frozen(spec: Any) -> bool:
    """Whether ``spec`` is a frozen model (pydantic ``frozen=True``); memoised per type (isinstance against the
    ``Mapping`` ABC costs about a microsecond, and this runs for every operation on every update)."""
    kind = type(spec)
    frozen = _FROZEN_TYPES.get(kind)
    if frozen is None:
        config = getattr(kind, "model_config", None)
        frozen = bool(isinstance(config, dict) and config.get("frozen")) and not issubclass(kind, Mapping)
        _FROZEN_TYPES[kind] = frozen
    return frozen


def _spec_values(spec: Any) -> Any:
    """What the cache key holds of an operation spec: a frozen model itself (it cannot change, and tuple
    equality tests identity first), else the `_SPEC_FIELDS` values (a plain map may change in place)."""
    if spec is None:
        return ()
    if _is_frozen(spec):
        return spec
    if isinstance(spec, Mapping):
        return tuple(spec.get(name) for name in _SPEC_FIELDS)
    return tuple(getattr(spec, name, None) for name in _SPEC_FIELDS)


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


class BuildCache:
    """Static spec parts of pools and operations from previous builds, keyed by the objects they depend on.

    Owned by one `SchedulerCore` (one pool tree); entries of elements gone from the tree are dropped per build.
    ``last`` is the previous build's sequence of static parts, its config and tree: when the next build yields
    the very same static objects in the same order, the tree's structure is unchanged and the new tree shares
    the previous one's validated structure and resolved settings (`SchedulingTree.with_shares`).
    """

    def __init__(self) -> None:
        self.pools: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        self.operations: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        self.last: tuple[list[dict[str, Any]], StrategyConfig, SchedulingTree] | None = None
        self.runtime: _LastRuntime | None = None
        """The previous build's runtime key, element ids, specs and published values (see `_LastRuntime`)."""


class _LastRuntime:
    """What the previous build read, for the next one: while the pool tree's ``revision`` (and the tree config
    and strategy config objects) are the same, every static part is the same object as before, so the next build
    skips the per-element walk and only re-creates the specs whose published values changed, found by comparing
    the result's arrays with copies of the previous result's (`_Published`)."""

    __slots__ = (
        "ids",
        "is_op",
        "key",
        "pool_rows",
        "positions",
        "published",
        "registration",
        "result_ids",
        "row_of",
        "rows_from",
        "specs",
        "statics",
    )

    def __init__(
        self,
        key: tuple[Any, ...],
        ids: list[str],
        statics: list[dict[str, Any]],
        specs: list[ElementSpec],
        registration: list[int] | None = None,
    ):
        self.key = key
        self.ids = ids
        self.statics = statics
        self.specs = specs
        self.is_op = np.array([static["kind"] == "operation" for static in statics], dtype=bool)
        self.pool_rows = len(ids) - (0 if registration is None else len(registration))
        self.registration = registration
        """Registration indices of the operation rows (which follow the pool rows, in this order), or None when
        the rows are not in registration order (then operation changes re-walk the tree)."""
        self.result_ids: list[str] | None = None
        """A copy of the ids of the result ``published`` holds (the result's rows)."""
        self.positions: np.ndarray = np.zeros(0, dtype=np.intp)
        """Each row's row in that result (-1: the element is missing from it)."""
        self.row_of: np.ndarray = np.zeros(0, dtype=np.intp)
        """Each result row's row (-1: not an element of the build)."""
        self.published: _Published | None = None
        self.rows_from: np.ndarray | None = None
        """Set by `_operation_changes` until the next build: each row's row before the operation changes (-1:
        an operation's new row). ``positions`` still refer to the rows before the changes."""

    def read(self, result_elements: Any) -> None:
        """Take ``result_elements`` as the result the rows were last compared with: positions and copies."""
        ids = result_elements.ids
        index = result_elements.index
        count = len(self.ids)
        try:  # every element in the result (as usual): the lookups in C
            positions = np.array(
                operator.itemgetter(*self.ids)(index) if count > 1 else [index[i] for i in self.ids],
                dtype=np.intp,
            )
        except KeyError:
            positions = np.fromiter((index.get(i, -1) for i in self.ids), dtype=np.intp, count=count)
        found = positions >= 0
        row_of = np.full(len(ids), -1, dtype=np.intp)
        row_of[positions[found]] = np.flatnonzero(found)
        self.positions = positions
        self.row_of = row_of
        self.result_ids = list(ids)
        self.published = _Published(result_elements.arrays)
        self.rows_from = None


class _Published:
    """Private copies of the values one result published, in the result's row order: what the next result is
    compared with. Rows that change are written in place (`refresh`), so an update costs what changed."""

    __slots__ = ("below", "demand_share", "fair_share", "fifo", "weight")

    def __init__(self, arrays: Mapping[str, Any]) -> None:
        self.fair_share = np.array(arrays["fair_share"], dtype=float)
        self.demand_share = np.array(arrays["demand_share"], dtype=float)
        self.below = np.array(arrays["below"], dtype=bool)
        self.weight = np.array(arrays["weight"], dtype=float)
        self.fifo = {int(i): int(value or 0) for i, value in arrays["fifo_index"].items()}

    def refresh(self, arrays: Mapping[str, Any]) -> np.ndarray | None:
        """The rows (sorted) whose values in ``arrays`` (a result with the same rows) differ from these (NaN
        counts as changed), after taking their new values; None, with nothing taken, when the shapes differ."""
        fair_share = np.asarray(arrays["fair_share"], dtype=float)
        demand_share = np.asarray(arrays["demand_share"], dtype=float)
        below = np.asarray(arrays["below"], dtype=bool)
        weight = np.asarray(arrays["weight"], dtype=float)
        if (
            fair_share.shape != self.fair_share.shape
            or demand_share.shape != self.demand_share.shape
            or below.shape != self.below.shape
            or weight.shape != self.weight.shape
        ):
            return None
        # a vector row changed where any of its entries did: the flat indices of the differing entries, per row
        parts = [
            np.flatnonzero(fair_share != self.fair_share) // RESOURCE_COUNT,
            np.flatnonzero(demand_share != self.demand_share) // RESOURCE_COUNT,
            np.flatnonzero(below != self.below),
            np.flatnonzero(weight != self.weight),
        ]
        fifo_rows = arrays["fifo_index"]
        fifo = self.fifo
        if fifo_rows != fifo:  # the usual case compares equal in C; else find the rows by their values
            fresh = {int(i): int(value or 0) for i, value in fifo_rows.items()}
            moved = [i for i in fresh.keys() | fifo.keys() if fresh.get(i, 0) != fifo.get(i, 0)]
            parts.append(np.array(moved, dtype=np.intp))
            self.fifo = fresh
        rows = np.unique(np.concatenate(parts))
        if rows.size:
            self.fair_share[rows] = fair_share[rows]
            self.demand_share[rows] = demand_share[rows]
            self.below[rows] = below[rows]
            self.weight[rows] = weight[rows]
        return rows


class _Rows:
    """Published values of some rows of a build (missing rows: zero, ``missing`` set), as arrays."""

    __slots__ = ("below", "demand_share", "fair_share", "fifo", "missing", "weight")

    def __init__(self, published: _Published, positions: np.ndarray) -> None:
        """The values of the rows at ``positions`` (rows of ``published``; -1: missing)."""
        self.missing = positions < 0
        count = len(positions)
        if len(published.fair_share) == 0:  # nothing published: every row is missing
            self.fair_share = np.zeros((count, RESOURCE_COUNT))
            self.demand_share = np.zeros((count, RESOURCE_COUNT))
            self.below = np.zeros(count, dtype=bool)
            self.weight = np.zeros(count)
            self.fifo = np.zeros(count, dtype=np.int64)
            return
        take = np.where(self.missing, 0, positions)
        # ``take`` copies (specs hold row views of these arrays, never of the copies `_Published` rewrites)
        self.fair_share = published.fair_share.take(take, axis=0)
        self.demand_share = published.demand_share.take(take, axis=0)
        self.below = published.below.take(take)
        self.weight = published.weight.take(take)
        fifo = np.zeros(count, dtype=np.int64)
        fifo_of = published.fifo
        if fifo_of and count <= len(fifo_of):
            for k, position in enumerate(positions.tolist()):
                value = fifo_of.get(position, 0) if position >= 0 else 0
                if value:
                    fifo[k] = value
        elif fifo_of:
            row_of = np.full(len(published.fair_share), -1, dtype=np.intp)
            found = ~self.missing
            row_of[positions[found]] = np.flatnonzero(found)
            for position, value in fifo_of.items():
                if value and 0 <= position < len(row_of) and row_of[position] >= 0:
                    fifo[row_of[position]] = value
        self.fifo = fifo
        if self.missing.any():
            self.fair_share[self.missing] = 0.0
            self.demand_share[self.missing] = 0.0
            self.below[self.missing] = False
            self.weight[self.missing] = 0.0

    def changed(self, other: _Rows) -> np.ndarray:
        """The rows (ascending) whose published values differ from ``other``'s (NaN counts as changed)."""
        changed = (
            (self.below != other.below)
            | (self.weight != other.weight)
            | (self.fifo != other.fifo)
            | (self.missing != other.missing)
        )
        # a vector row changed where any of its entries did (the flat indices of the entries, per row)
        changed[np.flatnonzero(self.fair_share != other.fair_share) // RESOURCE_COUNT] = True
        changed[np.flatnonzero(self.demand_share != other.demand_share) // RESOURCE_COUNT] = True
        return np.flatnonzero(changed)

    def subset(self, rows: np.ndarray) -> _Rows:
        out = object.__new__(_Rows)
        out.fair_share = self.fair_share.take(rows, axis=0)
        out.demand_share = self.demand_share.take(rows, axis=0)
        out.below = self.below.take(rows)
        out.weight = self.weight.take(rows)
        out.fifo = self.fifo.take(rows)
        out.missing = self.missing.take(rows)
        return out

    def spec(self, static: dict[str, Any], k: int, is_op: bool) -> ElementSpec:
        """The spec ``scheduling_tree_from_runtime``'s element walk builds for the ``k``-th row."""
        if self.missing[k]:
            return _spec(static, fair_share=np.zeros(RESOURCE_COUNT))
        status = _BELOW if self.below[k] else _NORMAL
        if not is_op:
            return _spec(
                static,
                fair_share=self.fair_share[k],
                demand_share=self.demand_share[k],
                scheduling_status=status,
            )
        return _spec(
            static,
            fair_share=self.fair_share[k],
            demand_share=self.demand_share[k],
            scheduling_status=status,
            weight=float(self.weight[k]),
            fifo_index=int(self.fifo[k]),
        )


def _bulk(result_elements: Any) -> bool:
    """Whether a result offers the arrays the bulk path reads."""
    arrays = getattr(result_elements, "arrays", None)
    return (
        isinstance(arrays, Mapping)
        and isinstance(getattr(result_elements, "index", None), Mapping)
        and isinstance(getattr(result_elements, "ids", None), list)
        and arrays.keys() >= _ARRAY_KEYS
    )


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


def _pool_static(pool_tree: Any, pool_name: str, pool: Any) -> dict[str, Any]:
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
    }


def _operation_static(pool_tree: Any, op_id: str, op: Any) -> dict[str, Any]:
    spec = op.spec
    tag_text = str(_option(spec, "scheduling_tag_filter", "") or "")
    tag_filter = (
        TagFilter.parse(tag_text, f"operations.{op_id}.spec.scheduling_tag_filter") if tag_text else None
    )
    is_gang = bool(_option(spec, "is_gang", False))
    # YTsaurus IsAggressivePreemptionAllowed: a gang operation is not aggressively preemptible unless the tree
    # allows it (allow_aggressive_preemption_for_gang_operations, default true); otherwise it inherits.
    gang_aggressive = bool(getattr(pool_tree.config, "allow_aggressive_preemption_for_gang_operations", True))
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
        "allow_aggressive_preemption": False if is_gang and not gang_aggressive else None,
    }


def _cached(
    store: dict[str, tuple[tuple[Any, ...], dict[str, Any]]],
    seen: set[str],
    name: str,
    key: tuple[Any, ...],
    compute: Any,
) -> dict[str, Any]:
    seen.add(name)
    entry = store.get(name)
    # tuple equality tests identity first, so unchanged objects compare in O(length)
    if entry is not None and entry[0] == key:
        return entry[1]
    static = compute()
    store[name] = (key, static)
    return static


def scheduling_tree_from_runtime(
    pool_tree: Any,
    result: Any,
    total_resources: Vector,
    config: StrategyConfig | None = None,
    *,
    cache: BuildCache | None = None,
    delta: PeriodDelta | None = None,
) -> SchedulingTree:
    """Snapshot of ``pool_tree`` (``pooltree.tree.PoolTree``) with the shares of ``result`` (a FairShareResult).

    Pools pass their own starvation/preemption options (the snapshot resolves inheritance); operations pass
    their spec's preemption mode, scheduling tag filter, interruption signal and effective non-preemptible
    usage threshold. Elements missing from ``result`` get zero fair share. ``cache`` (kept by the caller between
    updates of the same tree) skips recomputing the static part of elements whose configuration is unchanged;
    ``delta`` (the period's changes of the tree, `pooltree.tree.delta`; found here when not given) says whether
    the previous build's rows stand as they are, need only some operations' rows, or the tree must be walked.
    """
    name = pool_tree.name
    config = config or StrategyConfig.from_options(pool_tree.config, f"pool_trees.{name}.config")
    cache = cache if cache is not None else BuildCache()
    bulk = _bulk(result.elements)
    last_runtime = cache.runtime
    built_at = None if last_runtime is None or last_runtime.key[0] is not pool_tree else last_runtime.key[1]
    if delta is None:
        delta = period_delta(pool_tree, built_at)
    revision = delta.revision
    runtime_key = (pool_tree, revision, pool_tree.config, config, name)
    if (
        bulk
        and last_runtime is not None
        and last_runtime.published is not None
        and cache.last is not None
        and delta.applies_to(pool_tree, built_at)
        and all(map(operator.is_, last_runtime.key[2:], runtime_key[2:]))
    ):
        try:
            if delta.unchanged:
                return _unchanged_structure(result.elements, total_resources, cache, last_runtime)
            changes = _operation_changes(pool_tree, cache, last_runtime, runtime_key, delta.operations or ())
            if changes is not None:
                # no row changed: the structure is the previous one (`with_shares`, same skeleton)
                rows_changed = changes if changes.removed or changes.added else None
                return _unchanged_structure(
                    result.elements, total_resources, cache, last_runtime, rows_changed
                )
        except BaseException:
            # the rows or the copies of the last result may be half brought up to date: the next build walks
            # the whole tree
            cache.runtime = None
            cache.last = None
            raise
    shares = _Shares(result.elements)
    tree_config = pool_tree.config
    elements: list[ElementSpec] = []
    statics: list[dict[str, Any]] = []
    ids: list[str] = []
    cacheable = True
    # chain[pool name]: the configuration objects its effective parameters are resolved from (root first)
    chain: dict[str, tuple[Any, ...]] = {}
    seen: set[str] = set()
    for pool_name, pool in pool_tree.pools.items():
        parent = pool.parent
        parent_chain = (tree_config,) if parent is None else chain.get(parent.name)
        if parent_chain is None:  # parent listed after the child: resolve its chain on the spot
            parent_chain = _chain(parent, tree_config)
        own_chain = (*parent_chain, pool.config)
        chain[pool_name] = own_chain
        key = (
            pool,
            pool.config,
            pool.ephemeral_config,
            pool.mode,
            pool.is_root,
            parent,
            None if parent is None else parent.name,
            own_chain,
        )
        static = _cached(
            cache.pools,
            seen,
            pool_name,
            key,
            lambda pool_name=pool_name, pool=pool: _pool_static(pool_tree, pool_name, pool),
        )
        statics.append(static)
        ids.append(pool_name)
        share = shares.get(pool_name)
        if share is None:
            elements.append(_spec(static, fair_share=np.zeros(RESOURCE_COUNT)))
        else:
            fair_share, demand_share, status, _, _ = share
            elements.append(
                _spec(static, fair_share=fair_share, demand_share=demand_share, scheduling_status=status)
            )
    _forget(cache.pools, seen)
    seen = set()
    operations = cache.operations
    registration: list[int] | None = []
    for op_id, op in pool_tree.operations.items():
        if not op.running:
            continue  # pending: not an element of the tree (YTsaurus)
        if registration is not None:
            index = getattr(op, "registration_index", None)
            if type(index) is not int or (registration and index <= registration[-1]):
                registration = None
            else:
                registration.append(index)
        op_pool = op.pool
        pool_chain = chain.get(op_pool.name)
        if pool_chain is None:
            pool_chain = _chain(op_pool, tree_config)
        spec = op.spec
        limits = op.resource_limits
        if cacheable and spec is not None and not _is_frozen(spec):
            cacheable = False  # a plain-map spec may change in place without a revision
        key = (
            op,
            _spec_values(spec),
            tuple(
                limits.tolist() if type(limits) is np.ndarray else np.asarray(limits, dtype=float).tolist()
            ),
            op_pool,
            op.running,
            op.suspended,
            op.start_time,
            pool_chain,
        )
        seen.add(op_id)
        entry = operations.get(op_id)
        # tuple equality tests identity first, so unchanged objects compare in O(length)
        if entry is not None and entry[0] == key:
            static = entry[1]
        else:
            static = _operation_static(pool_tree, op_id, op)
            operations[op_id] = (key, static)
        statics.append(static)
        ids.append(op_id)
        share = shares.get(op_id)
        if share is None:
            elements.append(_spec(static, fair_share=np.zeros(RESOURCE_COUNT)))
        else:
            fair_share, demand_share, status, weight, fifo_index = share
            elements.append(
                _spec(
                    static,
                    fair_share=fair_share,
                    demand_share=demand_share,
                    scheduling_status=status,
                    weight=weight,
                    fifo_index=fifo_index,
                )
            )
    _forget(cache.operations, seen)
    last = cache.last
    if (
        last is not None
        and last[1] is config
        and last[2].name == name
        and len(last[0]) == len(statics)
        and all(map(operator.is_, last[0], statics))
    ):
        tree = last[2].with_shares(total_resources, elements)
    else:
        tree = SchedulingTree(total_resources, elements, config, name=name)
    cache.last = (statics, config, tree)
    cache.runtime = None
    if bulk and cacheable:
        runtime = _LastRuntime(runtime_key, ids, statics, elements, registration)
        runtime.read(result.elements)
        cache.runtime = runtime
    return tree


class _OperationChanges:
    """What `_operation_changes` did to the previous build's rows, for `SchedulingTree.with_operation_changes`:
    the operations ``removed`` and ``added`` and the new ``children`` lists of their parents."""

    __slots__ = ("added", "children", "first_new_row", "removed")

    def __init__(
        self, removed: set[str], added: list[str], children: dict[str, list[str]], first_new_row: int = 0
    ):
        self.removed = removed
        self.added = added
        self.children = children
        self.first_new_row = first_new_row
        """The row of the first added operation (the rows before it are the previous rows without the removed)."""


def _operation_changes(
    pool_tree: Any,
    cache: BuildCache,
    last: _LastRuntime,
    runtime_key: tuple[Any, ...],
    changed: Collection[str],
) -> _OperationChanges | None:
    """Bring the previous build's rows up to the pool tree's revision when only the operations ``changed`` changed
    since (the period's delta): the rows of changed operations are dropped, and those running now get new rows at
    their place in registration order, with the static part the element walk computes (same cache key) and a spec
    the bulk path re-makes with this result's shares (their previous values are NaN, so they count as changed).
    None, with nothing changed, when the walk must run (rows not in registration order, a spec that is not a
    frozen model)."""
    registration = last.registration
    if registration is None or last.published is None or last.rows_from is not None:
        return None
    operations = pool_tree.operations
    arriving = []
    for op_id in changed:
        op = operations.get(op_id)
        if op is not None and op.running:
            if op.spec is not None and not _is_frozen(op.spec):
                return None
            index = getattr(op, "registration_index", None)
            if type(index) is not int:
                return None
            arriving.append((index, op_id, op))
    arriving.sort(key=operator.itemgetter(0))
    arriving_ids = {item[1] for item in arriving}
    operations_cache = cache.operations
    removed = {op_id for op_id in changed if op_id in operations_cache}
    if not removed and not arriving:  # e.g. operations registered to wait in a queue: no row changes
        last.key = runtime_key
        return _OperationChanges(removed, [], {})
    # the rows as lists edited in place (C-level moves)
    ids = list(last.ids)
    statics = list(last.statics)
    specs = list(last.specs)
    keys = list(registration)
    pool_rows = last.pool_rows
    doomed: list[int] = []
    if removed:
        doomed = sorted(
            (_row_of(op_id, ids, keys, pool_rows, operations_cache) for op_id in removed), reverse=True
        )
        for row in doomed:
            del ids[row], statics[row], specs[row], keys[row - pool_rows]
        for op_id in removed - arriving_ids:
            del operations_cache[op_id]
    inserted: list[int] = []  # the new rows, ascending (each insertion lands after the ones before it)
    tree_config = pool_tree.config
    parents: dict[str, list[str]] = {}  # parent → its arriving operations, in registration order
    previous_specs = cache.last[2].elements if cache.last is not None else {}
    for op_id in removed:
        parents.setdefault(previous_specs[op_id].parent or "", [])
    for index, op_id, op in arriving:
        spec = op.spec
        limits = op.resource_limits
        key = (
            op,
            _spec_values(spec),
            tuple(
                limits.tolist() if type(limits) is np.ndarray else np.asarray(limits, dtype=float).tolist()
            ),
            op.pool,
            op.running,
            op.suspended,
            op.start_time,
            _chain(op.pool, tree_config),
        )
        entry = operations_cache.get(op_id)
        if entry is not None and entry[0] == key:
            static = entry[1]
        else:
            static = _operation_static(pool_tree, op_id, op)
            operations_cache[op_id] = (key, static)
        parents.setdefault(static["parent"], []).append(op_id)
        at = bisect.bisect_left(keys, index)
        keys.insert(at, index)
        row = pool_rows + at
        ids.insert(row, op_id)
        statics.insert(row, static)
        specs.insert(row, _spec(static, fair_share=np.zeros(RESOURCE_COUNT)))  # re-made with the new shares
        inserted.append(row)
    # each row's previous row (-1: new): the old rows without the doomed ones, with the new ones inserted
    rows_from = (
        np.delete(np.arange(len(last.ids), dtype=np.intp), doomed) if doomed else np.arange(len(last.ids))
    )
    if inserted:
        # np.insert takes the places in the array before any insertion: the k-th new row minus k
        rows_from = np.insert(rows_from, np.array(inserted) - np.arange(len(inserted)), -1)
    is_op = last.is_op[np.where(rows_from < 0, 0, rows_from)]
    is_op[rows_from < 0] = True
    last.key = runtime_key
    last.ids = ids
    last.statics = statics
    last.specs = specs
    last.is_op = is_op
    last.registration = keys
    last.rows_from = rows_from
    return _OperationChanges(
        removed,
        [item[1] for item in arriving],
        _children(parents, cache.last[2] if cache.last is not None else None, removed, operations),
        inserted[0] if inserted else len(ids),
    )


def _row_of(
    op_id: str,
    ids: list[str],
    keys: list[int],
    pool_rows: int,
    operations_cache: dict[str, tuple[tuple[Any, ...], dict[str, Any]]],
) -> int:
    """The row of operation ``op_id``: found by its registration index among the operation rows' (``keys``, in
    row order from ``pool_rows`` on; the operation object is the first part of its cache key), checked, else
    looked for in ``ids``."""
    index = getattr(operations_cache[op_id][0][0], "registration_index", None)
    if type(index) is int:
        row = pool_rows + bisect.bisect_left(keys, index)
        if row < len(ids) and ids[row] == op_id:
            return row
    return ids.index(op_id, pool_rows)


def _children(
    parents: dict[str, list[str]],
    previous: SchedulingTree | None,
    removed: set[str],
    operations: Mapping[str, Any],
) -> dict[str, list[str]]:
    """The children lists, in build order, of the ``parents`` whose operations changed (each with its arriving
    operations in registration order): its pools as before, then its operations that stay and those arriving, in
    registration order (the order of the build's operation rows). Empty when there is no previous tree."""
    if previous is None:
        return {}
    specs = previous.elements
    out: dict[str, list[str]] = {}
    for parent, arriving in parents.items():
        pools: list[str] = []
        staying: list[str] = []
        for child in previous.children.get(parent, ()):
            if not specs[child].is_operation:
                pools.append(child)
            elif child not in removed:
                staying.append(child)
        if arriving:
            staying = [*staying, *arriving]
            staying.sort(key=lambda op_id: operations[op_id].registration_index)
        out[parent] = pools + staying
    return out


def _unchanged_structure(
    result_elements: Any,
    total_resources: Vector,
    cache: BuildCache,
    last: _LastRuntime,
    delta: _OperationChanges | None = None,
) -> SchedulingTree:
    """The build for a pool tree whose revision is unchanged: the previous specs, re-created only where the
    published values changed (the same specs the element walk would build, see `_Rows.spec`). With ``delta``
    (only operations changed, rows already brought up to date by `_operation_changes`) the tree is derived from
    the previous one (`SchedulingTree.with_operation_changes`).

    When the result has the previous result's rows (the usual period), the changed rows are found by comparing
    its arrays with the copies of the previous ones (`_Published.refresh`), and only they are read; otherwise
    (operations changed, or the result's rows moved) every row is gathered in build order from both results and
    compared, and the copies are taken anew."""
    assert cache.last is not None and last.published is not None
    result_ids = result_elements.ids
    changed: np.ndarray | None = None
    if last.rows_from is None and result_ids == last.result_ids:
        moved = last.published.refresh(result_elements.arrays)
        if moved is not None:
            changed = last.row_of[moved]
            changed = changed[changed >= 0]
            changed.sort()
            rows = _Rows(last.published, last.positions[changed])
    if changed is None:
        rows_from = last.rows_from
        if rows_from is None:
            previous = _Rows(last.published, last.positions)
        else:
            fresh = rows_from < 0
            previous = _Rows(
                last.published, np.where(fresh, -1, last.positions[np.where(fresh, 0, rows_from)])
            )
            previous.fair_share[fresh] = np.nan  # compares unequal: the new rows are re-specced
        last.read(result_elements)
        current = _Rows(last.published, last.positions)
        changed = current.changed(previous)
        rows = current.subset(changed)
    statics = last.statics
    specs = SpecRows(last.specs)
    prepared: Mapping[str, tuple[tuple[float, ...], tuple[float, ...], tuple[bool, ...]]] = {}
    if changed.size:
        prepared = _respec(rows, changed, last, specs)
    last.specs = specs
    specs.base = cache.last[2]  # the previous tree: the hints say how these specs derive from it
    try:
        if delta is None:
            tree = cache.last[2].with_shares(total_resources, specs)
        else:
            specs.ids = last.ids
            specs.tail = delta.first_new_row
            specs.children = delta.children
            tree = cache.last[2].with_operation_changes(total_resources, specs, delta.removed, delta.added)
    finally:
        # the hints are for this call only (and keep no tree alive until the next build); ``replaced`` is
        # rebound, never cleared: the tree may keep the list (`SchedulingTree.respecced`)
        specs.base = None
        specs.replaced = []
        specs.ids = None
        specs.children = None
    tree.prepared = prepared
    cache.last = (statics, cache.last[1], tree)
    return tree


def _spec_copier(name: str, given: tuple[str, ...]) -> Callable[..., ElementSpec]:
    """``name(spec, *given)``: a copy of ``spec`` with the ``given`` fields replaced. The fields are stored one
    by one in declaration order, as ``ElementSpec.__init__`` stores them, so CPython keeps them in the object's
    inline values: the copy is one object for the garbage collector to track, where a copy through ``__dict__``
    is two (the object and its dict). Generated once (as ``dataclasses`` generates ``__init__``), so adding a
    field to ``ElementSpec`` needs no change here."""
    lines = [f"def {name}(spec, {', '.join(given)}):", "    new = new_object(ElementSpec)"]
    for spec_field in dataclass_fields(ElementSpec):
        field_name = spec_field.name
        lines.append(f"    new.{field_name} = {field_name if field_name in given else 'spec.' + field_name}")
    lines.append("    return new")
    namespace: dict[str, Any] = {"new_object": object.__new__, "ElementSpec": ElementSpec}
    exec("\n".join(lines), namespace)
    copier: Callable[..., ElementSpec] = namespace[name]
    return copier


# CPython (3.11+) keeps an instance's attributes inline only while the class's shared key table knows their
# names; the table stops growing after a few dozen instances made without them (`_spec` assigns ``__dict__``).
# One instance through ``__init__`` before any `_spec` enters every field's name, in declaration order.
ElementSpec(id=ROOT_ID, parent=None)

_pool_with_shares = _spec_copier("_pool_with_shares", ("fair_share", "demand_share", "scheduling_status"))
_operation_with_shares = _spec_copier(
    "_operation_with_shares", ("fair_share", "demand_share", "scheduling_status", "weight", "fifo_index")
)


class _Prepared(Mapping[str, tuple[tuple[float, ...], tuple[float, ...], tuple[bool, ...]]]):
    """`SchedulingTree.prepared` of a bulk build: element id → (fair share, demand share, ``blocked``) tuples, the
    triple made when asked for. The three tuples are kept by `publish`; a triple per element kept until the next
    period would be one more surviving object per changed element for the collector (the row index dict holds
    only strings and ints, which CPython does not track)."""

    __slots__ = ("_blocked", "_demand", "_fair", "_rows")

    def __init__(
        self,
        rows: dict[str, int],
        fair: list[tuple[float, ...]],
        demand: list[tuple[float, ...]],
        blocked: list[tuple[bool, ...]],
    ) -> None:
        self._rows = rows
        self._fair = fair
        self._demand = demand
        self._blocked = blocked

    def __getitem__(self, key: str) -> tuple[tuple[float, ...], tuple[float, ...], tuple[bool, ...]]:
        k = self._rows[key]
        return self._fair[k], self._demand[k], self._blocked[k]

    def get(self, key: str, default: Any = None) -> Any:
        k = self._rows.get(key)
        if k is None:
            return default
        return self._fair[k], self._demand[k], self._blocked[k]

    def columns(
        self,
    ) -> tuple[dict[str, int], list[tuple[float, ...]], list[tuple[float, ...]], list[tuple[bool, ...]]]:
        """The row of each element id and the three columns (``self[key]`` is the row's triple), for a caller
        taking every triple without a call per element."""
        return self._rows, self._fair, self._demand, self._blocked

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


_MASK_BITS = 1 << np.arange(RESOURCE_COUNT, dtype=np.int64)
_BLOCKED_MASKS: tuple[tuple[bool, ...], ...] = tuple(
    tuple(bool(bits >> r & 1) for r in range(RESOURCE_COUNT)) for bits in range(1 << RESOURCE_COUNT)
)
"""Every ``blocked`` mask, indexed by its bits (resource r blocked: bit r)."""


def _respec(
    values: _Rows,
    changed: np.ndarray,
    last: _LastRuntime,
    specs: SpecRows,
) -> _Prepared:
    """New specs for the ``changed`` rows, converted in bulk: each is its previous spec (built from the same static
    part) with the new shares, status, weight and FIFO index, i.e. what `_Rows.spec` builds. Returns each
    element's fair share, demand share and ``blocked`` mask as the tuples `publish` would compute from the spec
    (`SchedulingTree.prepared`). The copies keep no ``__dict__`` of their own (`_spec_copier`): with usage
    moving most elements change every period, and each object less that survives a period is one less for the
    garbage collector's walks (see ``pooltree/gc_policy.py``)."""
    fair_share = values.fair_share
    demand_share = values.demand_share
    fair_rows = list(fair_share)  # row views, as the element walk hands out
    demand_rows = list(demand_share)
    # per row a tuple straight from the columns (the values `.tolist()` gives): no list per row on the way
    fair_tuples = list(zip(*fair_share.T.tolist(), strict=True))
    demand_tuples = list(zip(*demand_share.T.tolist(), strict=True))
    # a mask is one of 2**5 tuples of bools: each row gets the shared one (no new tuple per row to outlive it)
    masks = _BLOCKED_MASKS
    blocked = [masks[bits] for bits in ((fair_share >= demand_share) @ _MASK_BITS).tolist()]
    below = values.below.tolist()
    weight = values.weight.tolist()
    fifo = values.fifo.tolist()
    missing = values.missing.tolist()
    is_op = last.is_op[changed].tolist()
    ids = last.ids
    statics = last.statics
    rows: dict[str, int] = {}
    replaced = specs.replaced
    for k, row in enumerate(changed.tolist()):
        if missing[k]:
            spec = values.spec(statics[row], k, is_op[k])
        else:
            status = _BELOW if below[k] else _NORMAL
            if is_op[k]:
                spec = _operation_with_shares(
                    specs[row], fair_rows[k], demand_rows[k], status, weight[k], fifo[k]
                )
            else:
                spec = _pool_with_shares(specs[row], fair_rows[k], demand_rows[k], status)
            rows[ids[row]] = k
        specs[row] = spec
        replaced.append(spec)
    return _Prepared(rows, fair_tuples, demand_tuples, blocked)


def _chain(pool: Any, tree_config: Any) -> tuple[Any, ...]:
    """Configuration objects of ``pool`` and its ancestors, root first, after the tree's config."""
    configs = []
    cursor = pool
    while cursor is not None:
        configs.append(cursor.config)
        cursor = cursor.parent
    return (tree_config, *reversed(configs))


def _forget(store: dict[str, Any], seen: set[str]) -> None:
    if len(store) > len(seen):
        for stale in [name for name in store if name not in seen]:
            del store[stale]
