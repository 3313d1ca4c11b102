"""One fair-share update of a pool tree (yt-semantics §b, steps in the order of b.2).

The element tree is flattened once in breadth-first order, so the children of every pool are contiguous
and every depth level is a contiguous range: per-element rules then run as numpy operations over whole
levels, and fair-share functions are built level by level in ``FunctionBatch`` objects.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import is_not
from typing import Any

import numpy as np

from pooltree.errors import ConfigError, PooltreeError
from pooltree.fairshare import functions as fn
from pooltree.fairshare import improved
from pooltree.fairshare.compiled import read_vectors
from pooltree.fairshare.model import (
    FIFO_SORT_PARAMETERS,
    GUARANTEE_TYPES,
    POOL_MODES,
    DetailedFairShare,
    Element,
    ElementResult,
    FairShareResult,
    Operation,
    Pool,
    UpdateSettings,
    UpdateState,
)
from pooltree.fairshare.status import BELOW_FAIR_SHARE, NORMAL, is_below_fair_share, local_satisfaction_ratio
from pooltree.resources import RESOURCE_COUNT, RESOURCES, Vector

EPSILON = 1e-9  # "nearly dominates" inside the update (newest vector_hdrf Epsilon)
GUARANTEES_OVERCOMMIT = 29000
_DEFAULT_FIFO_SORT = ("weight", "start_time")
NESTED_PROMISED_GUARANTEE_POOLS = 29001
PRIORITY_POOLS_WITHOUT_DONOR = 29002


def floating_point_inverse_lower_bound(lo: float, hi: float, predicate: Callable[[float], bool]) -> float:
    """Largest x in [lo, hi] with a monotone predicate true (bisection to double precision, bounded)."""
    if predicate(hi):
        return hi
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if mid <= lo or mid >= hi:
            break
        if predicate(mid):
            lo = mid
        else:
            hi = mid
    return lo


def adjust_proposed_integral_share(limits: Vector, strong: Vector, proposed: Vector) -> Vector:
    """Make strong + proposed fit into limits when it overshoots by rounding (b.9)."""
    if np.all(limits >= strong + proposed):
        return proposed
    proposed = np.maximum(limits - strong, 0.0)
    for r in range(RESOURCE_COUNT):
        for _ in range(32):
            if limits[r] >= strong[r] + proposed[r]:
                break
            proposed[r] = np.nextafter(proposed[r], 0.0)
    return proposed


def _share(x: np.ndarray, total: np.ndarray) -> np.ndarray:
    positive = total > 0
    return np.where(positive, x / np.where(positive, total, 1.0), 0.0)


@dataclass(eq=False, slots=True)
class _Level:
    """Pools of one depth level that have children, and those children (contiguous in breadth-first order)."""

    parents: np.ndarray
    children: np.ndarray  # the whole next level, in parent order
    seg: np.ndarray  # start of every parent's children within ``children``
    slot: np.ndarray  # position in ``parents`` of every child's parent


@dataclass(eq=False)
class _Tree:
    """The element tree in breadth-first order with per-element input arrays."""

    elements: list[Element]
    ids: list[str]
    parent: np.ndarray
    depth: np.ndarray
    child_start: np.ndarray
    child_count: np.ndarray
    is_op: np.ndarray
    level_start: np.ndarray  # level d occupies [level_start[d], level_start[d + 1])
    _levels: list[_Level] | None = None

    def children(self, i: int) -> range:
        start = int(self.child_start[i])
        return range(start, start + int(self.child_count[i]))

    def parent_levels(self, *, bottom_up: bool = False) -> list[_Level]:
        """Every depth level that has pools with children, with its children's contiguous block (top-down)."""
        if self._levels is None:
            self._levels = self._parent_levels()
        return self._levels[::-1] if bottom_up else self._levels

    def _parent_levels(self) -> list[_Level]:
        levels = []
        for d in range(len(self.level_start) - 2):
            lo, hi = self.level_start[d], self.level_start[d + 1]
            parents = np.arange(lo, hi)
            parents = parents[self.child_count[parents] > 0]
            if len(parents) == 0:
                continue
            clo, chi = int(self.level_start[d + 1]), int(self.level_start[d + 2])
            counts = self.child_count[parents]
            levels.append(
                _Level(
                    parents=parents,
                    children=np.arange(clo, chi),
                    seg=self.child_start[parents] - clo,
                    slot=np.repeat(np.arange(len(parents)), counts),
                )
            )
        return levels

    def subtree(self, i: int) -> np.ndarray:
        """Indices of i and its descendants, sorted (so levels stay in breadth-first order)."""
        inside = np.zeros(len(self.ids), dtype=bool)
        inside[i] = True
        for level in self.parent_levels():
            inside[level.children] |= inside[level.parents][level.slot]
        return np.flatnonzero(inside)


def _path(element: Element, field_name: str) -> str:
    kind = "operations" if isinstance(element, Operation) else "pools"
    return f"{kind}.{element.id}.{field_name}"


def _vector(element: Element, field_name: str, value: object, *, allow_inf: bool = False) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if arr.shape != (RESOURCE_COUNT,):
        raise ConfigError(_path(element, field_name), f"expected a vector of {RESOURCE_COUNT} resources")
    if np.any(np.isnan(arr)) or np.any(arr < 0) or (not allow_inf and not np.all(np.isfinite(arr))):
        raise ConfigError(
            _path(element, field_name), f"resources must be non-negative and finite, got {arr.tolist()}"
        )
    return arr


def _stack(elements: list[Any], field_name: str, rows: list[Any]) -> np.ndarray:
    """Rows of 5 resources as an (n, 5) float array; a row of another shape is an error naming its element."""
    fast = read_vectors(rows)  # every row a float64 numpy vector of 5 (the usual case): one compiled copy
    if fast is not None:
        return fast
    try:
        arr = np.array(rows, dtype=float)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.shape != (len(rows), RESOURCE_COUNT):
        for e, row in zip(elements, rows, strict=True):
            try:
                ok = np.shape(np.asarray(row, dtype=float)) == (RESOURCE_COUNT,)
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ConfigError(_path(e, field_name), f"expected a vector of {RESOURCE_COUNT} resources")
        arr = np.array(rows, dtype=float).reshape(len(rows), RESOURCE_COUNT)
    return arr


def _weights(elements: list[Element], weights: list[Any]) -> np.ndarray:
    """Configured weights as floats (NaN where unset); a bad weight is an error naming its element."""
    kinds = set(map(type, weights))
    if kinds <= {float, int, type(None)}:
        arr = np.array(weights, dtype=float)  # None becomes NaN
        unset = weights.count(None)
        if int(np.isnan(arr).sum()) == unset and bool(
            np.all(np.isnan(arr) | (np.isfinite(arr) & (arr >= 0)))
        ):
            return arr
    for e, w in zip(elements, weights, strict=True):
        if w is None:
            continue
        if not (isinstance(w, int | float) and not isinstance(w, bool) and math.isfinite(w) and w >= 0):
            raise ConfigError(_path(e, "weight"), f"must be a non-negative finite number, got {w!r}")
    return np.array([np.nan if w is None else float(w) for w in weights], dtype=float)


def _flatten(root: Pool) -> _Tree:
    """Breadth-first order, built level by level: the children of a whole level are appended as one block.

    Per-level work runs in C (``chain``, ``map``) and builds no per-pool tuples: tuples are tracked by the
    garbage collector, and a collection started here walks the whole young element list.
    """
    if not isinstance(root, Pool):
        raise ConfigError("pools", "the root must be a Pool")
    elements: list[Element] = [root]
    pool_index: list[int] = []  # every pool, level by level, with the number of its children
    pool_count: list[int] = []
    is_op: list[bool] = [False]
    level_start = [0]
    level_pools = [0]
    while level_pools:
        level_start.append(len(elements))
        child_lists = [elements[i].children or () for i in level_pools]  # type: ignore[attr-defined]
        counts = list(map(len, child_lists))  # children must be sized lists, as before
        block = list(chain.from_iterable(child_lists))
        kinds = list(map(isinstance, block, repeat(Operation)))
        base = len(elements)
        next_pools = [] if all(kinds) else _child_pools(elements, level_pools, block, kinds, base)
        pool_index += level_pools
        pool_count += counts
        elements += block
        is_op += kinds
        level_pools = next_pools
    if len(elements) > level_start[-1]:
        level_start.append(len(elements))
    ids = [e.id for e in elements]
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        for e in elements:
            if e.id in seen:
                raise ConfigError(_path(e, "id"), f"duplicate element id {e.id!r}")
            seen.add(e.id)
    child_count = np.zeros(len(elements), dtype=np.int64)
    child_count[pool_index] = pool_count
    starts = np.concatenate([[1], 1 + np.cumsum(child_count)[:-1]]).astype(np.int64)
    # Children are appended pool by pool, so parents are the pool indices repeated by their child counts.
    parent = np.concatenate([[-1], np.repeat(np.array(pool_index, dtype=np.int64), pool_count)])
    level_arr = np.array(level_start, dtype=np.int64)
    depth = np.repeat(np.arange(len(level_arr) - 1), np.diff(level_arr))
    return _Tree(
        elements=elements,
        ids=ids,
        parent=parent,
        depth=depth,
        child_start=starts,
        child_count=child_count,
        is_op=np.frombuffer(bytes(is_op), dtype=bool).copy(),  # isinstance gives real bools: bytes 0/1
        level_start=level_arr,
    )


def _child_pools(
    elements: list[Element], level_pools: list[int], block: list[Any], kinds: list[bool], base: int
) -> list[int]:
    """Indices of the pools in a level's block of children; a child of another type is an error naming its parent."""
    next_pools: list[int] = []
    k = 0
    for i in level_pools:
        for c in elements[i].children or ():  # type: ignore[attr-defined]
            if not kinds[k]:
                if not isinstance(c, Pool):
                    raise ConfigError(
                        _path(elements[i], "children"), f"child {c!r} is neither a Pool nor an Operation"
                    )
                next_pools.append(base + k)
            k += 1
    return next_pools


def _read_interleaved(*columns: list[Any]) -> np.ndarray | None:
    """Rows of several vector fields of the same elements as a (rows, fields, 5) array, or None (see ``_stack``).

    The rows are copied element by element (all fields of one element, then the next): an element's vectors
    were mostly allocated together, and reading them side by side costs about half the time (cache misses)
    of reading one field of every element after another. None sends the caller to ``_stack``'s slow path.
    """
    k = len(columns)
    rows: list[Any] = [None] * (k * len(columns[0]))
    for f, column in enumerate(columns):
        rows[f::k] = column
    out = read_vectors(rows)
    return None if out is None else out.reshape(len(columns[0]), k, RESOURCE_COUNT)


def _pool_inputs(
    tree: _Tree, pool_idx: np.ndarray, pools: list[Pool]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pools' fifo flags, integral guarantee types and specified guarantee resources (``spec_mask``).

    The checks run pool by pool in a fixed order and raise for the first bad pool.
    """
    n = len(tree.elements)
    fifo = np.zeros(n, dtype=bool)
    integral_type = np.zeros(n, dtype=np.int8)
    spec_mask = np.zeros((n, RESOURCE_COUNT), dtype=bool)
    for i, e in zip(pool_idx.tolist(), pools, strict=True):
        if e.mode not in POOL_MODES:
            raise ConfigError(_path(e, "mode"), f"must be one of {', '.join(POOL_MODES)}, got {e.mode!r}")
        fifo[i] = e.mode == "fifo"
        for name in e.specified_guarantee_resources:
            if name not in RESOURCES:
                raise ConfigError(_path(e, "specified_guarantee_resources"), f"unknown resource {name!r}")
            spec_mask[i, RESOURCES.index(name)] = True
        guarantee_type = e.integral_guarantees.guarantee_type
        if guarantee_type != "none":
            if guarantee_type not in GUARANTEE_TYPES:
                raise ConfigError(
                    _path(e, "integral_guarantees.guarantee_type"),
                    f"must be one of {', '.join(GUARANTEE_TYPES)}, got {guarantee_type!r}",
                )
            integral_type[i] = GUARANTEE_TYPES.index(guarantee_type)
        if fifo[i]:
            for c in e.children:
                if isinstance(c, Pool):
                    raise ConfigError(_path(e, "mode"), f"a fifo pool cannot contain pools (child {c.id!r})")
        params = e.fifo_sort_parameters
        if params != _DEFAULT_FIFO_SORT and (
            not params or any(p not in FIFO_SORT_PARAMETERS for p in params)
        ):
            raise ConfigError(
                _path(e, "fifo_sort_parameters"),
                f"must be a non-empty list of {', '.join(FIFO_SORT_PARAMETERS)}",
            )
    return fifo, integral_type, spec_mask


def _child_ranges(tree: _Tree, pools: np.ndarray) -> np.ndarray:
    """Children of ``pools``, pool by pool (each pool's children are one contiguous block)."""
    counts = tree.child_count[pools]
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    block = np.zeros(len(pools) + 1, dtype=np.int64)
    np.cumsum(counts, out=block[1:])
    return np.repeat(tree.child_start[pools] - block[:-1], counts) + np.arange(total)


def _sum_children_into(tree: _Tree, values: np.ndarray, *, own: bool = False) -> None:
    """Bottom-up, in place: values[p] = Σ values[children of p] (``own``: values[p] += that sum, subtree totals)."""
    for level in tree.parent_levels(bottom_up=True):
        sums = np.add.reduceat(values[level.children], level.seg, axis=0)
        if own:
            values[level.parents] += sums
        else:
            values[level.parents] = sums


class _Update:
    """State of one update run; methods follow the steps of b.2."""

    def __init__(
        self, root: Pool, total: Vector, settings: UpdateSettings, now: float, state: UpdateState | None
    ):
        self.settings = settings
        self.now = float(now)
        self.state = state or UpdateState()
        self.errors: list[PooltreeError] = []
        self.total = np.asarray(total, dtype=float)
        if (
            self.total.shape != (RESOURCE_COUNT,)
            or not np.all(np.isfinite(self.total))
            or np.any(self.total < 0)
        ):
            raise ConfigError("total_resources", "expected 5 non-negative finite resource amounts")
        if settings.main_resource not in RESOURCES:
            raise ConfigError("settings.main_resource", f"unknown resource {settings.main_resource!r}")
        m = settings.infer_weight_from_guarantees_share_multiplier
        if m is not None and not (math.isfinite(m) and m >= 1.0):
            raise ConfigError(
                "settings.infer_weight_from_guarantees_share_multiplier", "must be a number ≥ 1"
            )
        if settings.integral_smooth_period <= 0:
            raise ConfigError("settings.integral_smooth_period", "must be positive")
        if settings.fifo_pool_scheduling_order not in ("satisfaction", "fifo"):
            raise ConfigError("settings.fifo_pool_scheduling_order", "must be 'satisfaction' or 'fifo'")
        self.tree = _flatten(root)
        self._base_functions: tuple[fn.FunctionTable, np.ndarray, np.ndarray] | None = None
        self._read_inputs()

    # ---- inputs (b.1) -------------------------------------------------------------------------------
    def _read_inputs(self) -> None:
        """Gather every element's inputs into arrays, then validate them (the checks run in a fixed order).

        One comprehension per attribute (a slot read the interpreter specialises, cheaper than one
        ``attrgetter`` of all fields), vectors copied per element (``_read_interleaved``).
        """
        tree = self.tree
        elements = tree.elements
        n = len(elements)
        total = self.total
        is_op = tree.is_op
        op_idx = np.flatnonzero(is_op)
        pool_idx = np.flatnonzero(~is_op)
        ops: list[Operation] = list(compress(elements, is_op.tolist()))  # type: ignore[arg-type]
        pools: list[Pool] = [elements[i] for i in pool_idx.tolist()]  # type: ignore[misc]
        main = RESOURCES.index(self.settings.main_resource)
        weights = [e.weight for e in elements]
        weight_cfg = _weights(elements, weights)
        msr = np.array([e.max_share_ratio for e in elements], dtype=float)
        bad = np.flatnonzero(~((msr >= 0.0) & (msr <= 1.0)))
        if len(bad):
            e = elements[int(bad[0])]
            raise ConfigError(_path(e, "max_share_ratio"), f"must be in [0, 1], got {e.max_share_ratio!r}")
        tol = np.array([e.starvation_tolerance for e in elements], dtype=float)
        bad = np.flatnonzero(~((tol >= 0.0) & (tol <= 1.0)))
        if len(bad):
            e = elements[int(bad[0])]
            raise ConfigError(
                _path(e, "starvation_tolerance"), f"must be in [0, 1], got {e.starvation_tolerance!r}"
            )
        tag_rows = [e.tag_filter_resource_limits for e in elements]
        # Almost no element has a tag filter: find the few that do without a Python-level loop.
        tagged = list(compress(range(n), map(is_not, tag_rows, repeat(None))))
        # Every vector is read here; a None (some row is not a float64 vector of 5) sends the rows of that
        # kind through ``_stack`` below, which converts them or raises for the first bad element as before.
        usage_rows = [e.usage for e in ops]
        demand_rows = [e.demand for e in ops]
        op_vectors = _read_interleaved(usage_rows, demand_rows, [e.specified_resource_limits for e in ops])
        strong_rows = [e.strong_guarantee_resources for e in pools]
        pool_vectors = _read_interleaved(strong_rows, [e.specified_resource_limits for e in pools])
        usage = np.zeros((n, RESOURCE_COUNT))
        demand = np.zeros((n, RESOURCE_COUNT))
        strong = np.zeros((n, RESOURCE_COUNT))
        self.schedulable = np.ones(n, dtype=bool)
        self.step = np.zeros(n, dtype=bool)
        apply_limits = np.zeros(n, dtype=bool)
        if ops:
            if op_vectors is None:
                usage[op_idx] = _stack(ops, "usage", usage_rows)
                demand[op_idx] = _stack(ops, "demand", demand_rows)
            else:
                usage[op_idx] = op_vectors[:, 0]
                demand[op_idx] = op_vectors[:, 1]
            self.schedulable[op_idx] = np.array([e.schedulable for e in ops], dtype=bool)
            self.step[op_idx] = np.array([e.is_gang for e in ops], dtype=bool)
            apply_limits[op_idx] = np.array(
                [e.apply_specified_resource_limits_to_demand for e in ops], dtype=bool
            )
        if pool_vectors is None:
            strong[pool_idx] = _stack(pools, "strong_guarantee_resources", strong_rows)
        else:
            strong[pool_idx] = pool_vectors[:, 0]
        self.fifo, self.integral_type, spec_mask = _pool_inputs(tree, pool_idx, pools)
        if op_vectors is None or pool_vectors is None:
            specified = [e.specified_resource_limits for e in elements]
            self.specified_limits = _stack(elements, "specified_resource_limits", specified)
        else:
            self.specified_limits = np.empty((n, RESOURCE_COUNT))
            self.specified_limits[op_idx] = op_vectors[:, 2]
            self.specified_limits[pool_idx] = pool_vectors[:, 1]
        # Element 0 is the root; its own limits are the totals.
        self.usage = usage
        self.demand = demand
        self.tag_limits = np.tile(total, (n, 1))
        if tagged:
            self.tag_limits[tagged] = _stack(
                [elements[i] for i in tagged], "tag_filter_resource_limits", [tag_rows[i] for i in tagged]
            )
        self.strong_config = strong
        for name, arr, allow_inf in (
            ("usage", self.usage, False),
            ("demand", self.demand, False),
            ("specified_resource_limits", self.specified_limits, True),
            ("tag_filter_resource_limits", self.tag_limits, True),
            ("strong_guarantee_resources", self.strong_config, False),
        ):
            # ``0 <= x`` is false for NaN and negatives, ``x < inf`` for infinities: one test of the whole
            # array in the usual case, the rows only when something is wrong.
            good = arr >= 0 if allow_inf else (arr >= 0) & (arr < np.inf)
            if good.all():
                continue
            bad = np.isnan(arr) | (arr < 0) | (~np.isfinite(arr) if not allow_inf else False)
            rows = np.flatnonzero(fn.row_any(bad))
            if len(rows):
                e = tree.elements[int(rows[0])]
                raise ConfigError(
                    _path(e, name), f"resources must be non-negative numbers, got {arr[rows[0]].tolist()}"
                )
        short = np.flatnonzero(fn.row_any(self.demand < self.usage) & tree.is_op)
        if len(short):
            e = tree.elements[int(short[0])]
            raise ConfigError(
                _path(e, "demand"), "demand must include usage (demand ≥ usage in every resource)"
            )
        # Pools specify their main resource whenever they specify a strong guarantee (master validation).
        self.spec_mask = spec_mask
        self.spec_mask[:, main] = True
        self.weight_cfg = weight_cfg
        self.max_share_ratio = msr
        self.tolerance = tol
        self.apply_limits = apply_limits

    # ---- b.1, b.4 (attributes) ----------------------------------------------------------------------
    def compute_attributes(self) -> None:
        tree, total = self.tree, self.total
        is_op = tree.is_op
        # Operation demand (b.1).
        demand = self.demand
        not_running = is_op & ~self.schedulable
        demand[not_running] = self.usage[not_running]
        lim = self.apply_limits & is_op
        if np.any(lim):
            needed = np.maximum(np.minimum(demand[lim], self.specified_limits[lim]) - self.usage[lim], 0.0)
            demand[lim] = self.usage[lim] + needed
        _sum_children_into(tree, self.usage)
        _sum_children_into(tree, demand)
        limits = np.minimum(
            np.minimum(self.tag_limits, total * self.max_share_ratio[:, None]), self.specified_limits
        )
        limits[0] = total
        self.resource_limits = limits
        self.limits_share = _share(np.minimum(limits, total), total)
        self.usage_share = _share(self.usage, total)
        self.demand_share = _share(demand, total)
        # Dominant resource: on usage if non-zero, else on demand; ties to the earlier resource; zero -> cpu.
        basis = np.where(fn.row_any(self.usage > 0)[:, None], self.usage_share, self.demand_share)
        basis = np.where(total > 0, basis, 0.0)
        best = np.argmax(basis, axis=1)
        best = np.where(fn.row_max(basis) > 0, best, RESOURCES.index("cpu"))
        self.dominant = best

    # ---- b.3 ----------------------------------------------------------------------------------------
    def infer_strong_guarantees(self) -> None:
        tree = self.tree
        main = RESOURCES.index(self.settings.main_resource)
        inferred = self.strong_config.copy()
        inferred[0] = self.total
        for level in tree.parent_levels():
            parents, children, seg, slot = level.parents, level.children, level.seg, level.slot
            par = tree.parent[children]
            explicit = self.strong_config[children]
            explicit_sum = np.add.reduceat(explicit, seg, axis=0)
            parent_inferred = inferred[parents]
            residual = np.maximum(parent_inferred - explicit_sum, 0.0)
            p_main = inferred[par, main]
            ratio = np.where(p_main > 0, explicit[:, main] / np.where(p_main > 0, p_main, 1.0), 0.0)
            implicit_mask = ~self.spec_mask[children]
            implicit_mask[:, main] = False
            implicit = np.where(implicit_mask, ratio[:, None] * inferred[par], 0.0)
            implicit_sum = np.add.reduceat(implicit, seg, axis=0)
            scale = np.ones_like(implicit_sum)
            over = (implicit_sum > residual) & (parents != 0)[:, None]
            scale[over] = residual[over] / implicit_sum[over]
            implicit = implicit * scale[slot]
            inferred[children] = np.where(implicit_mask, implicit, explicit)
        self.inferred = inferred

    # ---- b.2 step 4 (cumulative integral attributes) --------------------------------------------------
    def compute_integral_ratios(self) -> None:
        tree, total = self.tree, self.total
        n = len(tree.elements)
        self.burst_ratio = np.zeros(n)
        self.flow_ratio = np.zeros(n)
        self.integral_pools = np.flatnonzero(self.integral_type > 0)
        for i in self.integral_pools:
            ig = tree.elements[i].integral_guarantees  # type: ignore[attr-defined]
            burst = _vector(
                tree.elements[i],
                "integral_guarantees.burst_guarantee_resources",
                ig.burst_guarantee_resources,
            )
            flow = _vector(tree.elements[i], "integral_guarantees.resource_flow", ig.resource_flow)
            positive = total > 0
            self.burst_ratio[i] = float(np.max(burst[positive] / total[positive], initial=0.0))
            self.flow_ratio[i] = float(np.max(flow[positive] / total[positive], initial=0.0))
        if len(self.integral_pools):
            # Burst, then relaxed pools, each in depth-first pre-order (InitIntegralPoolLists).
            order = self._preorder_rank()
            ranked = sorted(self.integral_pools.tolist(), key=lambda i: order[i])
            self.burst_pools = [i for i in ranked if self.integral_type[i] == 1]
            self.relaxed_pools = [i for i in ranked if self.integral_type[i] == 2]
        else:
            self.burst_pools, self.relaxed_pools = [], []
        self.total_burst_ratio = self.burst_ratio.copy()
        self.total_flow_ratio = self.flow_ratio.copy()
        both = np.stack([self.total_burst_ratio, self.total_flow_ratio], axis=1)
        _sum_children_into(tree, both, own=True)
        self.total_burst_ratio, self.total_flow_ratio = both[:, 0].copy(), both[:, 1].copy()

    def _preorder_rank(self) -> dict[int, tuple[int, ...]]:
        """Depth-first pre-order keys of the integral pools: their root paths compare lexicographically."""
        tree = self.tree
        keys: dict[int, tuple[int, ...]] = {}
        for i in self.integral_pools.tolist():
            path = []
            j = i
            while j > 0:
                path.append(j)
                j = int(tree.parent[j])
            keys[i] = tuple(reversed(path))
        return keys

    # ---- b.7 volume accounting ----------------------------------------------------------------------
    def consume_and_refill(self) -> None:
        tree, total, st = self.tree, self.total, self.state
        n = len(tree.elements)
        self.volume: dict[int, np.ndarray] = {}
        self.last_ratio: dict[int, float] = {}
        self.capacity: dict[int, np.ndarray] = {}
        overflow = np.zeros((n, RESOURCE_COUNT))
        acceptable = np.zeros((n, RESOURCE_COUNT))
        period = self.settings.integral_pool_capacity_saturation_period
        for i in self.integral_pools:
            pid = tree.ids[i]
            volume = np.array(st.accumulated_resource_volume.get(pid, np.zeros(RESOURCE_COUNT)), dtype=float)
            self.last_ratio[i] = float(st.last_integral_share_ratio.get(pid, 0.0))
            capacity = total * self.flow_ratio[i] * period
            self.capacity[i] = capacity
            if st.previous_update_time is not None and np.any(total != 0):
                dt = self.now - st.previous_update_time
                old = volume.copy()
                volume = volume + total * dt * self.flow_ratio[i] - total * dt * self.last_ratio[i]
                volume = np.maximum(volume, 0.0)
                upper = np.maximum(old, capacity)
                overflow[i] = np.maximum(volume - upper, 0.0)
                if tree.elements[i].integral_guarantees.can_accept_free_volume:  # type: ignore[attr-defined]
                    acceptable[i] = np.maximum(capacity - volume, 0.0)
                volume = np.minimum(volume, upper)
            self.volume[i] = volume
        # Free volume only ever reaches integral pools through a pool that distributes it.
        distributing = any(
            tree.elements[i].integral_guarantees.should_distribute_free_volume_among_children  # type: ignore[attr-defined]
            for i in np.flatnonzero(~tree.is_op)[1:].tolist()
        )
        if len(self.integral_pools) and st.previous_update_time is not None and distributing:
            self._distribute_free_volume(overflow, acceptable)

    def _distribute_free_volume(self, overflow: np.ndarray, acceptable: np.ndarray) -> None:
        """Overflow of integral pools flows up through plain pools and, where enabled, down to hungry pools."""
        tree = self.tree
        children_overflow = np.zeros_like(overflow)

        def pool_children(i: int) -> list[int]:
            return [c for c in tree.children(i) if not tree.is_op[c]]

        def gather(i: int) -> None:
            if self.integral_type[i] > 0:
                return
            kids = pool_children(i)
            for c in kids:
                gather(c)
            child_acceptable = np.zeros(RESOURCE_COUNT)
            for c in kids:
                children_overflow[i] += overflow[c]
                child_acceptable += acceptable[c]
            diff = children_overflow[i] - child_acceptable
            can_accept = i != 0 and tree.elements[i].integral_guarantees.can_accept_free_volume  # type: ignore[attr-defined]
            overflow[i] = np.where(diff > 0, diff, 0.0)
            acceptable[i] = np.where(diff > 0, 0.0, -diff if can_accept else 0.0)

        gather(0)
        accepted = np.zeros_like(overflow)

        def distribute(i: int) -> None:
            free = accepted[i].copy()
            if self.integral_type[i] > 0:
                self.volume[i] = self.volume[i] + free
                return
            element = tree.elements[i]
            should = i != 0 and element.integral_guarantees.should_distribute_free_volume_among_children  # type: ignore[attr-defined]
            kids = pool_children(i)
            if should and not (np.all(free == 0) and np.all(children_overflow[i] == 0)):
                free = free + children_overflow[i]
                for r in range(RESOURCE_COUNT):
                    if free[r] == 0:
                        continue
                    hungry = [
                        c for c in kids if acceptable[c, r] > EPSILON and self.total_flow_ratio[c] > EPSILON
                    ]
                    weight_sum = sum(self.total_flow_ratio[c] for c in hungry)
                    hungry.sort(key=lambda c: acceptable[c, r] / self.total_flow_ratio[c])
                    k = 0
                    while k < len(hungry):
                        c = hungry[k]
                        suggested = free[r] * (self.total_flow_ratio[c] / weight_sum)
                        if suggested < acceptable[c, r]:
                            break
                        accepted[c, r] = acceptable[c, r]
                        free[r] -= acceptable[c, r]
                        weight_sum -= self.total_flow_ratio[c]
                        k += 1
                    for c in hungry[k:]:
                        accepted[c, r] = free[r] * (self.total_flow_ratio[c] / weight_sum)
            for c in kids:
                distribute(c)

        distribute(0)

    def volume_ratio(self, i: int) -> float:
        total = self.total
        positive = total > 0
        if not np.any(positive):
            return 0.0
        return (
            float(np.min(self.volume[i][positive] / total[positive])) / self.settings.integral_smooth_period
        )

    # ---- b.4 ----------------------------------------------------------------------------------------
    def adjust_guarantees(self) -> None:
        tree, total = self.tree, self.total
        sgs = _share(self.inferred, total)
        top = (
            np.arange(tree.level_start[1], tree.level_start[2])
            if len(tree.level_start) > 2
            else np.zeros(0, int)
        )
        sgs[0] = sgs[top].sum(axis=0)
        strong_total = self.inferred[top].sum(axis=0)
        flow = total * self.total_flow_ratio[0]
        burst = total * self.total_burst_ratio[0]
        attrs = {
            "total_cluster_resources": total.tolist(),
            "total_strong_guarantee_resources": strong_total.tolist(),
        }
        if not np.all(total >= strong_total + flow):
            self.errors.append(
                PooltreeError(
                    "Strong guarantees and resource flows exceed total cluster resources",
                    code=GUARANTEES_OVERCOMMIT,
                    attributes={**attrs, "total_resource_flow": flow.tolist()},
                )
            )
        if not np.all(total >= strong_total + burst):
            self.errors.append(
                PooltreeError(
                    "Strong guarantees and burst guarantees exceed total cluster resources",
                    code=GUARANTEES_OVERCOMMIT,
                    attributes={**attrs, "total_burst_resources": burst.tolist()},
                )
            )
            burst_sum = sum(self.burst_ratio[i] for i in self.burst_pools)
            root_sgs = sgs[0].copy()
            factor = floating_point_inverse_lower_bound(
                0.0, 1.0, lambda f: bool(np.all(root_sgs * f + burst_sum * f <= 1.0))
            )
            sgs[0] = root_sgs * factor
            for i in self.burst_pools:
                self.burst_ratio[i] *= factor
        # Top-down: own guarantee within own limits, children's sum within own guarantee.
        ls = self.limits_share
        for d in range(len(tree.level_start) - 1):
            lo, hi = tree.level_start[d], tree.level_start[d + 1]
            pools = np.arange(lo, hi)
            pools = pools[~tree.is_op[pools]]
            sgs[pools] = np.minimum(sgs[pools], ls[pools])
            parents = pools[tree.child_count[pools] > 0]
            if len(parents) == 0 or d + 2 > len(tree.level_start) - 1:
                continue
            clo = tree.level_start[d + 1]
            sums = np.add.reduceat(
                sgs[clo : tree.level_start[d + 2]], tree.child_start[parents] - clo, axis=0
            )
            over = np.flatnonzero(fn.row_any(sums > sgs[parents]))
            for k in over:
                p = int(parents[k])
                kids = np.array(tree.children(p))
                sgs[kids] = _shrink_guarantees(sgs[kids].copy(), self.priority[kids], np.maximum(sgs[p], 0.0))
        self.sgs = sgs

    def validate_priority_pools(self) -> None:
        """b.2 step 1: pools in the priority guarantee tier need a donor ancestor (alert 29002, else regular)."""
        tree = self.tree
        n = len(tree.elements)
        flagged = np.zeros(n, dtype=bool)
        donor = np.zeros(n, dtype=bool)
        for i in np.flatnonzero(~tree.is_op):
            pool = tree.elements[i]
            flagged[i] = bool(pool.enable_priority_strong_guarantee_adjustment)  # type: ignore[attr-defined]
            donor[i] = bool(pool.enable_priority_strong_guarantee_adjustment_donorship)  # type: ignore[attr-defined]
        # Whether some strict ancestor is a donor, top-down.
        donor_above = np.zeros(n, dtype=bool)
        for level in tree.parent_levels():
            parents_donor = donor_above[level.parents] | donor[level.parents]
            donor_above[level.children] = parents_donor[level.slot]
        orphans = np.flatnonzero(flagged & ~donor_above)
        if len(orphans):
            self.errors.append(
                PooltreeError(
                    "Found pools with enabled priority strong guarantee adjustment which have no donor ancestor",
                    code=PRIORITY_POOLS_WITHOUT_DONOR,
                    attributes={"pools_without_donor": [tree.ids[i] for i in orphans]},
                )
            )
        self.priority = flagged & donor_above

    # ---- b.6 ----------------------------------------------------------------------------------------
    def compute_weights(self) -> None:
        tree = self.tree
        weight = np.where(np.isnan(self.weight_cfg), 1.0, self.weight_cfg)
        multiplier = self.settings.infer_weight_from_guarantees_share_multiplier
        if multiplier is not None:
            g = fn.row_max(self.sgs) + self.total_flow_ratio
            unset = np.isnan(self.weight_cfg)
            unset[0] = False
            gp = g[np.maximum(tree.parent, 0)]
            ok = (g >= EPSILON) & (gp >= EPSILON)
            inferred = np.where(ok, multiplier * g / np.where(ok, gp, 1.0), 1.0)
            weight = np.where(unset, inferred, weight)
        weight[0] = 1.0
        self.weight = weight
        # FIFO order (b.6) of operations in FIFO pools.
        n = len(tree.elements)
        self.fifo_rank = np.zeros(n, dtype=np.int64)
        self.fifo_index: dict[int, int] = {}
        for p in np.flatnonzero(self.fifo):
            pool = tree.elements[p]
            kids = list(tree.children(int(p)))
            params = pool.fifo_sort_parameters  # type: ignore[attr-defined]

            def key(c: int, params: tuple[str, ...] = params) -> tuple[float, ...]:
                op = tree.elements[c]
                out = []
                for name in params:
                    if name == "weight":
                        out.append(-weight[c])
                    elif name == "start_time":
                        out.append(op.start_time)  # type: ignore[attr-defined]
                    else:
                        out.append(op.pending_allocation_count)  # type: ignore[attr-defined]
                return tuple(out)

            for rank, c in enumerate(sorted(kids, key=key)):
                self.fifo_rank[c] = rank
                self.fifo_index[c] = rank

    def compute_estimated_guarantees(self) -> None:
        tree = self.tree
        egs = np.zeros_like(self.sgs)
        egs[0] = self.sgs[0]
        for level in tree.parent_levels():
            parents, children, seg, slot = level.parents, level.children, level.seg, level.slot
            want = self.sgs[children] + self.total_flow_ratio[children, None]
            budget = egs[parents][slot]
            prefix = np.cumsum(want, axis=0)
            base = np.where((seg > 0)[:, None], prefix[np.maximum(seg - 1, 0)], 0.0)
            incl = prefix - base[slot]
            excl = incl - want
            # Sequential "min(want, still undistributed)" over the children, as prefix sums.
            got = np.minimum(incl, budget) - np.minimum(excl, budget)
            undistributed = egs[parents] - np.add.reduceat(got, seg, axis=0)
            weights = self.weight[children]
            wsum = np.add.reduceat(weights, seg)
            with np.errstate(divide="ignore", invalid="ignore"):
                part = np.where(wsum[slot] > 0, weights / wsum[slot], 0.0)
            egs[children] = got + undistributed[slot] * part[:, None]
        self.egs = egs

    # ---- functions (b.5) ----------------------------------------------------------------------------
    def build_functions(
        self, elements: np.ndarray, guarantee: np.ndarray, limits: np.ndarray
    ) -> fn.FunctionTable:
        """FSBS (with MFFBS) of ``elements`` (closed under descendants), bottom-up, as a table by element.

        The first build over the whole tree with the strong guarantees and limits shares is kept as the base:
        later builds recompute only the elements whose guarantee or limits differ from it (integral pools)
        and their ancestors, and take every other function from the base (the table refers to the base's
        batches; nothing is copied).
        """
        tree = self.tree
        n = len(tree.elements)
        batches: list[fn.FunctionBatch] = []
        batch_of = np.full(n, -1, dtype=np.int64)
        row_of = np.full(n, -1, dtype=np.int64)
        base = self._base_functions
        if base is not None:
            base_table, base_guarantee, base_limits = base
            member = np.zeros(n, dtype=bool)
            member[elements] = True
            dirty = member & (fn.row_any(guarantee != base_guarantee) | fn.row_any(limits != base_limits))
            for level in tree.parent_levels(bottom_up=True):
                kids_dirty = np.logical_or.reduceat(dirty[level.children], level.seg)
                dirty[level.parents] |= kids_dirty & member[level.parents]
            batches.extend(base_table.batches)
            batch_of[:] = base_table.batch_of
            row_of[:] = base_table.row_of
            elements = np.flatnonzero(dirty)
        ops = elements[tree.is_op[elements]]
        if len(ops):
            step = self.step[ops] & self.settings.enable_step_function_for_gang_operations
            gang = np.flatnonzero(step)
            step[gang] = [
                tree.elements[p].allow_gang_step_function  # type: ignore[attr-defined]
                for p in tree.parent[ops[gang]].tolist()
            ]
            batches.append(
                fn.operation_fair_share_by_suggestion(
                    self.usage_share[ops], self.demand_share[ops], step, guarantee[ops], limits[ops]
                )
            )
            batch_of[ops] = len(batches) - 1
            row_of[ops] = np.arange(len(ops))
        pools = elements[~tree.is_op[elements]]
        height = np.where(tree.is_op, 0, 1).astype(np.int64)
        for d in range(len(tree.level_start) - 2, -1, -1):
            lo, hi = tree.level_start[d], tree.level_start[d + 1]
            parents = np.arange(lo, hi)
            parents = parents[tree.child_count[parents] > 0]
            if len(parents) and d + 1 < len(tree.level_start) - 1:
                clo = tree.level_start[d + 1]
                chi = tree.level_start[d + 2]
                hmax = np.maximum.reduceat(height[clo:chi], tree.child_start[parents] - clo)
                height[parents] = hmax + 1
        for h in np.unique(height[pools]):
            level = pools[height[pools] == h]
            counts = tree.child_count[level]
            kids = _child_ranges(tree, level)
            slot = np.repeat(np.arange(len(level)), counts)
            parent_of = tree.parent[kids]
            fifo_child = self.fifo[parent_of]
            w = self.weight[kids]
            positive = w > EPSILON
            min_w = np.full(len(level), np.inf)
            np.minimum.at(min_w, slot[positive], w[positive])
            with np.errstate(divide="ignore", invalid="ignore"):
                scale = np.where(positive, min_w[slot] / np.where(positive, w, 1.0), np.inf)
            scale = np.where(fifo_child, 1.0, scale)
            shift = np.where(fifo_child, self.fifo_rank[kids].astype(float), 0.0)
            right = np.where(self.fifo[level] & (counts > 0), counts.astype(float), 1.0)
            if self.settings.enable_improved_fair_share_by_fit_factor_computation:
                fsbff = _improved_sums(
                    fn.FunctionTable(batches, batch_of, row_of), len(level), kids, slot, scale, shift, right
                )
            else:
                fsbff = fn.sum_children(
                    fn.FunctionTable(batches, batch_of, row_of), kids, slot, scale, shift, right
                )
            batches.append(fn.fair_share_by_suggestion(fsbff, guarantee[level], limits[level]))
            batch_of[level] = len(batches) - 1
            row_of[level] = np.arange(len(level))
        table = fn.FunctionTable(batches, batch_of, row_of)
        if self._base_functions is None and len(elements) == n:
            self._base_functions = (table, guarantee.copy(), limits.copy())
        return table

    def distribute(self, table: fn.FunctionTable, start: np.ndarray, suggestion: np.ndarray) -> np.ndarray:
        """ComputeAndSetFairShare top-down from ``start`` elements with scalar suggestions; returns FS (N, 5)."""
        tree = self.tree
        fs = np.zeros((len(tree.elements), RESOURCE_COUNT))
        current = np.asarray(start, dtype=np.int64)
        s = np.asarray(suggestion, dtype=float)
        values, fits = table.evaluate(current, s)
        while len(current):
            fs[current] = values
            pools = ~tree.is_op[current] & (tree.child_count[current] > 0)
            parents = current[pools]
            if len(parents) == 0:
                break
            target = values[pools]
            fit = fits[pools]  # type: ignore[index]
            counts = tree.child_count[parents]
            kids = _child_ranges(tree, parents)
            slot = np.repeat(np.arange(len(parents)), counts)
            ks = self._child_suggestions(parents, kids, slot, fit)
            kv, kf = table.evaluate(kids, ks)
            seg = np.concatenate([[0], np.cumsum(counts)[:-1]])
            sums = np.add.reduceat(kv, seg, axis=0)
            bad = np.flatnonzero(fn.row_any(sums > target + EPSILON))
            for k in bad:
                sel = np.flatnonzero(slot == k)
                p_arr = parents[k : k + 1]
                sub_kids = kids[sel]
                zero_slot = np.zeros(len(sel), dtype=np.int64)

                def fits_target(
                    f: float, p_arr=p_arr, sub_kids=sub_kids, zero_slot=zero_slot, bound=target[k] + EPSILON
                ) -> bool:
                    sug = self._child_suggestions(p_arr, sub_kids, zero_slot, np.array([f]))
                    v, _ = table.evaluate(sub_kids, sug)
                    return bool(np.all(v.sum(axis=0) <= bound))

                f_new = floating_point_inverse_lower_bound(0.0, float(fit[k]), fits_target)
                sug = self._child_suggestions(p_arr, sub_kids, zero_slot, np.array([f_new]))
                v, f2 = table.evaluate(sub_kids, sug)
                ks[sel], kv[sel], kf[sel] = sug, v, f2  # type: ignore[index]
            current, values, fits = kids, kv, kf
        return fs

    def distribute_improved(self, table: fn.FunctionTable) -> np.ndarray:
        """The improved top-down pass (``improved.py``), level by level: every pool splits its target vector
        among its children (``_split_targets``); an operation's fair share is its target."""
        tree = self.tree
        fs = np.zeros((len(tree.elements), RESOURCE_COUNT))
        root_value, _ = table.evaluate(np.array([0]), np.ones(1))
        fs[0] = root_value[0]
        gap = self.settings.enable_improved_fair_share_by_fit_factor_computation_distribution_gap
        for level in tree.parent_levels():
            parents = level.parents
            chosen = self._split_targets(table, parents, level.children, level.seg, level.slot, fs[parents])
            if gap:
                short = fn.row_any(fs[parents] - np.add.reduceat(chosen, level.seg, axis=0) > EPSILON)
                if np.any(short):
                    again = np.flatnonzero(short)
                    member = short[level.slot]
                    sub_kids = level.children[member]
                    sub_slot = np.searchsorted(again, level.slot[member])
                    sub_seg = np.concatenate(
                        [[0], np.cumsum(np.bincount(sub_slot, minlength=len(again)))[:-1]]
                    )
                    chosen[member] = self._split_targets(
                        table, parents[again], sub_kids, sub_seg, sub_slot, fs[parents[again]] + EPSILON
                    )
            fs[level.children] = chosen
        return fs

    def _split_targets(
        self,
        table: fn.FunctionTable,
        parents: np.ndarray,
        kids: np.ndarray,
        seg: np.ndarray,
        slot: np.ndarray,
        bound: np.ndarray,
    ) -> np.ndarray:
        """Children's shares of every pool's target ``bound`` (YTsaurus's vector ``ComputeAndSetFairShare``):
        the largest fit factor whose children's values fit (the bisection of
        ``floating_point_inverse_lower_bound``, run for all pools at once), then the children's jumps there in
        child order while they fit; the first that does not fit ends the walk (the stretched fit-factor axis)."""
        m = len(parents)
        fit_range = np.where(self.fifo[parents], np.diff(np.append(seg, len(kids))).astype(float), 1.0)

        def values(rows: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            """Children's values of pools ``rows`` (sorted) at fit factors ``f`` (per pool), the children's rows
            and where each pool's children start among them."""
            selected = np.zeros(m, dtype=bool)
            selected[rows] = True
            sub = np.flatnonzero(selected[slot])
            position = np.searchsorted(rows, slot[sub])
            starts = np.flatnonzero(np.concatenate([[True], position[1:] != position[:-1]]))
            suggestions = self._child_suggestions(parents[rows], kids[sub], position, f)
            return table.evaluate(kids[sub], suggestions)[0], sub, starts

        def fits(rows: np.ndarray, f: np.ndarray) -> np.ndarray:
            v, _, starts = values(rows, f)
            return np.all(np.add.reduceat(v, starts, axis=0) <= bound[rows], axis=1)

        everyone = np.arange(m)
        lo = np.zeros(m)
        hi = fit_range.copy()
        fit = np.zeros(m)
        done = fits(everyone, hi)
        fit[done] = hi[done]
        active = np.flatnonzero(~done)
        for _ in range(200):
            if not len(active):
                break
            mid = (lo[active] + hi[active]) / 2.0
            stop = (mid <= lo[active]) | (mid >= hi[active])
            if np.any(stop):
                fit[active[stop]] = lo[active[stop]]
                active, mid = active[~stop], mid[~stop]
                if not len(active):
                    break
            ok = fits(active, mid)
            lo[active[ok]] = mid[ok]
            hi[active[~ok]] = mid[~ok]
        fit[active] = lo[active]
        chosen, _, _ = values(everyone, fit)
        walking = np.flatnonzero(fit < fit_range)
        if len(walking):
            after_values, sub, _ = values(walking, np.nextafter(fit[walking], np.inf))
            jump = after_values - chosen[sub]
            significant = fn.row_any(jump > improved.JUMP_EPSILON)
            for k in np.unique(slot[sub[significant]]).tolist():
                rows = np.flatnonzero(slot == k)
                total = improved.sequential_sum(chosen[rows])
                for r in rows.tolist():
                    step = after_values[np.searchsorted(sub, r)] - chosen[r]
                    if not np.any(step > improved.JUMP_EPSILON):
                        continue
                    if not np.all(total + step <= bound[k]):
                        break
                    chosen[r] = after_values[np.searchsorted(sub, r)]
                    total = total + step
        return chosen

    def _child_suggestions(
        self, parents: np.ndarray, kids: np.ndarray, slot: np.ndarray, fit: np.ndarray
    ) -> np.ndarray:
        """Children's suggestions from the parent's fit factor: min(1, f·w/w_min), or FIFO unit steps."""
        f = fit[slot]
        fifo = self.fifo[parents][slot]
        w = self.weight[kids]
        positive = w > EPSILON
        min_w = np.full(len(parents), np.inf)
        np.minimum.at(min_w, slot[positive], w[positive])
        with np.errstate(invalid="ignore"):
            normal = np.minimum(1.0, np.where(positive, f * (w / min_w[slot]), 0.0))
        fifo_s = np.clip(f - self.fifo_rank[kids], 0.0, 1.0)
        return np.where(fifo, fifo_s, normal)


def _improved_sums(
    table: fn.FunctionTable,
    count: int,
    kids: np.ndarray,
    slot: np.ndarray,
    scale: np.ndarray,
    shift: np.ndarray,
    right: np.ndarray,
) -> fn.FunctionBatch:
    """FSBFF of ``count`` pools (children ``kids`` grouped by ``slot``) with simultaneous jumps split in steps:
    the plain sums (compiled), then their jumps split into staircases (``improved.staircase_sums``)."""
    base = fn.sum_children(table, kids, slot, scale, shift, right)
    batch, failed = improved.staircase_sums(base, table.gather(kids), slot, scale, shift, right)
    if not np.any(failed):
        return batch
    # A pool whose sum has no vertical piece exactly where its children jump: built point by point.
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    for k in range(count):
        if not failed[k]:
            lo, hi = int(batch.offsets[k]), int(batch.offsets[k + 1])
            xs.append(batch.x[lo:hi])
            ys.append(batch.y[lo:hi])
            continue
        sel = np.flatnonzero(slot == k)
        children = []
        for c in kids[sel].tolist():
            source = table.batches[int(table.batch_of[c])]
            row = int(table.row_of[c])
            lo, hi = int(source.offsets[row]), int(source.offsets[row + 1])
            children.append((source.x[lo:hi], source.y[lo:hi]))
        x, y = improved.improved_sum(children, scale[sel], shift[sel], float(right[k]))
        xs.append(x)
        ys.append(y)
    counts = np.array([len(x) for x in xs], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return fn.FunctionBatch(offsets, np.concatenate(xs), np.concatenate(ys).reshape(-1, RESOURCE_COUNT))


def _guarantee_fit_factor(shares: np.ndarray, available: np.ndarray) -> float:
    """Largest f in [0, 1] with Σ shares × f ≤ available in every resource (binary search, b.4)."""
    return floating_point_inverse_lower_bound(
        0.0, 1.0, lambda f: bool(np.all((shares * f).sum(axis=0) <= available))
    )


def _shrink_guarantees(child_sgs: np.ndarray, priority: np.ndarray, available: np.ndarray) -> np.ndarray:
    """Children's guarantees fitted into the parent's (b.4 tiers).

    Priority-tier children keep theirs and the regular tier is scaled into what is left; if the priority tier
    alone overflows, it is scaled and the regular tier gets nothing. Without priority children: one scaling.
    """
    if not np.any(priority):
        return child_sgs * _guarantee_fit_factor(child_sgs, available)
    out = child_sgs.copy()
    first = child_sgs[priority]
    first_sum = first.sum(axis=0)
    if np.all(first_sum <= available):
        rest = child_sgs[~priority]
        out[~priority] = rest * _guarantee_fit_factor(rest, np.maximum(available - first_sum, 0.0))
    else:
        out[priority] = first * _guarantee_fit_factor(first, available)
        out[~priority] = 0.0
    return out


def _hierarchical_available(upd: _Update, i: int, guarantee: np.ndarray) -> np.ndarray:
    """min over the element and its non-root ancestors of (limits share − guarantee share)."""
    result = np.ones(RESOURCE_COUNT)
    tree = upd.tree
    while i > 0:
        result = np.minimum(result, upd.limits_share[i] - guarantee[i])
        i = int(tree.parent[i])
    return np.maximum(result, 0.0)


def _increase_integral(upd: _Update, i: int, delta: np.ndarray, pis: np.ndarray) -> None:
    """Add ``delta`` to the proposed integral share of the pool and every ancestor (root may overcommit)."""
    tree = upd.tree
    while i >= 0:
        increased = pis[i] + delta
        if i != 0:
            increased = adjust_proposed_integral_share(upd.limits_share[i], upd.sgs[i], increased)
        pis[i] = increased
        i = int(tree.parent[i])


def _integral_shares(upd: _Update) -> np.ndarray:
    """Burst then relaxed pools' proposed integral shares (b.7); also sets their LastShareRatio."""
    tree = upd.tree
    pis = np.zeros((len(tree.elements), RESOURCE_COUNT))
    for b in upd.burst_pools:
        ratio = min(upd.burst_ratio[b], upd.volume_ratio(b))
        proposed = np.minimum(np.full(RESOURCE_COUNT, ratio), _hierarchical_available(upd, b, upd.sgs + pis))
        proposed = adjust_proposed_integral_share(upd.limits_share[b], upd.sgs[b], proposed)
        pis[b] = proposed
        subtree = tree.subtree(b)
        table = upd.build_functions(subtree, upd.sgs + pis, upd.limits_share)
        pis[b] = 0.0
        within, _ = table.evaluate(np.array([b]), np.zeros(1))
        integral = np.maximum(within[0] - upd.sgs[b], 0.0)
        _increase_integral(upd, b, integral, pis)
        upd.last_ratio[b] = float(integral.max())
    relaxed = [r for r in upd.relaxed_pools if upd.volume_ratio(r) != 0]
    for r in upd.relaxed_pools:
        if r not in relaxed:
            upd.last_ratio[r] = upd.last_ratio.get(r, 0.0)
    if not relaxed:
        return pis
    top = list(tree.children(0))
    guarantee = upd.sgs + pis
    available = np.maximum(1.0 - np.minimum(guarantee[top], upd.demand_share[top]).sum(axis=0), 0.0)
    weights = np.array([upd.volume_ratio(r) for r in relaxed])
    limits = upd.limits_share.copy()
    for r, w in zip(relaxed, weights, strict=True):
        pool = tree.elements[r]
        multiplier = pool.integral_guarantees.relaxed_share_multiplier_limit  # type: ignore[attr-defined]
        if multiplier is None:
            multiplier = upd.settings.relaxed_share_multiplier_limit
        cap = min(w, upd.flow_ratio[r] * multiplier)
        limits[r] = np.minimum(limits[r], upd.sgs[r] + cap)
    elements = np.unique(np.concatenate([tree.subtree(r) for r in relaxed]))
    table = upd.build_functions(elements, guarantee, limits)
    weights = weights / weights.min()
    relaxed_elements = np.array(relaxed, dtype=np.int64)
    strong = upd.sgs[relaxed]

    def shares(f: float) -> np.ndarray:
        values, _ = table.evaluate(relaxed_elements, np.minimum(1.0, f * weights))
        return np.maximum(values - strong, 0.0)

    fit = floating_point_inverse_lower_bound(
        0.0, 1.0, lambda f: bool(np.all(shares(f).sum(axis=0) <= available))
    )
    integral = shares(fit)
    for k, r in enumerate(relaxed):
        limited = np.minimum(integral[k], _hierarchical_available(upd, r, upd.sgs + pis))
        _increase_integral(upd, r, limited, pis)
        upd.last_ratio[r] = float(limited.max())
    return pis


def _detailed(total: np.ndarray, strong: np.ndarray, integral: np.ndarray) -> tuple[np.ndarray, ...]:
    sg = np.minimum(total, strong)
    ig = np.minimum(total - sg, integral)
    return sg, ig, total - sg - ig


def update_fair_share(
    root: Pool,
    total_resources: Vector,
    settings: UpdateSettings,
    now: float,
    state: UpdateState | None = None,
) -> FairShareResult:
    """Run one fair-share update (yt-semantics §b) and compute statuses (§c) for every element.

    ``now`` is the update time in seconds (any epoch; only differences to ``state.previous_update_time``
    matter). Raises ``ConfigError`` naming the field for bad input; guarantee overcommit is reported as
    alerts in ``FairShareResult.errors``.
    """
    upd = _Update(root, total_resources, settings, now, state)
    tree = upd.tree
    n = len(tree.elements)
    # b.2 step 1: nested promised-guarantee pools.
    promised_pools = [
        i for i in range(n) if not tree.is_op[i] and tree.elements[i].compute_promised_guarantee_fair_share
    ]  # type: ignore[attr-defined]
    promised_flag = np.zeros(n, dtype=bool)
    promised_flag[promised_pools] = True
    nested = []
    for i in promised_pools:
        p = int(tree.parent[i])
        while p >= 0:
            if promised_flag[p]:
                nested.append(i)
                break
            p = int(tree.parent[p])
    if nested:
        upd.errors.append(
            PooltreeError(
                "Found pools with enabled promised guarantee fair share computation which are nested inside other such pools",
                code=NESTED_PROMISED_GUARANTEE_POOLS,
                attributes={"nested_promised_guarantee_fair_share_pools": [tree.ids[i] for i in nested]},
            )
        )
    upd.validate_priority_pools()
    # Steps 2-6.
    upd.compute_attributes()
    upd.infer_strong_guarantees()
    upd.compute_integral_ratios()
    upd.consume_and_refill()
    upd.adjust_guarantees()
    upd.compute_weights()
    upd.compute_estimated_guarantees()
    # Step 7: integral guarantees.
    pis = np.zeros((n, RESOURCE_COUNT))
    if len(upd.integral_pools):
        # The base functions (strong guarantees only); integral stages rebuild just the pools they change.
        upd.build_functions(np.arange(n), upd.sgs, upd.limits_share)
        pis = _integral_shares(upd)
    guarantee = upd.sgs + pis
    # Step 8: functions and the top-down distribution from the root with suggestion 1.
    table = upd.build_functions(np.arange(n), guarantee, upd.limits_share)
    if settings.enable_improved_fair_share_by_fit_factor_computation:
        fs = upd.distribute_improved(table)
    else:
        fs = upd.distribute(table, np.array([0]), np.ones(1))
    _truncate_unsatisfied_gangs_in_fifo_pools(upd, fs)
    limited_demand, _ = table.evaluate(np.arange(n), np.ones(n))
    # Step 9: promised guarantee fair share.
    promised = None
    outermost = [i for i in promised_pools if i not in nested]
    if outermost:
        promised = np.full((n, RESOURCE_COUNT), np.nan)
        for i in outermost:
            part = upd.distribute(table, np.array([i]), np.zeros(1))
            sub = tree.subtree(i)
            promised[sub] = part[sub]
    # Step 10: root fair share = sum of children.
    top = np.array(list(tree.children(0)), dtype=np.int64)
    strong_part, integral_part, weight_part = _detailed(fs, upd.sgs, pis)
    if len(top):
        fs[0] = fs[top].sum(axis=0)
        used_strong = strong_part[top].sum(axis=0)
    else:
        fs[0] = 0.0
        used_strong = np.zeros(RESOURCE_COUNT)
    root_sg, root_ig, root_wp = _detailed(fs[0], used_strong, pis[0])
    strong_part[0], integral_part[0], weight_part[0] = root_sg, root_ig, root_wp
    return _results(upd, fs, strong_part, integral_part, weight_part, limited_demand, promised, pis)


def _truncate_unsatisfied_gangs_in_fifo_pools(upd: _Update, fs: np.ndarray) -> None:
    """YTsaurus ``TruncateFairShareInFifoPools`` (in place): in FIFO pools with truncation enabled, a gang
    operation with a non-zero fair share that does not cover its demand (within ``EPSILON``) gets zero; every
    ancestor loses the truncated amounts of its subtree (never below zero)."""
    tree = upd.tree
    pools = [
        p
        for p in np.flatnonzero(upd.fifo).tolist()
        if tree.elements[p].enable_fair_share_truncation_in_fifo_pool  # type: ignore[attr-defined]
    ]
    if not pools:
        return
    truncated = np.zeros_like(fs)
    for p in pools:
        for c in tree.children(p):
            op = tree.elements[c]
            if not tree.is_op[c] or not op.is_gang:  # type: ignore[attr-defined]
                continue
            share = fs[c]
            if not np.any(share != 0.0) or np.all(share + EPSILON >= upd.demand_share[c]):
                continue
            truncated[c] = share
            fs[c] = 0.0
    # Ancestors (deepest first, so every pool has its subtree's total) lose what their subtrees lost.
    for level in tree.parent_levels(bottom_up=True):
        sums = np.add.reduceat(truncated[level.children], level.seg, axis=0)
        truncated[level.parents] += sums
        changed = level.parents[fn.row_any(sums != 0.0)]
        fs[changed] = np.maximum(fs[changed] - sums[fn.row_any(sums != 0.0)], 0.0)


def _post_update_satisfaction(upd: _Update, local: np.ndarray) -> np.ndarray:
    """Pools take their best schedulable child's satisfaction (smallest; first in FIFO order when so set)."""
    tree = upd.tree
    is_op = tree.is_op
    satisfaction = local.copy()
    schedulable = upd.schedulable.copy()
    fifo_order = upd.settings.fifo_pool_scheduling_order == "fifo"
    for d in range(len(tree.level_start) - 3, -1, -1):
        lo, hi = tree.level_start[d], tree.level_start[d + 1]
        parents = np.arange(lo, hi)
        parents = parents[~is_op[parents]]
        schedulable[parents[tree.child_count[parents] == 0]] = False
        parents = parents[tree.child_count[parents] > 0]
        if len(parents) == 0:
            continue
        clo, chi = tree.level_start[d + 1], tree.level_start[d + 2]
        seg = tree.child_start[parents] - clo
        kids_ok = schedulable[clo:chi]
        any_ok = np.logical_or.reduceat(kids_ok, seg)
        schedulable[parents] = any_ok
        candidate = np.where(kids_ok, satisfaction[clo:chi], np.inf)
        best = np.minimum.reduceat(candidate, seg)
        if fifo_order and np.any(upd.fifo[parents]):
            rank = np.where(kids_ok, upd.fifo_rank[clo:chi], np.iinfo(np.int64).max)
            slot = np.repeat(np.arange(len(parents)), tree.child_count[parents])
            first_rank = np.minimum.reduceat(rank, seg)
            chosen = kids_ok & (rank == first_rank[slot])
            fifo_best = np.minimum.reduceat(np.where(chosen, satisfaction[clo:chi], np.inf), seg)
            best = np.where(upd.fifo[parents], fifo_best, best)
        satisfaction[parents] = np.where(any_ok, best, satisfaction[parents])
    return satisfaction


class ElementResults(Mapping[str, ElementResult]):
    """Per-element results as a read-only mapping id → ElementResult, built on access from the update's arrays.

    The update itself only fills arrays (one row per element, breadth-first); an ``ElementResult`` is
    materialised (and cached) the first time its id is looked up, so callers that read a few elements do not
    pay for all of them. ``index`` and the array attributes serve vectorised callers.
    """

    def __init__(self, arrays: dict[str, Any], ids: list[str], parent: np.ndarray, is_op: np.ndarray):
        self.arrays = arrays
        self.ids = ids
        self.index = dict(zip(ids, range(len(ids)), strict=True))
        self._parent = parent
        self._is_op = is_op
        self._cache: dict[int, ElementResult] = {}

    def __getitem__(self, element_id: str) -> ElementResult:
        i = self.index[element_id]
        cached = self._cache.get(i)
        if cached is None:
            cached = self._build(i)
            self._cache[i] = cached
        return cached

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, element_id: object) -> bool:
        return element_id in self.index

    def _build(self, i: int) -> ElementResult:
        a = self.arrays
        prom = None
        promised = a["promised"]
        if promised is not None and not np.isnan(promised[i, 0]):
            total_p = promised[i].copy()
            sg, ig, wp = _detailed(total_p, a["strong_guarantee_share"][i], a["proposed_integral_share"][i])
            prom = DetailedFairShare(sg, ig, wp, total_p)
        integral = a["integral_rows"].get(i)
        parent = int(self._parent[i])
        fifo_index = a["fifo_index"].get(i)
        return ElementResult(
            id=self.ids[i],
            is_operation=bool(self._is_op[i]),
            parent=None if parent < 0 else self.ids[parent],
            resource_usage=a["resource_usage"][i].copy(),
            resource_demand=a["resource_demand"][i].copy(),
            usage_share=a["usage_share"][i].copy(),
            demand_share=a["demand_share"][i].copy(),
            limits_share=a["limits_share"][i].copy(),
            resource_limits=a["resource_limits"][i].copy(),
            strong_guarantee_share=a["strong_guarantee_share"][i].copy(),
            inferred_strong_guarantee_resources=a["inferred_strong_guarantee_resources"][i].copy(),
            estimated_guarantee_share=a["estimated_guarantee_share"][i].copy(),
            proposed_integral_share=a["proposed_integral_share"][i].copy(),
            fair_share=a["fair_share"][i].copy(),
            detailed_fair_share=DetailedFairShare(
                a["strong_part"][i].copy(),
                a["integral_part"][i].copy(),
                a["weight_part"][i].copy(),
                a["fair_share"][i].copy(),
            ),
            limited_demand_share=a["limited_demand_share"][i].copy(),
            promised_guarantee_fair_share=prom,
            dominant_resource=RESOURCES[int(a["dominant"][i])],
            weight=float(a["weight"][i]),
            satisfaction_ratio=float(a["satisfaction_ratio"][i]),
            local_satisfaction_ratio=float(a["local_satisfaction_ratio"][i]),
            scheduling_status=BELOW_FAIR_SHARE if a["below"][i] else NORMAL,
            fifo_index=None if fifo_index is None else int(fifo_index),
            burst_ratio=float(a["burst_ratio"][i]),
            resource_flow_ratio=float(a["resource_flow_ratio"][i]),
            total_burst_ratio=float(a["total_burst_ratio"][i]),
            total_resource_flow_ratio=float(a["total_resource_flow_ratio"][i]),
            accumulated_resource_volume=None if integral is None else integral[0].copy(),
            integral_pool_capacity=None if integral is None else integral[1].copy(),
        )


def _results(
    upd: _Update,
    fs: np.ndarray,
    strong_part: np.ndarray,
    integral_part: np.ndarray,
    weight_part: np.ndarray,
    limited_demand: np.ndarray,
    promised: np.ndarray | None,
    pis: np.ndarray,
) -> FairShareResult:
    tree = upd.tree
    is_op = tree.is_op
    # Statuses (§c), computed with usage at update.
    below = np.asarray(
        is_below_fair_share(
            fs,
            upd.usage_share,
            upd.demand_share,
            upd.tolerance,
            is_operation=is_op,
            schedulable=upd.schedulable,
        )
    ).copy()
    below[0] = False
    local = np.asarray(local_satisfaction_ratio(fs, upd.usage_share, upd.demand_share))
    satisfaction = _post_update_satisfaction(upd, local)
    arrays: dict[str, Any] = {
        "resource_usage": upd.usage,
        "resource_demand": upd.demand,
        "usage_share": upd.usage_share,
        "demand_share": upd.demand_share,
        "limits_share": upd.limits_share,
        "resource_limits": upd.resource_limits,
        "strong_guarantee_share": upd.sgs,
        "inferred_strong_guarantee_resources": upd.inferred,
        "estimated_guarantee_share": upd.egs,
        "proposed_integral_share": pis,
        "fair_share": fs,
        "strong_part": strong_part,
        "integral_part": integral_part,
        "weight_part": weight_part,
        "limited_demand_share": limited_demand,
        "promised": promised,
        "dominant": upd.dominant,
        "weight": upd.weight,
        "satisfaction_ratio": satisfaction,
        "local_satisfaction_ratio": local,
        "below": below,
        "fifo_index": upd.fifo_index,
        "burst_ratio": upd.burst_ratio,
        "resource_flow_ratio": upd.flow_ratio,
        "total_burst_ratio": upd.total_burst_ratio,
        "total_resource_flow_ratio": upd.total_flow_ratio,
        "integral_rows": {int(i): (upd.volume[i], upd.capacity[i]) for i in upd.integral_pools},
    }
    elements = ElementResults(arrays, tree.ids, tree.parent, is_op)
    new_state = UpdateState(
        previous_update_time=upd.now,
        accumulated_resource_volume={tree.ids[i]: upd.volume[i] for i in upd.integral_pools},
        last_integral_share_ratio={tree.ids[i]: upd.last_ratio.get(i, 0.0) for i in upd.integral_pools},
    )
    return FairShareResult(elements=elements, state=new_state, errors=upd.errors)
