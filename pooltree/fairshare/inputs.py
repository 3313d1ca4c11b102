"""Reading an update's inputs (b.1): element attributes into arrays, validated with errors naming the field."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import compress, repeat
from operator import is_not
from typing import TYPE_CHECKING, Any

import numpy as np

from pooltree.errors import ConfigError
from pooltree.fairshare import functions as fn
from pooltree.fairshare.compiled import read_vectors
from pooltree.fairshare.model import (
    FIFO_SORT_PARAMETERS,
    GUARANTEE_TYPES,
    POOL_MODES,
    Element,
    Operation,
    Pool,
)
from pooltree.resources import RESOURCE_COUNT, RESOURCES

if TYPE_CHECKING:
    from pooltree.fairshare.layout import _Tree

_DEFAULT_FIFO_SORT = ("weight", "start_time")


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


def _unit_interval(elements: list[Any], values: list[Any], field_name: str) -> np.ndarray:
    """``values`` (the elements' ``field_name``) as floats, each in [0, 1]; else an error naming the first element
    out of range."""
    array = np.array(values, dtype=float)
    bad = np.flatnonzero(~((array >= 0.0) & (array <= 1.0)))
    if len(bad):
        e = elements[int(bad[0])]
        raise ConfigError(_path(e, field_name), f"must be in [0, 1], got {getattr(e, field_name)!r}")
    return array


def _operation_rows(
    ops: list[Operation], usage_rows: list[Any], demand_rows: list[Any], op_vectors: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The operations' usage, demand, schedulable, gang and apply-limits-to-demand rows; ``op_vectors`` is what
    ``_read_interleaved`` made of the vectors, None sending them through ``_stack`` (which names a bad row)."""
    if op_vectors is None:
        usage = _stack(ops, "usage", usage_rows)
        demand = _stack(ops, "demand", demand_rows)
    else:
        usage, demand = op_vectors[:, 0], op_vectors[:, 1]
    return (
        usage,
        demand,
        np.array([e.schedulable for e in ops], dtype=bool),
        np.array([e.is_gang for e in ops], dtype=bool),
        np.array([e.apply_specified_resource_limits_to_demand for e in ops], dtype=bool),
    )


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


def _readonly(array: np.ndarray) -> np.ndarray:
    """``array``, made read-only: later updates of the same tree may take it (``_KeptInputs``)."""
    array.flags.writeable = False
    return array


class _KeptInputs:
    """One update's checked input arrays, kept on the tree (``_Tree.inputs``) for the next update of the same
    structure: every array as read (``compute_attributes`` sums usage and demand into copies), read-only. An
    update told which operations were written since (``UpdateState.written``) copies them and reads again only
    those operations' rows (``read_rows`` with rows, as ``reuse.rows_to_read`` decides); any other update reads and
    checks every row."""

    __slots__ = (
        "apply_limits",
        "carried_from",
        "demand",
        "msr_array",
        "pool_arrays",
        "schedulable",
        "specified_limits",
        "step",
        "strong_config",
        "tag_limits",
        "tol_array",
        "total",
        "usage",
        "weight_cfg",
    )

    def __init__(self, carried_from: _KeptInputs | None = None) -> None:
        self.carried_from = carried_from
        """The previous tree's read whose arrays these are, laid out by this tree's rows
        (``reuse._carried_inputs``); None: read (or copied and re-read) here."""

    msr_array: np.ndarray
    pool_arrays: tuple[np.ndarray, np.ndarray, np.ndarray]
    tol_array: np.ndarray
    weight_cfg: np.ndarray
    total: bytes
    usage: np.ndarray
    demand: np.ndarray
    specified_limits: np.ndarray
    tag_limits: np.ndarray
    strong_config: np.ndarray
    schedulable: np.ndarray
    step: np.ndarray
    apply_limits: np.ndarray


# ---- inputs (b.1) -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ElementInputs:
    """b.1's inputs by element row, checked: operations' usage and demand, limits (specified, tag-filter), pools'
    strong guarantee resources and which resources they name (the main one always), configured weights, max share
    ratios, starvation tolerances, operations' flags (limits applied to demand, schedulable, gang step), pools'
    FIFO flags and integral guarantee types; and how the read took them: the rows it read again (the period's
    delta; None: every row) and the previous read (``_KeptInputs``) whose arrays hold every other row."""

    usage: np.ndarray
    demand: np.ndarray
    tag_limits: np.ndarray
    specified_limits: np.ndarray
    strong_config: np.ndarray
    spec_mask: np.ndarray
    weight_cfg: np.ndarray
    max_share_ratio: np.ndarray
    tolerance: np.ndarray
    apply_limits: np.ndarray
    schedulable: np.ndarray
    step: np.ndarray
    fifo: np.ndarray
    integral_type: np.ndarray
    read_rows: np.ndarray | None = None
    read_from: Any = None


def read_rows(
    tree: _Tree, total: np.ndarray, main_resource: str, last: _KeptInputs | None, rows: np.ndarray | None
) -> tuple[ElementInputs, _KeptInputs]:
    """b.1: the elements' inputs into arrays, checked (the checks run in a fixed order and raise for the first bad
    row): of every row (``rows`` None, ``last`` None), or of ``rows`` only (sorted), written into copies of
    ``last``'s arrays (the other rows passed the checks then, so the first bad row is among these); with the read
    to keep for the next update (``reuse.rows_to_read`` says which rows to read from which kept read).

    One comprehension per attribute (a slot read the interpreter specialises, cheaper than one ``attrgetter`` of
    all fields), vectors copied per element (``_read_interleaved``); a vector that is not a float64 vector of 5
    sends the rows of its kind through ``_stack``, which converts them or raises for the first bad element."""
    kept = _KeptInputs()
    rows_read = _RowsRead(tree, rows)
    read, ops, pools = rows_read.read, rows_read.ops, rows_read.pools
    op_rows, pool_rows = rows_read.op_rows, rows_read.pool_rows
    if rows is None:
        weight_cfg, msr, tol = _read_scalars(read, kept)
    else:
        assert last is not None
        weight_cfg, msr, tol = _read_written_scalars(read, rows, last, kept)
    tag_rows = [e.tag_filter_resource_limits for e in read]
    # Almost no element has a tag filter: find the few that do without a Python-level loop.
    tagged = list(compress(range(len(read)), map(is_not, tag_rows, repeat(None))))
    usage_rows = [e.usage for e in ops]
    demand_rows = [e.demand for e in ops]
    op_vectors = _read_interleaved(usage_rows, demand_rows, [e.specified_resource_limits for e in ops])
    strong_rows = [e.strong_guarantee_resources for e in pools]
    pool_vectors = _read_interleaved(strong_rows, [e.specified_resource_limits for e in pools])
    arrays = _Arrays(len(tree.elements), total, last, rows)
    if ops:
        (
            arrays.usage[op_rows],
            arrays.demand[op_rows],
            arrays.schedulable[op_rows],
            arrays.step[op_rows],
            arrays.apply_limits[op_rows],
        ) = _operation_rows(ops, usage_rows, demand_rows, op_vectors)
    if pools:
        if rows is not None:
            arrays.strong = arrays.strong.copy()
        if pool_vectors is None:
            arrays.strong[pool_rows] = _stack(pools, "strong_guarantee_resources", strong_rows)
        else:
            arrays.strong[pool_rows] = pool_vectors[:, 0]
    if rows is None:
        fifo, integral_type, spec_mask = _read_pool_arrays(tree, pool_rows, pools, kept)
    else:
        assert last is not None
        fifo, integral_type, spec_mask = _read_written_pool_arrays(tree, pool_rows, pools, last, kept)
    if op_vectors is None or pool_vectors is None:
        specified = [e.specified_resource_limits for e in read]
        arrays.specified[rows_read.all] = _stack(read, "specified_resource_limits", specified)
    else:
        arrays.specified[op_rows] = op_vectors[:, 2]
        arrays.specified[pool_rows] = pool_vectors[:, 1]
    if tagged:
        arrays.tag_limits[tagged if rows is None else rows[tagged]] = _stack(
            [read[i] for i in tagged], "tag_filter_resource_limits", [tag_rows[i] for i in tagged]
        )
    _check_vectors(tree, arrays, rows)
    # Pools specify their main resource whenever they specify a strong guarantee (master validation).
    spec_mask = spec_mask.copy()
    spec_mask[:, RESOURCES.index(main_resource)] = True
    _keep_arrays(total, arrays, kept)
    return arrays.element_inputs((weight_cfg, msr, tol), (fifo, integral_type, spec_mask), rows, last), kept


class _RowsRead:
    """The elements a read visits (every row, or ``rows``), split into operations and pools, with their rows."""

    def __init__(self, tree: _Tree, rows: np.ndarray | None) -> None:
        elements = tree.elements
        if rows is None:
            is_op = tree.is_op
            self.all: Any = slice(None)
            self.op_rows: np.ndarray = tree.memo("op_idx", lambda: np.flatnonzero(is_op))
            self.pool_rows: np.ndarray = tree.memo("pool_idx", lambda: np.flatnonzero(~is_op))
            self.read: list[Any] = elements
            self.ops: list[Operation] = tree.memo("ops", lambda: list(compress(elements, is_op.tolist())))
            self.pools: list[Pool] = tree.pools
        else:
            is_op = tree.is_op[rows]
            self.all = rows
            self.op_rows = rows[is_op]
            self.pool_rows = rows[~is_op]
            self.read = [elements[i] for i in rows.tolist()]
            self.ops = list(compress(self.read, is_op.tolist()))
            self.pools = list(compress(self.read, (~is_op).tolist()))


class _Arrays:
    """The arrays a read writes its rows into: new ones (``last`` None; an operation's strong guarantee and a
    pool's usage, demand and flags are what a row nobody writes holds), or copies of ``last``'s with the default
    tag-filter limits (the totals) in ``rows``. ``strong`` is ``last``'s own until a pool row is written."""

    def __init__(self, n: int, total: np.ndarray, last: _KeptInputs | None, rows: np.ndarray | None) -> None:
        if last is None:
            self.usage = np.zeros((n, RESOURCE_COUNT))
            self.demand = np.zeros((n, RESOURCE_COUNT))
            self.strong = np.zeros((n, RESOURCE_COUNT))
            self.schedulable = np.ones(n, dtype=bool)
            self.step = np.zeros(n, dtype=bool)
            self.apply_limits = np.zeros(n, dtype=bool)
            self.specified = np.empty((n, RESOURCE_COUNT))
            self.tag_limits = np.tile(total, (n, 1))  # element 0 is the root; its own limits are the totals
        else:
            self.usage = last.usage.copy()
            self.demand = last.demand.copy()
            self.strong = last.strong_config
            self.schedulable = last.schedulable.copy()
            self.step = last.step.copy()
            self.apply_limits = last.apply_limits.copy()
            self.specified = last.specified_limits.copy()
            self.tag_limits = last.tag_limits.copy()  # the totals are those of ``last`` (``_written_rows``)
            self.tag_limits[rows] = total

    def element_inputs(
        self,
        scalars: tuple[np.ndarray, np.ndarray, np.ndarray],
        pool_arrays: tuple[np.ndarray, np.ndarray, np.ndarray],
        rows: np.ndarray | None,
        last: _KeptInputs | None,
    ) -> ElementInputs:
        """These arrays with the read's ``scalars`` (weights, max share ratios, tolerances) and ``pool_arrays``
        (FIFO flags, integral types, named-resource masks), as the read took them (``rows`` from ``last``)."""
        weight_cfg, msr, tol = scalars
        fifo, integral_type, spec_mask = pool_arrays
        return ElementInputs(
            usage=self.usage,
            demand=self.demand,
            tag_limits=self.tag_limits,
            specified_limits=self.specified,
            strong_config=self.strong,
            spec_mask=spec_mask,
            weight_cfg=weight_cfg,
            max_share_ratio=msr,
            tolerance=tol,
            apply_limits=self.apply_limits,
            schedulable=self.schedulable,
            step=self.step,
            fifo=fifo,
            integral_type=integral_type,
            read_rows=rows,
            read_from=last,
        )


def _read_scalars(elements: list[Any], kept: _KeptInputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every element's weight, max share ratio and starvation tolerance, checked, as read-only arrays (kept in
    ``kept``)."""
    weight_cfg = _readonly(_weights(elements, [e.weight for e in elements]))
    msr = _readonly(_unit_interval(elements, [e.max_share_ratio for e in elements], "max_share_ratio"))
    tol = _readonly(
        _unit_interval(elements, [e.starvation_tolerance for e in elements], "starvation_tolerance")
    )
    kept.weight_cfg, kept.msr_array, kept.tol_array = weight_cfg, msr, tol
    return weight_cfg, msr, tol


def _read_pool_arrays(
    tree: _Tree, pool_idx: np.ndarray, pools: list[Pool], kept: _KeptInputs
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pools' FIFO flags, integral types and specified-guarantee masks, checked (kept in ``kept``,
    read-only)."""
    pool_arrays = _pool_inputs(tree, pool_idx, pools)
    for array in pool_arrays:
        _readonly(array)
    kept.pool_arrays = pool_arrays
    return pool_arrays


def _keep_arrays(total: np.ndarray, arrays: _Arrays, kept: _KeptInputs) -> None:
    """This read's arrays into ``kept`` for the next read of the tree (read-only, shared with the update, whose
    steps write into none of them)."""
    kept.total = total.tobytes()
    kept.usage = _readonly(arrays.usage)
    kept.demand = _readonly(arrays.demand)
    kept.specified_limits = _readonly(arrays.specified)
    kept.tag_limits = _readonly(arrays.tag_limits)
    kept.strong_config = _readonly(arrays.strong)
    kept.schedulable = _readonly(arrays.schedulable)
    kept.step = _readonly(arrays.step)
    kept.apply_limits = _readonly(arrays.apply_limits)


def _check_vectors(tree: _Tree, arrays: _Arrays, rows: np.ndarray | None) -> None:
    """Vector inputs are non-negative numbers (finite but for limits) and operations' demand covers usage: of
    every row (``rows`` None) or of ``rows`` (sorted; the other rows were checked before). Raises for the first
    bad row of the first field, in the order of the fields."""
    for name, arr, allow_inf in (
        ("usage", arrays.usage, False),
        ("demand", arrays.demand, False),
        ("specified_resource_limits", arrays.specified, True),
        ("tag_filter_resource_limits", arrays.tag_limits, True),
        ("strong_guarantee_resources", arrays.strong, False),
    ):
        part = arr if rows is None else arr[rows]
        # ``0 <= x`` is false for NaN and negatives, ``x < inf`` for infinities: one test of the whole
        # array in the usual case, the rows only when something is wrong.
        good = part >= 0 if allow_inf else (part >= 0) & (part < np.inf)
        if good.all():
            continue
        bad = np.isnan(part) | (part < 0) | (~np.isfinite(part) if not allow_inf else False)
        found = np.flatnonzero(fn.row_any(bad))
        if len(found):
            row = int(found[0]) if rows is None else int(rows[found[0]])
            e = tree.elements[row]
            raise ConfigError(
                _path(e, name), f"resources must be non-negative numbers, got {arr[row].tolist()}"
            )
    usage, demand = arrays.usage, arrays.demand
    if rows is None:
        short = np.flatnonzero(fn.row_any(demand < usage) & tree.is_op)
    else:
        short = rows[fn.row_any(demand[rows] < usage[rows]) & tree.is_op[rows]]
    if len(short):
        e = tree.elements[int(short[0])]
        raise ConfigError(_path(e, "demand"), "demand must include usage (demand ≥ usage in every resource)")


def _read_written_scalars(
    read: list[Any], rows: np.ndarray, last: _KeptInputs, kept: _KeptInputs
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The weights, max share ratios and starvation tolerances of ``last`` with the ``rows`` (the elements
    ``read``) read again and checked (kept in ``kept``, read-only)."""
    weight_cfg = last.weight_cfg.copy()
    weight_cfg[rows] = _weights(read, [e.weight for e in read])
    msr_read = _unit_interval(read, [e.max_share_ratio for e in read], "max_share_ratio")
    tol_read = _unit_interval(read, [e.starvation_tolerance for e in read], "starvation_tolerance")
    msr = last.msr_array.copy()
    msr[rows] = msr_read
    tol = last.tol_array.copy()
    tol[rows] = tol_read
    kept.weight_cfg, kept.msr_array, kept.tol_array = _readonly(weight_cfg), _readonly(msr), _readonly(tol)
    return kept.weight_cfg, kept.msr_array, kept.tol_array


def _read_written_pool_arrays(
    tree: _Tree, pool_rows: np.ndarray, pools: list[Pool], last: _KeptInputs, kept: _KeptInputs
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``last``'s FIFO flags, integral types and specified-guarantee masks with the rows of the pools read
    again (their checks in tree order, as ``_pool_inputs`` runs them; kept in ``kept``, read-only)."""
    if pools:
        checked = _pool_inputs(tree, pool_rows, pools)
        pool_arrays = tuple(array.copy() for array in last.pool_arrays)
        for array, new in zip(pool_arrays, checked, strict=True):
            array[pool_rows] = new[pool_rows]
            _readonly(array)
    else:
        pool_arrays = last.pool_arrays
    kept.pool_arrays = pool_arrays  # type: ignore[assignment]
    return pool_arrays  # type: ignore[return-value]
