"""The flattened element tree (structure of arrays) and the numeric helpers every update step uses.

The element tree is flattened once in breadth-first order, so the children of every pool are contiguous
and every depth level is a contiguous range: per-element rules then run as numpy operations over whole
levels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Any

import numpy as np

from pooltree.errors import ConfigError
from pooltree.fairshare.inputs import _path
from pooltree.fairshare.model import Element, Operation, Pool

EPSILON = 1e-9  # "nearly dominates" inside the update (newest vector_hdrf Epsilon)


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
    pools: list[Pool] = field(default_factory=list)  # every pool in breadth-first order
    pool_child_counts: list[int] = field(default_factory=list)  # their numbers of children
    _memo: dict[Any, Any] = field(default_factory=dict)
    guarantees: Any = None  # the last update's reusable guarantees (``reuse._StaticGuarantees``)
    inputs: Any = None  # the last update's read (``inputs._KeptInputs``, kept by ``reuse.keep_read``)
    functions: Any = (
        None  # the last update's full build of functions and its inputs (``reuse._KeptFunctions``)
    )
    previous: _Tree | None = None  # the root's previous tree, until the first build of this one has used it
    # with ``previous`` when patched from it: each row's row there (-1: new)
    rows_from: np.ndarray | None = None

    def memo(self, key: Any, build: Callable[[], Any]) -> Any:
        """What ``build`` derives from the structure alone, computed once per tree (the tree is reused by later
        updates of the same structure, see ``reuse.flatten``). Callers never write into what it returns."""
        value = self._memo.get(key)
        if value is None:
            value = build()
            self._memo[key] = value
        return value

    def id_index(self) -> dict[str, int]:
        """Each element's id -> its row (memoised as ``"index"``; ``_patched`` hands a patched tree its own)."""
        return self.memo("index", lambda: dict(zip(self.ids, range(len(self.ids)), strict=True)))

    def row_of(self, element: Any) -> int | None:
        """The row holding this very ``element`` (found by its id), or None when it is not one of the tree's."""
        try:
            row = self.id_index().get(element.id)
        except TypeError:  # an unhashable id: not this tree's
            return None
        return row if row is not None and self.elements[row] is element else None

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


def _patched(
    old: _Tree,
    blocks: _Blocks,
    changed: list[int],
    child_lists: list[Any],
    renewed: frozenset[str],
    counts: list[int],
) -> _Tree | None:
    """``old`` with the ``changed`` pools (places in ``old.pools``, ascending) re-laid, when only operations arrived,
    left or moved (every pool the same object in the same place; each changed pool's child pools the same, in the
    same order): ``blocks.elements`` (the root, then the pools' children lists in ``old``'s pool order) is then the
    new breadth-first order, and the arrays are ``old``'s shifted with numpy. The result is row for row what
    ``_flatten_new`` gives (``tests/fairshare/test_layout_patch.py``). None for anything else (a pool added, removed
    or moved, an element twice, a duplicate or changed id, a child of another type): the caller then flattens anew,
    which raises the errors.

    Cost: a few numpy passes over the rows and Python work only for the changed pools' children.
    """
    moves = _relaid(old, blocks, changed, child_lists, renewed)
    if moves is None:
        return None
    leaving, ids = moves
    tree = _patched_tree(old, blocks, blocks.elements, ids, counts)
    tree._memo["index"] = _patched_index(old, leaving, blocks.rows_from, ids)
    return tree


class _Blocks:
    """Where each pool's block of children starts before and after, and each new row's row before when its pool
    kept its number of children (``rows_from``; rows of changed pools are set by `_relaid`)."""

    def __init__(self, old: _Tree, counts: list[int], elements: list[Any]) -> None:
        n = len(elements)
        count = len(old.pools)
        self.old_counts = old.memo("pool_counts", lambda: np.array(old.pool_child_counts, dtype=np.int64))
        self.old_pool_rows = old.memo("pool_idx", lambda: np.flatnonzero(~old.is_op))
        self.new_counts = np.array(counts, dtype=np.int64)
        self.new_starts = np.empty(count, dtype=np.int64)
        self.new_starts[0] = 1
        np.cumsum(self.new_counts[:-1], out=self.new_starts[1:])
        self.new_starts[1:] += 1
        self.old_starts = old.child_start[self.old_pool_rows]
        self.elements = elements
        self.old = old
        # Each child's pool (by its place in ``pools``) and its row in that pool's block before.
        self.owner = np.repeat(np.arange(count, dtype=np.int64), self.new_counts)
        self.rows_from = np.empty(n, dtype=np.int64)
        self.rows_from[0] = 0
        self.rows_from[1:] = self.old_starts[self.owner] + (
            np.arange(1, n, dtype=np.int64) - self.new_starts[self.owner]
        )


def _relaid(
    old: _Tree, blocks: _Blocks, changed: list[int], child_lists: list[Any], renewed: frozenset[str]
) -> tuple[list[int], list[str]] | None:
    """The changed pools' blocks re-laid: ``blocks.rows_from`` set for their children (an operation not
    ``renewed`` that was in a changed pool's block before: its row there, found by its id; -1: arrived), and (the
    rows before of the elements of their old blocks that left, the new ids); None when a pool arrived, left or
    moved, some element's id changed, or an id is a duplicate or was in a pool not named."""
    old_elements = old.elements
    old_ids = old.ids
    old_starts = blocks.old_starts
    old_counts = blocks.old_counts
    rows_from = blocks.rows_from
    index = old.id_index()
    in_changed = np.zeros(len(old_ids), dtype=bool)  # the rows of the changed pools' old blocks
    for c in changed:
        in_changed[int(old_starts[c]) : int(old_starts[c] + old_counts[c])] = True
    taken: set[int] = set()  # old rows taken by a child of a changed pool
    arrived: set[str] = set()  # ids of the children that arrived
    expected: list[str] = []  # the ids the elements must have: the unchanged pools' as before
    done = 0
    for c in changed:
        start = int(blocks.new_starts[c])
        block = child_lists[c]
        old_start = int(old_starts[c])
        old_end = old_start + int(old_counts[c])
        if [e for e in block if not isinstance(e, Operation)] != [
            e for e in old_elements[old_start:old_end] if not isinstance(e, Operation)
        ]:
            return None  # a pool arrived, left or moved (or a child of another type): flattened anew
        expected += old_ids[done:old_start]
        done = old_end
        for k, e in enumerate(block, start):
            op_id = e.id
            row = None if op_id in renewed else index.get(op_id)
            if row is None:
                if op_id in arrived:
                    return None  # a duplicate id: flattened anew, which names it
                arrived.add(op_id)
                rows_from[k] = -1
            elif not in_changed[row] or row in taken:
                return None  # an id of a pool not named, or twice: flattened anew
            else:
                taken.add(row)
                rows_from[k] = row
            expected.append(op_id)
    expected += old_ids[done:]
    ids = [e.id for e in blocks.elements]
    if ids != expected:
        return None  # some element's id changed
    leaving = [row for row in np.flatnonzero(in_changed).tolist() if row not in taken]
    for op_id in arrived:
        row = index.get(op_id)
        if row is not None and not (in_changed[row] and row not in taken):
            return None  # a duplicate of an element still there: flattened anew, which names it
    return leaving, ids


def _patched_tree(
    old: _Tree, blocks: _Blocks, elements: list[Any], ids: list[str], counts: list[int]
) -> _Tree:
    """The arrays of the patched tree from ``blocks.rows_from`` (each row's row before, -1: new)."""
    n = len(elements)
    rows_from = blocks.rows_from
    old_pool_rows = blocks.old_pool_rows
    new_counts = blocks.new_counts
    mapped = np.flatnonzero(rows_from >= 0)
    rows_to = np.full(len(old.elements), -1, dtype=np.int64)
    rows_to[rows_from[mapped]] = mapped
    pool_rows = rows_to[old_pool_rows]
    child_count = np.zeros(n, dtype=np.int64)
    child_count[pool_rows] = new_counts
    starts = np.concatenate([[1], 1 + np.cumsum(child_count)[:-1]]).astype(np.int64)
    parent = np.concatenate([[-1], np.repeat(pool_rows, new_counts)])
    pool_depth = old.depth[old_pool_rows]
    depth = np.concatenate([[0], pool_depth[blocks.owner] + 1]).astype(np.int64)
    level_start = np.searchsorted(depth, np.arange(int(pool_depth.max()) + 2)).astype(np.int64)
    if n > level_start[-1]:
        level_start = np.append(level_start, n)
    is_op = np.ones(n, dtype=bool)
    is_op[pool_rows] = False
    tree = _Tree(
        elements=elements,
        ids=ids,
        parent=parent,
        depth=depth,
        child_start=starts,
        child_count=child_count,
        is_op=is_op,
        level_start=level_start,
        pools=list(old.pools),
        pool_child_counts=counts,
    )
    tree.rows_from = rows_from
    memo = tree._memo
    memo["pool_idx"] = pool_rows
    memo["pool_counts"] = new_counts
    height = old._memo.get("height")
    if height is not None:  # a pool's height does not depend on its operations
        new_height = np.zeros(n, dtype=height.dtype)
        new_height[pool_rows] = height[old_pool_rows]
        memo["height"] = new_height
    return tree


def _patched_index(old: _Tree, leaving: list[int], rows_from: np.ndarray, ids: list[str]) -> dict[str, int]:
    """The id -> row index (``results``): the previous one copied, with the ids that left dropped and the rows
    that moved or arrived written (a copy and few writes cost a fraction of a new dict over cold ids). Its keys
    are then not in row order; nothing iterates it (``ElementResults`` iterates ``ids``)."""
    new_index = old.id_index().copy()
    old_ids = old.ids
    for row in leaving:
        del new_index[old_ids[row]]
    moved = np.flatnonzero(rows_from != np.arange(len(ids), dtype=np.int64)).tolist()
    new_index.update(zip(map(ids.__getitem__, moved), moved, strict=True))
    return new_index


def _flatten_new(root: Pool) -> _Tree:
    """Breadth-first order, built level by level: the children of a whole level are appended as one block.

    Per-level work runs in C (``chain``, ``map``) and builds no per-pool tuples: tuples are tracked by the
    garbage collector, and a collection started here walks the whole young element list.
    """
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
        pools=[elements[i] for i in pool_index],  # type: ignore[misc]
        pool_child_counts=pool_count,
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


def _child_ranges(tree: _Tree, pools: np.ndarray) -> np.ndarray:
    """Children of ``pools``, pool by pool (each pool's children are one contiguous block)."""
    counts = tree.child_count[pools]
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    block = np.zeros(len(pools) + 1, dtype=np.int64)
    np.cumsum(counts, out=block[1:])
    return np.repeat(tree.child_start[pools] - block[:-1], counts) + np.arange(total)


def _block(level: _Level) -> slice:
    """The rows of a level's children as a slice (``_Level.children`` is always one contiguous, non-empty range):
    reading ``values[_block(level)]`` is a view, and ``np.take`` of (n, 5) rows is ~5x cheaper than fancy
    indexing; the values read are the same."""
    children = level.children
    return slice(int(children[0]), int(children[-1]) + 1)


def _sum_children_into(tree: _Tree, values: np.ndarray, *, own: bool = False) -> None:
    """Bottom-up, in place: values[p] = Σ values[children of p] (``own``: values[p] += that sum, subtree totals)."""
    for level in tree.parent_levels(bottom_up=True):
        sums = np.add.reduceat(values[_block(level)], level.seg, axis=0)
        if own:
            values[level.parents] += sums
        else:
            values[level.parents] = sums
