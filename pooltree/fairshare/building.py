"""Building the fair-share functions (b.5): every element's FSBS, bottom-up, level by height."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pooltree.fairshare import discretized, improved
from pooltree.fairshare import functions as fn
from pooltree.fairshare.layout import EPSILON, _child_ranges, _Tree
from pooltree.resources import RESOURCE_COUNT


@dataclass(frozen=True, slots=True)
class Placements:
    """Every child's scale and shift and every pool's right bound in its parent's sum (b.5), by element."""

    scale: np.ndarray
    shift: np.ndarray
    right: np.ndarray


@dataclass(frozen=True, slots=True)
class FunctionInputs:
    """What every element's fair-share function is built from besides its guarantee and limits shares: the
    operations' usage and demand shares and gang step flags (`step_flags`), the children's placements, whether
    pools' sums are the improved ones, and the discretized operations' inputs (None with the option off)."""

    tree: _Tree
    usage_share: np.ndarray
    demand_share: np.ndarray
    step: np.ndarray
    placements: Placements
    improved: bool
    discretized: discretized.DiscretizedInputs | None


# ---- functions (b.5) ----------------------------------------------------------------------------
def build_functions(
    inputs: FunctionInputs,
    elements: np.ndarray,
    guarantee: np.ndarray,
    limits: np.ndarray,
    start: fn.FunctionTable | None = None,
) -> fn.FunctionTable:
    """b.5: FSBS (with MFFBS) of ``elements`` (closed under ancestors), bottom-up, as a table by element; every
    other element's function is ``start``'s (the table refers to its batches; nothing is copied)."""
    built = _Built(len(inputs.tree.elements))
    if start is not None:
        built.start_from(start)
    ops = elements[inputs.tree.is_op[elements]]
    if len(ops):
        built.add(ops, _operation_functions(inputs, ops, guarantee, limits))
    _build_pools(inputs, built, elements, guarantee, limits)
    return built.table()


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

    def table(self, *, with_points: bool = True) -> fn.FunctionTable:
        """The table of what is built."""
        if not with_points:
            return fn.FunctionTable(self.batches, self.batch_of, self.row_of)
        return fn.FunctionTable(self.batches, self.batch_of, self.row_of, self.points)


def _operation_functions(
    inputs: FunctionInputs, ops: np.ndarray, guarantee: np.ndarray, limits: np.ndarray
) -> fn.FunctionBatch:
    """b.5: the operations' FSBS from their usage and demand shares (FSBFF's closed form, the gang step; with
    ``enable_discretized_fair_share``, staircases of whole pending jobs: `discretized.py`)."""
    usage, demand, step = inputs.usage_share[ops], inputs.demand_share[ops], inputs.step[ops]
    if inputs.discretized is not None:
        return discretized.operation_fair_share_by_suggestion(
            inputs.discretized, ops, step, usage, demand, guarantee[ops], limits[ops]
        )
    return fn.operation_fair_share_by_suggestion(usage, demand, step, guarantee[ops], limits[ops])


def _build_pools(
    inputs: FunctionInputs, built: _Built, elements: np.ndarray, guarantee: np.ndarray, limits: np.ndarray
) -> None:
    """b.5: the pools among ``elements``, lowest first: FSBFF is the sum of the children's FSBS placed by weight
    (or FIFO rank), FSBS = FSBFF ∘ MFFBS."""
    tree = inputs.tree
    placements = inputs.placements
    scale_of, shift_of, right_of = placements.scale, placements.shift, placements.right
    if len(elements) == len(tree.elements):
        groups = tree.memo("height_groups", lambda: _height_groups(tree, np.flatnonzero(~tree.is_op)))
    else:
        groups = _height_groups(tree, elements[~tree.is_op[elements]])
    for level, _counts, kids, slot, _parent_of in groups:
        scale, shift, right = scale_of[kids], shift_of[kids], right_of[level]
        if inputs.improved:
            fsbff = _improved_sums(
                built.table(with_points=False), len(level), kids, slot, scale, shift, right
            )
        else:
            fsbff = fn.sum_children(built.table(), kids, slot, scale, shift, right)
        built.add(level, fn.fair_share_by_suggestion(fsbff, guarantee[level], limits[level]))


def step_flags(tree: _Tree, step: np.ndarray, enabled: bool) -> np.ndarray:
    """b.5's gang step: whether each element is an operation that takes the step function (its flag, the setting
    ``enable_step_function_for_gang_operations`` and its parent pool's ``allow_gang_step_function``)."""
    ops = tree.memo("op_idx", lambda: np.flatnonzero(tree.is_op))
    flags = step[ops] & enabled
    gang = np.flatnonzero(flags)
    flags[gang] = [
        tree.elements[p].allow_gang_step_function  # type: ignore[attr-defined]
        for p in tree.parent[ops[gang]].tolist()
    ]
    full = np.zeros(len(tree.elements), dtype=bool)
    full[ops] = flags
    return full


def placements(tree: _Tree, fifo: np.ndarray, weight: np.ndarray, fifo_rank: np.ndarray) -> Placements:
    """b.5: every child's scale (the least positive weight among its siblings over its own; 1 in a FIFO pool) and
    shift (its FIFO rank) on its parent's axis, and every pool's right bound (a FIFO pool's: its child count).

    Each value depends only on its pool and its children, so a build of a subset of pools reads the same numbers.
    """
    n = len(tree.elements)
    scale_of = np.zeros(n)
    shift_of = np.zeros(n)
    right_of = np.ones(n)
    groups = tree.memo("height_groups", lambda: _height_groups(tree, np.flatnonzero(~tree.is_op)))
    for level, counts, kids, slot, parent_of in groups:
        fifo_child = fifo[parent_of]
        w = weight[kids]
        positive = w > EPSILON
        min_w = np.full(len(level), np.inf)
        np.minimum.at(min_w, slot[positive], w[positive])
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(positive, min_w[slot] / np.where(positive, w, 1.0), np.inf)
        scale_of[kids] = np.where(fifo_child, 1.0, scale)
        shift_of[kids] = np.where(fifo_child, fifo_rank[kids].astype(float), 0.0)
        right_of[level] = np.where(fifo[level] & (counts > 0), counts.astype(float), 1.0)
    for array in (scale_of, shift_of, right_of):
        array.flags.writeable = False
    return Placements(scale_of, shift_of, right_of)


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
