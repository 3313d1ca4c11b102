"""The previous build's rows (`BuildRows`) and how the next build of the same tree re-makes only what changed:
the published values compared with copies of the previous result's (`_Published`, `_Rows`), the specs of the
changed rows re-made in bulk (`_respec`), and the rows of the operations named by the period's delta
(`_operation_changes`). Every spec made here is the one `scheduling_tree_from_runtime`'s element walk makes.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Iterator, Mapping
from dataclasses import fields as dataclass_fields
from typing import Any

import numpy as np

from pooltree.resources import RESOURCE_COUNT, Vector
from pooltree.strategy.build_static import _BELOW, _NORMAL, _operation_static, _spec
from pooltree.strategy.snapshot import ElementSpec, SchedulingTree, SpecRows, StrategyConfig
from pooltree.tree.delta import RuntimeTree
from pooltree.tree.projection import OperationChanges, TreeProjection


class BuildRows:
    """The rows of a tree's build, the one thing a build hands the next (`build_scheduling_tree` takes the previous
    rows and returns its own; it may re-make the previous ones in place, so they are the next build's alone).

    Its rows (``ids``, the static parts ``statics``, the ``specs``), the strategy ``config`` and the ``tree`` made
    of them: when the next build's walk yields the very same static objects in the same order, the structure is
    unchanged and the new tree shares the previous one's validated structure and resolved settings
    (`SchedulingTree.with_shares`). With a ``key`` (the build read a result in bulk and every spec is a frozen
    model), also what it read: while the pool tree's ``revision`` (and the tree config and strategy config
    objects) are the same, every static part is the same object as before, so the next build skips the walk and
    only re-creates the specs whose published values changed, found by comparing the result's arrays with copies
    of the previous result's (`_Published`)."""

    __slots__ = (
        "config",
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
        "tree",
    )

    def __init__(
        self,
        key: tuple[Any, ...] | None,
        ids: list[str],
        statics: list[dict[str, Any]],
        specs: list[ElementSpec],
        tree: SchedulingTree,
        config: StrategyConfig,
        registration: list[int] | None = None,
    ):
        self.key = key
        """(pool tree, revision, tree config, strategy config, name) the rows were read at; None when the next build
        cannot bring them up to date (the result was not read in bulk, or a spec is a plain map): it walks."""
        self.ids = ids
        self.statics = statics
        self.specs = specs
        self.tree = tree
        self.config = config
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
    pool_tree: RuntimeTree,
    projection: TreeProjection,
    last: BuildRows,
    runtime_key: tuple[Any, ...],
    changed: OperationChanges,
) -> _OperationChanges | None:
    """Bring the previous build's rows up to the pool tree's revision when only some operations changed since (the
    period's delta, as the projection classified it: ``changed``): the rows of changed operations are dropped, and
    those running now get new rows at their place in registration order, with the static part the element walk computes (same cache key) and a spec
    the bulk path re-makes with this result's shares (their previous values are NaN, so they count as changed).
    None, with nothing changed, when the walk must run (rows not in registration order, a spec that is not a
    frozen model)."""
    registration = last.registration
    if registration is None or last.published is None or last.rows_from is not None:
        return None
    if not changed.frozen:
        return None
    operations = pool_tree.operations
    arriving = changed.running
    removed = set(changed.before)  # the operations with a row
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
        doomed = sorted((_row_of(op_id, ids, keys, pool_rows, projection) for op_id in removed), reverse=True)
        for row in doomed:
            del ids[row], statics[row], specs[row], keys[row - pool_rows]
    inserted: list[int] = []  # the new rows, ascending (each insertion lands after the ones before it)
    parents: dict[str, list[str]] = {}  # parent → its arriving operations, in registration order
    for parent in changed.before.values():
        parents.setdefault(parent, [])
    for index, op_id, op in arriving:
        entry = projection.operations[op_id]
        static = entry.row
        if static is None:
            static = entry.row = _operation_static(pool_tree, op_id, op)
        parents.setdefault(static["parent"], []).append(op_id)
        at = bisect.bisect_left(keys, index)
        keys.insert(at, index)
        row = pool_rows + at
        ids.insert(row, op_id)
        statics.insert(row, static)
        specs.insert(row, _spec(static, fair_share=np.zeros(RESOURCE_COUNT)))  # re-made with the new shares
        inserted.append(row)
    rows_from = _previous_rows(len(last.ids), doomed, inserted)
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
        _children(parents, last.tree, removed, operations),
        inserted[0] if inserted else len(ids),
    )


def _previous_rows(count: int, doomed: list[int], inserted: list[int]) -> np.ndarray:
    """Each row's previous row (-1: new): the ``count`` old rows without the ``doomed`` ones, with the
    ``inserted`` new ones (ascending rows of the result)."""
    rows_from = np.delete(np.arange(count, dtype=np.intp), doomed) if doomed else np.arange(count)
    if inserted:
        # np.insert takes the places in the array before any insertion: the k-th new row minus k
        rows_from = np.insert(rows_from, np.array(inserted) - np.arange(len(inserted)), -1)
    return rows_from


def _row_of(op_id: str, ids: list[str], keys: list[int], pool_rows: int, projection: TreeProjection) -> int:
    """The row of operation ``op_id``: found by its registration index among the operation rows' (``keys``, in
    row order from ``pool_rows`` on; the operation object is the first part of its projection key), checked, else
    looked for in ``ids``."""
    entry = projection.operations.get(op_id) or projection.departed.get(op_id)
    if entry is not None:
        row = pool_rows + bisect.bisect_left(keys, entry.key[0].registration_index)
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
    last: BuildRows,
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
    assert last.published is not None
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
    specs = SpecRows(last.specs)
    prepared: Mapping[str, tuple[tuple[float, ...], tuple[float, ...], tuple[bool, ...]]] = {}
    if changed.size:
        prepared = _respec(rows, changed, last, specs)
    last.specs = specs
    specs.base = last.tree  # the previous tree: the hints say how these specs derive from it
    try:
        if delta is None:
            tree = last.tree.with_shares(total_resources, specs)
        else:
            specs.ids = last.ids
            specs.tail = delta.first_new_row
            specs.children = delta.children
            tree = last.tree.with_operation_changes(total_resources, specs, delta.removed, delta.added)
    finally:
        # the hints are for this call only (and keep no tree alive until the next build); ``replaced`` is
        # rebound, never cleared: the tree may keep the list (`SchedulingTree.respecced`)
        specs.base = None
        specs.replaced = []
        specs.ids = None
        specs.children = None
    tree.prepared = prepared
    last.tree = tree
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
    last: BuildRows,
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
