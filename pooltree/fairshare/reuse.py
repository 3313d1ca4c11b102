"""What one fair-share update keeps for the next update of the same tree, and when it may take it again.

The rules of the update live in their modules (``guarantees.py``, ``building.py``, ...); this module holds only
the reuse: the kept results (the flattened tree, `flatten`; the read's arrays, ``inputs._KeptInputs`` on ``_Tree.inputs``; ``_StaticGuarantees``
on ``_Tree.guarantees``; ``_KeptFunctions`` on ``_Tree.functions``), the exact keys and bit-for-bit comparisons
that decide what may be taken again, and the functions that keep them; ``update.py`` calls them beside the steps. Taking kept results gives the same update bit for bit (ARCHITECTURE.md, "Updates of the
same tree").
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from itertools import chain
from typing import Any, TypeVar

import numpy as np

from pooltree.errors import ConfigError
from pooltree.fairshare import functions as fn
from pooltree.fairshare import layout
from pooltree.fairshare.building import FunctionInputs, build_functions
from pooltree.fairshare.guarantees import Guarantees, Limits
from pooltree.fairshare.inputs import _KeptInputs, _readonly
from pooltree.fairshare.layout import _Tree
from pooltree.fairshare.model import Pool, UpdateSettings

T = TypeVar("T")


# ---- reuse of the previous layout ---------------------------------------------------------------
def flatten(
    root: Pool,
    previous: _Tree | None = None,
    relaid: frozenset[str] | None = None,
    renewed: frozenset[str] = frozenset(),
) -> _Tree:
    """The flattened tree of ``root`` (``layout._flatten_new``), or the previous update's taken whole or patched, as
    the caller's delta says.

    ``relaid`` (``UpdateState.relaid``, from the period's delta): the pools whose children lists the caller
    replaced since ``previous`` (the previous update's tree, carried by its ``UpdateState``) was read; ``renewed``
    (``UpdateState.renewed``): the operations among their children whose element is a new object (arrived, re-made
    or moved). Empty: the structure is ``previous``'s, taken whole with everything derived from it (``_Tree.memo``).
    Pools named: when only operations arrived, left or moved under them, ``previous`` patched (``_patched``: its
    rows shifted with numpy, those pools' blocks re-laid, each child that is not renewed at its row before, found by
    its id), row for row what ``_flatten_new`` makes. None (not known: the first update, a caller that does not say)
    or ``previous`` of another root: flattened anew.
    """
    if not isinstance(root, Pool):
        raise ConfigError("pools", "the root must be a Pool")
    cached = previous if previous is not None and previous.elements[0] is root else None
    if cached is None or relaid is None:
        return layout._flatten_new(root)
    if not relaid:
        return cached  # no pool's children list was replaced (the period's delta)
    place = cached.memo("pool_place", lambda: {pool.id: k for k, pool in enumerate(cached.pools)})
    changed = sorted(place.get(pool_id, -1) for pool_id in relaid)
    tree = None
    if changed[0] >= 0:  # every pool named is one of the previous tree's
        child_lists = [p.children or () for p in cached.pools]
        counts = list(map(len, child_lists))  # children must be sized lists, as before
        elements: list[Any] = [root]
        elements += chain.from_iterable(child_lists)
        blocks = layout._Blocks(cached, counts, elements)
        tree = layout._patched(cached, blocks, changed, child_lists, renewed, counts)
    if tree is None:
        return layout._flatten_new(root)
    if cached.functions is not None:
        cached.previous = None  # one step back only
        cached.rows_from = None
        tree.previous = cached  # its functions and inputs are carried to the elements still there
    else:
        tree.rows_from = None
    return tree


# ---- reuse of the previous read ----------------------------------------------------------------
def rows_to_read(
    tree: _Tree, total: np.ndarray, written: Collection[Any] | None
) -> tuple[_KeptInputs | None, np.ndarray | None]:
    """The previous read to start this update's read from and the rows to read again (``inputs.read_rows``), or
    (None, None): read every row.

    An update told which operations were written since the previous update of the same tree (``written``:
    ``UpdateState.written``, the period's delta of inputs) reads only those operations' rows into the previous
    read's arrays; so does the update of a tree patched from the previous one (operations arrived, left or moved:
    ``layout._patched``), which also reads the new rows. Anything else reads every row. Both give the same arrays
    and raise the same first error.
    """
    if written is None:
        return None, None
    last: _KeptInputs | None = tree.inputs
    new_rows = None
    if last is None:
        carried = _carried_inputs(tree)
        if carried is not None:
            last, new_rows = carried
    if last is None:
        return None, None
    rows = _written_rows(tree, total, last, written, new_rows)
    return (None, None) if rows is None else (last, rows)


def keep_read(tree: _Tree, read: _KeptInputs) -> None:
    """Keep this update's read for the next update of the tree (its checks have all passed)."""
    tree.inputs = read


def _written_rows(
    tree: _Tree,
    total: np.ndarray,
    last: _KeptInputs,
    written: Collection[Any],
    new_rows: np.ndarray | None = None,
) -> np.ndarray | None:
    """Rows (sorted) of the tree's operations among ``written`` and the ``new_rows``, or None: read every row
    (the totals changed, or too many were written)."""
    if last.total != total.tobytes():
        return None  # every row's default tag-filter limits are the totals
    ops = tree.memo("op_idx", lambda: np.flatnonzero(tree.is_op))
    limit = len(ops) * WRITTEN_SHARE_LIMIT
    if len(written) > 4 * limit:
        return None
    elements = tree.elements
    unique = dict.fromkeys(written)  # elements hash by identity (``eq=False``)
    rows: list[int] = []
    if new_rows is not None:
        for row in new_rows.tolist():
            unique.pop(elements[row], None)
            rows.append(row)
    if len(unique) + len(rows) > limit:
        return None
    for element in unique:
        row = tree.row_of(element)
        if row is not None:
            rows.append(row)
    rows.sort()
    return np.array(rows, dtype=np.int64)


WRITTEN_SHARE_LIMIT = 0.5
"""Above this share of the operations written since the last read, every row is read (one pass over each field
costs less than finding the rows)."""


def _carried_inputs(tree: _Tree) -> tuple[_KeptInputs, np.ndarray] | None:
    """The inputs kept by the previous tree of the root laid out by ``tree``'s rows, when the layout patched that
    tree into this one (``_Tree.rows_from``: operations arrived, left or moved under the same pools), and the rows
    that are new (read by the update with the written ones). None when there is nothing to carry."""
    previous = tree.previous
    rows_from = tree.rows_from
    if previous is None or rows_from is None:
        return None
    last = previous.inputs
    if last is None:
        return None
    source = np.maximum(rows_from, 0)
    new_rows = np.flatnonzero(rows_from < 0)
    carried = _KeptInputs(last)
    carried.total = last.total
    for name in _CARRIED_ARRAYS:
        array = np.take(getattr(last, name), source, axis=0)  # faster than [source]
        array[new_rows] = 0  # what a full read leaves in an operation's row where it reads nothing (strong)
        setattr(carried, name, array)
    pool_arrays = tuple(np.take(array, source, axis=0) for array in last.pool_arrays)
    for array in pool_arrays:
        array[new_rows] = 0  # not a pool: not FIFO, no integral type, no specified guarantee resources
        _readonly(array)
    carried.pool_arrays = pool_arrays  # type: ignore[assignment]
    return carried, new_rows


_CARRIED_ARRAYS = (
    "weight_cfg",
    "msr_array",
    "tol_array",
    "usage",
    "demand",
    "specified_limits",
    "tag_limits",
    "strong_config",
    "schedulable",
    "step",
    "apply_limits",
)


# ---- reuse of the previous update's guarantees ---------------------------------------------------
def reuse_guarantees(
    tree: _Tree,
    key: tuple[Any, ...],
    sources: tuple[np.ndarray, ...],
    read_rows: np.ndarray | None,
    read_from: Any,
) -> _StaticGuarantees | None:
    """The previous update's limits, guarantees and weights when everything they are computed from is the same
    (``key``: `guarantees_key`; ``sources``: the element inputs `_STATIC_INPUTS` names, compared by
    `_same_statics`), else None: the update computes them (``compute_limits``, ``infer_strong_guarantees``,
    ``adjust_guarantees``, ``compute_weights``, ``compute_estimated_guarantees``)."""
    kept = tree.guarantees
    if kept is None or kept.key != key or not _same_statics(tree, kept, sources, read_rows, read_from):
        return None
    kept.read = tree.inputs  # the latest read its sources are every row of
    return kept  # type: ignore[no-any-return]


def check_weights(reused: _StaticGuarantees | None, weight_cfg: np.ndarray) -> _StaticGuarantees | None:
    """After the historic weights were made (`historic_usage.apply_historic_weights`): the previous update's
    guarantees are taken again only when these weights are also the same in every bit."""
    if reused is not None and np.any(weight_cfg.view(np.int64) != reused.weight_cfg.view(np.int64)):
        return None  # the weights moved in some bit: computed anew
    return reused


_STATIC_INPUTS = (
    "tag_limits",
    "max_share_ratio",
    "specified_limits",
    "strong_config",
    "spec_mask",
    "weight_cfg",
    "fifo",
    "priority",
    "integral_type",
    "burst_ratio",
    "total_burst_ratio",
    "total_flow_ratio",
)
"""The element inputs of the reusable steps (read, then capped, flagged and turned into integral ratios by the
steps before them), in the order of ``sources``."""


def _same_statics(
    tree: _Tree,
    kept: _StaticGuarantees,
    sources: tuple[np.ndarray, ...],
    rows: np.ndarray | None,
    read_from: Any,
) -> bool:
    """Whether this update's element inputs of the reusable steps are ``kept``'s, bit for bit.

    The period's delta says where they can differ: when the kept ones are every row of the read this update's read
    started from (``kept.read`` is ``read_from``), only the rows it read again (``rows``: the operations the caller
    wrote, `UpdateState.written`) can; so only those are compared, unless one of them is a pool (a pool's flags
    reach its descendants' priority). Otherwise (every row read) every row is compared."""
    if rows is None or read_from is not kept.read or not tree.is_op[rows].all():
        return all(_same_bits(now, then) for now, then in zip(sources, kept.sources, strict=True))
    return all(_same_bits(now[rows], then[rows]) for now, then in zip(sources, kept.sources, strict=True))


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays of the same layout are equal bit for bit (-0.0 is not 0.0; the same NaN is the same)."""
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def derived_statics(statics: _StaticGuarantees | None, any_fifo: bool) -> dict[Any, Any] | None:
    """Where arrays computed from the kept guarantees' weights and the structure alone are kept for later
    updates that reuse them (the functions' placements, the children's suggestion ratios); None when there
    is no kept state or some pool is FIFO (then those arrays also depend on the FIFO order)."""
    if statics is None or any_fifo:
        return None
    return statics.derived


def guarantees_key(settings: UpdateSettings, total: np.ndarray) -> tuple[Any, ...]:
    """What the reusable steps read besides the element inputs (`_STATIC_INPUTS`): the two settings they read, the
    totals and the best-allocation memory caps (floats by their bytes: -0.0 is not 0.0)."""
    caps = settings.best_allocation_memory
    return (
        settings.main_resource,
        settings.infer_weight_from_guarantees_share_multiplier,
        total.tobytes(),
        tuple(caps),
        np.fromiter(caps.values(), dtype=float, count=len(caps)).tobytes(),
    )


def keep_guarantees(
    tree: _Tree,
    key: tuple[Any, ...],
    sources: tuple[np.ndarray, ...],
    weight_cfg: np.ndarray,
    limits: Limits,
    strong: Guarantees,
) -> _StaticGuarantees:
    """Keep this update's results of the reusable steps for the next update of the same tree (read-only: results
    of later updates share them); run only when those steps raised no alert."""
    kept = _StaticGuarantees(key, sources, tree.inputs, weight_cfg, limits, strong, {})
    for array in (
        limits.resource_limits,
        limits.limits_share,
        strong.inferred,
        strong.sgs,
        strong.weight,
        strong.egs,
    ):
        array.flags.writeable = False
    tree.guarantees = kept
    return kept


@dataclass(eq=False, slots=True)
class _StaticGuarantees:
    """Results of the steps that depend on the configuration and the totals only, with what they came from.

    In a simulator or a live tree most updates change only usage and demand: the next update of the same tree
    (the same ``_Tree``, so the same structure) with the same ``key`` and element inputs (`_same_statics`) takes
    these instead of recomputing them.
    Kept only when those steps raised no alert, so that reusing them repeats no alert and drops none.
    """

    key: tuple[Any, ...]
    sources: tuple[np.ndarray, ...]  # the element inputs they were computed from (`_STATIC_INPUTS`)
    read: Any  # the latest read (``inputs._KeptInputs``) whose arrays ``sources`` are, in every row
    weight_cfg: np.ndarray  # the configured weights (historic ones included) they came from
    limits: Limits
    strong: Guarantees
    derived: dict[Any, Any]  # arrays of later steps computed from these weights (``derived_statics``)


class _KeptFunctions:
    """The last full build of a tree's functions and every input each function row was computed from, kept on the
    tree (``_Tree.functions``) so that the next update of the same structure recomputes only the rows whose inputs
    changed (and their ancestors) and takes the others from this table."""

    __slots__ = (
        "demand_share",
        "guarantee",
        "inputs",
        "key",
        "limits",
        "right",
        "scale",
        "shift",
        "stale",
        "step",
        "table",
        "usage_share",
    )

    def __init__(
        self,
        key: tuple[Any, ...],
        table: fn.FunctionTable,
        stale: np.ndarray | None = None,
        **arrays: np.ndarray,
    ):
        self.key = key
        self.table = table
        self.stale = stale  # rows to build whatever their inputs (``_carried``: new elements, changed pools)
        self.inputs: Any = None
        """The read (``inputs._KeptInputs``) the kept usage and demand shares were computed from: an update whose
        read started from it and re-read only the period's written rows (``ElementInputs.read_rows``) finds the
        operations whose shares may differ among those rows alone."""
        for name, value in arrays.items():
            setattr(self, name, value)

    usage_share: np.ndarray
    demand_share: np.ndarray
    step: np.ndarray
    guarantee: np.ndarray
    limits: np.ndarray
    scale: np.ndarray
    shift: np.ndarray
    right: np.ndarray


_KEPT_BATCHES_LIMIT = 24
"""A kept table whose rows are spread over more batches than this is copied into two (operations, pools): every
reusing update adds a few small batches, and the compiled passes take the list of batches on every call."""


def _rows_differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rows of two (n, 5) float arrays that differ in some bit (-0.0 is not 0.0; the same NaN is the same)."""
    return fn.row_any(a.view(np.int64) != b.view(np.int64))


def _values_differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Entries of two float arrays that differ in some bit."""
    return a.view(np.int64) != b.view(np.int64)


def _carried(previous: _Tree, tree: _Tree) -> _KeptFunctions | None:
    """The previous tree's kept functions laid out by ``tree``'s rows, for an update of the previous tree patched
    with the period's delta (operations arrived, left or moved: ``layout._patched``, whose ``rows_from`` maps each
    row to its row before): an element that was in the previous tree keeps its row's function and inputs;
    elements that were not, and pools whose children are not the same elements in the same order (a sum depends
    on its order), are ``stale``."""
    kept = previous.functions
    rows = tree.rows_from
    if kept is None or rows is None:
        return None
    n = len(tree.elements)
    mapped = rows >= 0
    stale = ~mapped
    # Children: the child at position k of a pool must be the element at position k of the same pool before.
    kids = np.arange(1, n, dtype=np.int64)
    parents = tree.parent[kids]
    old_parents = rows[parents]
    old_start = np.where(old_parents >= 0, previous.child_start[np.maximum(old_parents, 0)], -1)
    expected = old_start + (kids - tree.child_start[parents])
    moved = (old_parents < 0) | (rows[kids] != expected)
    stale[parents[moved]] = True
    pools = np.flatnonzero(~tree.is_op & mapped)
    stale[pools[previous.child_count[rows[pools]] != tree.child_count[pools]]] = True
    source = np.maximum(rows, 0)
    fresh = np.flatnonzero(~mapped)

    def take(values: np.ndarray, fill: Any) -> np.ndarray:
        out = np.take(values, source, axis=0)  # ~5x faster than ``values[source]`` for (n, 5) rows
        out[fresh] = fill
        return out

    old = kept.table
    table = fn.FunctionTable(
        old.batches,
        take(old.batch_of, -1),
        take(old.row_of, -1),
        take(old.points, 0),  # type: ignore[arg-type]
    )
    carried = _KeptFunctions(
        kept.key,
        table,
        stale,
        usage_share=take(kept.usage_share, np.nan),
        demand_share=take(kept.demand_share, np.nan),
        step=take(kept.step, False),
        guarantee=take(kept.guarantee, np.nan),
        limits=take(kept.limits, np.nan),
        scale=take(kept.scale, np.nan),
        shift=take(kept.shift, np.nan),
        right=take(kept.right, np.nan),
    )
    carried.inputs = kept.inputs  # laid out by the same rows as the read carried from the previous tree's
    return carried


def live_batches(
    batches: list[fn.FunctionBatch], batch_of: np.ndarray
) -> tuple[list[fn.FunctionBatch], np.ndarray]:
    """The batches some element's function is still a row of, and ``batch_of`` renumbered to them."""
    used = np.unique(batch_of[batch_of >= 0])
    if len(used) == len(batches):
        return batches, batch_of
    renumber = np.full(len(batches), -1, dtype=np.int64)
    renumber[used] = np.arange(len(used))
    live = batch_of >= 0
    batch_of = batch_of.copy()
    batch_of[live] = renumber[batch_of[live]]
    return [batches[int(b)] for b in used.tolist()], batch_of


def _consolidated(table: fn.FunctionTable, op_idx: np.ndarray, pool_idx: np.ndarray) -> fn.FunctionTable:
    """The same functions copied into one batch of operations and one of pools (points copied as they are)."""
    n = len(table.batch_of)
    batches: list[fn.FunctionBatch] = []
    batch_of = np.full(n, -1, dtype=np.int64)
    row_of = np.full(n, -1, dtype=np.int64)
    for rows in (op_idx, pool_idx):
        if len(rows):
            batches.append(table.gather(rows))
            batch_of[rows] = len(batches) - 1
            row_of[rows] = np.arange(len(rows))
    return fn.FunctionTable(batches, batch_of, row_of, table.points)


def kept_functions(tree: _Tree, key: tuple[Any, ...]) -> _KeptFunctions | None:
    """The previous full build of ``tree``'s functions to start a full build from, or None.

    Only the compiled passes without the improved computation (``key`` ``(True, False)``) build row by row, so
    only they start from a kept build; a new structure of the same root takes its previous tree's build through
    its rows (``_carried``), once.
    """
    if key != (True, False):
        return None
    if tree.functions is None and tree.previous is not None:
        tree.functions = _carried(tree.previous, tree)  # a new structure: rows of the same elements
    tree.previous = tree.rows_from = None
    kept = tree.functions
    return kept if kept is not None and kept.key == key else None


class FunctionBuilds:
    """An update's builds of the fair-share functions (b.5's rule: `building.build_functions`), each started from
    what may be taken again.

    The first full build starts from the previous update's full build of the same tree (``_KeptFunctions``): only
    operations whose usage share, demand share, step flag, guarantee or limits changed, pools whose guarantee,
    limits or children's placements changed, and their ancestors are built (`_rows_from_kept`). Each function
    depends only on its own inputs with the compiled passes (the sums are per parent, the suggestion pass function
    by function), so this is the same table bit for bit; with the numpy reference, the improved computation or
    discretized operations (whose functions read inputs the kept table does not compare: pending counts, per-job
    vectors, the previous fair share) every update builds everything. That first full build, with the strong
    guarantees and limits shares, is kept as this update's *base*: later builds (the integral stages', the final
    one) build only the elements whose guarantee or limits differ from it and their ancestors (`_rows_from_base`).
    """

    def __init__(self, inputs: FunctionInputs, read_rows: np.ndarray | None, read_from: Any) -> None:
        self.inputs = inputs
        self.read_rows = read_rows  # the rows this update's read took again (None: every row)
        self.read_from = read_from  # the read it started from
        self.key = (fn.compiled_kernels_active(), inputs.improved)
        self.base: tuple[fn.FunctionTable, np.ndarray, np.ndarray] | None = None

    def build(self, elements: np.ndarray, guarantee: np.ndarray, limits: np.ndarray) -> fn.FunctionTable:
        """The functions of ``elements`` (closed under descendants) with these guarantee and limits shares, as a
        table by element."""
        inputs = self.inputs
        tree = inputs.tree
        full = self.base is None and len(elements) == len(tree.elements)
        reusable = inputs.discretized is None
        kept = kept_functions(tree, self.key) if full and reusable else None
        start = None
        if self.base is not None:
            start, elements = _rows_from_base(tree, elements, guarantee, limits, self.base)
        elif kept is not None:
            start, elements = kept.table, _rows_from_kept(self, kept, guarantee, limits)
        table = build_functions(inputs, elements, guarantee, limits, start)
        if kept is not None:
            batches, batch_of = live_batches(table.batches, table.batch_of)
            if batches is not table.batches:  # some kept batch is no element's any more
                table = fn.FunctionTable(batches, batch_of, table.row_of, table.points)
        if full:
            if self.key == (True, False) and reusable:
                table = keep_functions(tree, self.key, table, inputs, guarantee, limits)
            self.base = (table, guarantee.copy(), limits.copy())
        return table


def _rows_from_base(
    tree: _Tree,
    elements: np.ndarray,
    guarantee: np.ndarray,
    limits: np.ndarray,
    base: tuple[fn.FunctionTable, np.ndarray, np.ndarray],
) -> tuple[fn.FunctionTable, np.ndarray]:
    """This update's base build and the rows of ``elements`` to build on top of it: those whose guarantee or limits
    differ from the base's, and their ancestors among ``elements``."""
    source_table, base_guarantee, base_limits = base
    member = np.zeros(len(tree.elements), dtype=bool)
    member[elements] = True
    dirty = member & (fn.row_any(guarantee != base_guarantee) | fn.row_any(limits != base_limits))
    return source_table, _with_ancestors(tree, dirty, member)


def _rows_from_kept(
    builds: FunctionBuilds, kept: _KeptFunctions, guarantee: np.ndarray, limits: np.ndarray
) -> np.ndarray:
    """The rows to build on top of the previous update's ``kept`` build: those whose guarantee, limits, usage or
    demand share (among the rows the period's delta wrote, when it can say: `_shares_moved`), step flag or placement
    in the parent's sum differ in some bit from the ones its rows were built from, its stale rows, and their
    ancestors."""
    inputs = builds.inputs
    tree = inputs.tree
    placements = inputs.placements
    dirty = tree.is_op & (inputs.step != kept.step)
    _shares_moved(builds, kept, dirty)
    if kept.stale is not None:
        dirty |= kept.stale
    dirty |= _rows_differ(guarantee, kept.guarantee) | _rows_differ(limits, kept.limits)
    moved = _values_differ(placements.scale, kept.scale) | _values_differ(placements.shift, kept.shift)
    moved_kids = np.flatnonzero(moved)
    dirty[tree.parent[moved_kids[moved_kids > 0]]] = True
    dirty |= _values_differ(placements.right, kept.right)
    return _with_ancestors(tree, dirty, None)


def _with_ancestors(tree: _Tree, dirty: np.ndarray, member: np.ndarray | None) -> np.ndarray:
    """The rows of ``dirty`` and their ancestors (among ``member``, when given), sorted."""
    for level in tree.parent_levels(bottom_up=True):
        kids_dirty = np.logical_or.reduceat(dirty[level.children], level.seg)
        if member is not None:
            kids_dirty &= member[level.parents]
        dirty[level.parents] |= kids_dirty
    return np.flatnonzero(dirty)


def _shares_moved(builds: FunctionBuilds, kept: _KeptFunctions, dirty: np.ndarray) -> None:
    """Mark the operations whose usage or demand share differs in some bit from the kept build's.

    An operation's shares are computed from its own inputs and the totals only (``compute_attributes``). When the
    kept build's shares came from the read this update's read started from (the same totals), only the rows it
    re-read, the period's written operations and the new rows (``read_rows``), can differ: only those are
    compared. So it is after a patched layout, when the kept build was carried by the same rows as that read
    (``_carried``, ``_carried_inputs``). Otherwise every operation is."""
    inputs = builds.inputs
    tree = inputs.tree
    rows = builds.read_rows
    read_from = builds.read_from
    started_from = read_from if kept.stale is None or read_from is None else read_from.carried_from
    if rows is None or kept.inputs is None or kept.inputs is not started_from:
        dirty |= tree.is_op & (
            _rows_differ(inputs.usage_share, kept.usage_share)
            | _rows_differ(inputs.demand_share, kept.demand_share)
        )
        return
    ops = rows[tree.is_op[rows]]
    moved = _rows_differ(inputs.usage_share[ops], kept.usage_share[ops])
    moved |= _rows_differ(inputs.demand_share[ops], kept.demand_share[ops])
    dirty[ops[moved]] = True


def keep_functions(
    tree: _Tree,
    key: tuple[Any, ...],
    table: fn.FunctionTable,
    inputs: FunctionInputs,
    guarantee: np.ndarray,
    limits: np.ndarray,
) -> fn.FunctionTable:
    """Keep this full build and its inputs on the tree for the next update (``_Tree.functions``); returns the
    table, copied into two batches once it is spread over more than ``_KEPT_BATCHES_LIMIT``."""
    if len(table.batches) > _KEPT_BATCHES_LIMIT:
        op_idx = tree.memo("op_idx", lambda: np.flatnonzero(tree.is_op))
        table = _consolidated(table, op_idx, tree.memo("pool_idx", lambda: np.flatnonzero(~tree.is_op)))
    placements = inputs.placements
    kept = tree.functions = _KeptFunctions(
        key,
        table,
        usage_share=inputs.usage_share.copy(),
        demand_share=inputs.demand_share.copy(),
        step=inputs.step,
        guarantee=guarantee.copy(),
        limits=limits.copy(),
        scale=placements.scale,
        shift=placements.shift,
        right=placements.right,
    )
    kept.inputs = tree.inputs  # this update's read
    return table


def derived_value(derived: dict[Any, Any] | None, key: Any, make: Callable[[], T]) -> T:
    """``derived[key]`` (arrays of later steps computed from the kept guarantees' weights: `derived_statics`), made
    by ``make`` and kept there the first time; ``make()`` each time without a place to keep it."""
    if derived is None:
        return make()
    value = derived.get(key)
    if value is None:
        value = derived[key] = make()
    return value  # type: ignore[no-any-return]
