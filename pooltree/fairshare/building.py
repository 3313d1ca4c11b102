"""Building the fair-share functions (b.5): every element's FSBS, bottom-up, level by height."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pooltree.fairshare import discretized, improved
from pooltree.fairshare import functions as fn
from pooltree.fairshare.layout import EPSILON, _child_ranges, _Tree
from pooltree.fairshare.reuse import (
    derived_statics,
    keep_functions,
    kept_functions,
    live_batches,
    rows_to_build,
)
from pooltree.resources import RESOURCE_COUNT

if TYPE_CHECKING:
    from pooltree.fairshare.update import _Update


# ---- functions (b.5) ----------------------------------------------------------------------------
def build_functions(
    upd: _Update, elements: np.ndarray, guarantee: np.ndarray, limits: np.ndarray
) -> fn.FunctionTable:
    """FSBS (with MFFBS) of ``elements`` (closed under descendants), bottom-up, as a table by element.

    The first build over the whole tree with the strong guarantees and limits shares is kept as the base:
    later builds recompute only the elements whose guarantee or limits differ from it (integral pools)
    and their ancestors, and take every other function from the base (the table refers to the base's
    batches; nothing is copied).

    The first full build of an update likewise starts from the previous update's full build of the same tree
    (``reuse._KeptFunctions``): only operations whose usage share, demand share, step flag, guarantee or limits
    changed, pools whose guarantee, limits or children's placements changed, and their ancestors are built.
    Each function depends only on its own inputs with the compiled passes (the sums are per parent, the
    suggestion pass function by function), so this is the same table bit for bit; with the numpy reference
    or the improved computation every update builds everything.
    """
    tree = upd.tree
    n = len(tree.elements)
    base = upd._base_functions
    full = base is None and len(elements) == n
    op_idx = tree.memo("op_idx", lambda: np.flatnonzero(tree.is_op))
    step_all = _step_flags(upd, op_idx) if full else None
    step_full = None
    if step_all is not None:
        step_full = np.zeros(n, dtype=bool)
        step_full[op_idx] = step_all
    placements = _placements(upd)
    key = (
        fn.compiled_kernels_active(),
        upd.settings.enable_improved_fair_share_by_fit_factor_computation,
    )
    # Discretized operations' functions read inputs the kept table does not compare (pending counts, per-job
    # vectors, the previous fair share): with the option on every update builds everything.
    reusable = not upd.settings.enable_discretized_fair_share
    kept = kept_functions(tree, key) if full and reusable else None
    built = _Built(n)
    if base is not None or kept is not None:
        source_table, elements = rows_to_build(
            upd, elements, guarantee, limits, base, kept, step_full, placements
        )
        built.start_from(source_table)
    ops = elements[tree.is_op[elements]]
    if len(ops):
        step = step_all if step_all is not None and len(ops) == len(op_idx) else _step_flags(upd, ops)
        built.add(ops, _operation_functions(upd, ops, step, guarantee, limits))
    _build_pools(upd, built, elements, guarantee, limits, placements)
    table = built.table(live_only=kept is not None)
    if full:
        if key == (True, False) and step_full is not None and reusable:
            table = keep_functions(upd, key, table, op_idx, step_full, guarantee, limits, placements)
        upd._base_functions = (table, guarantee.copy(), limits.copy())
    return table


class _Built:
    """The functions of one build so far, by element: the batches they are rows of, and each element's batch,
    row and number of points (for the sums' capacity); -1 where not built yet."""

    def __init__(self, n: int) -> None:
        self.batches: list[fn.FunctionBatch] = []
        self.batch_of = np.full(n, -1, dtype=np.int64)
        self.row_of = np.full(n, -1, dtype=np.int64)
        self.points = np.zeros(n, dtype=np.int64)

    def start_from(self, table: fn.FunctionTable) -> None:
        """Take every function of ``table`` (a kept build's; the rows to build are then built anew)."""
        self.batches.extend(table.batches)
        self.batch_of[:] = table.batch_of
        self.row_of[:] = table.row_of
        self.points[:] = table.points

    def add(self, elements: np.ndarray, batch: fn.FunctionBatch) -> None:
        """The functions of ``elements``, the rows of ``batch`` in their order."""
        self.batches.append(batch)
        self.batch_of[elements] = len(self.batches) - 1
        self.row_of[elements] = np.arange(len(elements))
        self.points[elements] = np.diff(batch.offsets)

    def table(self, *, with_points: bool = True, live_only: bool = False) -> fn.FunctionTable:
        """The table of what is built (``live_only``: without the batches no element's function is a row of)."""
        batches, batch_of = self.batches, self.batch_of
        if live_only:
            batches, batch_of = live_batches(batches, batch_of)
        if not with_points:
            return fn.FunctionTable(batches, batch_of, self.row_of)
        return fn.FunctionTable(batches, batch_of, self.row_of, self.points)


def _operation_functions(
    upd: _Update, ops: np.ndarray, step: np.ndarray, guarantee: np.ndarray, limits: np.ndarray
) -> fn.FunctionBatch:
    """b.5: the operations' FSBS from their usage and demand shares (FSBFF's closed form, the gang step; with
    ``enable_discretized_fair_share``, staircases of whole pending jobs: `discretized.py`)."""
    if upd.settings.enable_discretized_fair_share:
        return discretized.operation_fair_share_by_suggestion(upd, ops, step, guarantee[ops], limits[ops])
    return fn.operation_fair_share_by_suggestion(
        upd.usage_share[ops], upd.demand_share[ops], step, guarantee[ops], limits[ops]
    )


def _build_pools(
    upd: _Update,
    built: _Built,
    elements: np.ndarray,
    guarantee: np.ndarray,
    limits: np.ndarray,
    placements: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    """b.5: the pools among ``elements``, lowest first: FSBFF is the sum of the children's FSBS placed by weight
    (or FIFO rank), FSBS = FSBFF ∘ MFFBS."""
    tree = upd.tree
    scale_of, shift_of, right_of = placements
    if len(elements) == len(tree.elements):
        groups = tree.memo("height_groups", lambda: _height_groups(tree, np.flatnonzero(~tree.is_op)))
    else:
        groups = _height_groups(tree, elements[~tree.is_op[elements]])
    improved_sums = upd.settings.enable_improved_fair_share_by_fit_factor_computation
    for level, _counts, kids, slot, _parent_of in groups:
        scale, shift, right = scale_of[kids], shift_of[kids], right_of[level]
        if improved_sums:
            fsbff = _improved_sums(
                built.table(with_points=False), len(level), kids, slot, scale, shift, right
            )
        else:
            fsbff = fn.sum_children(built.table(), kids, slot, scale, shift, right)
        built.add(level, fn.fair_share_by_suggestion(fsbff, guarantee[level], limits[level]))


def _step_flags(upd: _Update, ops: np.ndarray) -> np.ndarray:
    """Whether each of ``ops`` takes the gang step function (its flag, the setting and its parent pool's)."""
    tree = upd.tree
    step = upd.step[ops] & upd.settings.enable_step_function_for_gang_operations
    gang = np.flatnonzero(step)
    step[gang] = [
        tree.elements[p].allow_gang_step_function  # type: ignore[attr-defined]
        for p in tree.parent[ops[gang]].tolist()
    ]
    return step


def _placements(upd: _Update) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every child's scale and shift and every pool's right bound in its parent's sum, by element.

    Computed for every pool (each value depends only on its pool and its children, so a build of a subset
    of pools reads the same numbers); kept with the guarantees while the weights are unchanged and no pool
    is FIFO (``derived_statics``).
    """
    if upd._placement is not None:
        return upd._placement
    tree = upd.tree
    derived = derived_statics(upd.statics, upd.any_fifo)
    placement = None if derived is None else derived.get("placement")
    if placement is not None:
        upd._placement = placement
        return placement  # type: ignore[no-any-return]
    n = len(tree.elements)
    scale_of = np.zeros(n)
    shift_of = np.zeros(n)
    right_of = np.ones(n)
    groups = tree.memo("height_groups", lambda: _height_groups(tree, np.flatnonzero(~tree.is_op)))
    for level, counts, kids, slot, parent_of in groups:
        fifo_child = upd.fifo[parent_of]
        w = upd.weight[kids]
        positive = w > EPSILON
        min_w = np.full(len(level), np.inf)
        np.minimum.at(min_w, slot[positive], w[positive])
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(positive, min_w[slot] / np.where(positive, w, 1.0), np.inf)
        scale_of[kids] = np.where(fifo_child, 1.0, scale)
        shift_of[kids] = np.where(fifo_child, upd.fifo_rank[kids].astype(float), 0.0)
        right_of[level] = np.where(upd.fifo[level] & (counts > 0), counts.astype(float), 1.0)
    for array in (scale_of, shift_of, right_of):
        array.flags.writeable = False
    upd._placement = (scale_of, shift_of, right_of)
    if derived is not None:
        derived["placement"] = upd._placement
    return upd._placement


def _heights(tree: _Tree) -> np.ndarray:
    """Height of every element: 0 for operations, 1 for pools without pools below, else 1 + the children's."""
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
    return height


def _height_groups(
    tree: _Tree, pools: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """``pools`` grouped by height, lowest first: each group's pools, their child counts, their children (pool
    by pool), every child's position in the group and its parent."""
    height = tree.memo("height", lambda: _heights(tree))
    groups = []
    for h in np.unique(height[pools]):
        level = pools[height[pools] == h]
        counts = tree.child_count[level]
        kids = _child_ranges(tree, level)
        slot = np.repeat(np.arange(len(level)), counts)
        groups.append((level, counts, kids, slot, tree.parent[kids]))
    return groups


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
