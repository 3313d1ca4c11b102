"""Building the fair-share functions (b.5): every element's FSBS, bottom-up, level by height."""

from __future__ import annotations

import numpy as np

from pooltree.fairshare import functions as fn
from pooltree.fairshare import improved
from pooltree.fairshare.layout import EPSILON, _child_ranges, _Tree
from pooltree.resources import RESOURCE_COUNT


class _Building:
    """``_Update``'s function builds (the first full build is kept as the base of later ones)."""

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
        points = np.zeros(n, dtype=np.int64)  # every element's number of points (for the sums' capacity)
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
            points[:] = base_table.points
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
            points[ops] = np.diff(batches[-1].offsets)
        if len(elements) == n:
            groups = tree.memo("height_groups", lambda: _height_groups(tree, np.flatnonzero(~tree.is_op)))
        else:
            groups = _height_groups(tree, elements[~tree.is_op[elements]])
        derived = self.derived_statics() if len(elements) == n else None
        for height, (level, counts, kids, slot, parent_of) in enumerate(groups):
            placement = None if derived is None else derived.get(("placement", height))
            if placement is None:
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
                if derived is not None:
                    derived[("placement", height)] = (scale, shift, right)
            else:
                scale, shift, right = placement
            if self.settings.enable_improved_fair_share_by_fit_factor_computation:
                fsbff = _improved_sums(
                    fn.FunctionTable(batches, batch_of, row_of), len(level), kids, slot, scale, shift, right
                )
            else:
                fsbff = fn.sum_children(
                    fn.FunctionTable(batches, batch_of, row_of, points), kids, slot, scale, shift, right
                )
            batches.append(fn.fair_share_by_suggestion(fsbff, guarantee[level], limits[level]))
            batch_of[level] = len(batches) - 1
            row_of[level] = np.arange(len(level))
            points[level] = np.diff(batches[-1].offsets)
        table = fn.FunctionTable(batches, batch_of, row_of, points)
        if self._base_functions is None and len(elements) == n:
            self._base_functions = (table, guarantee.copy(), limits.copy())
        return table


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
