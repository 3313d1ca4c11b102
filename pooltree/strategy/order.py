"""Order keys of the published elements: ``_Element.index`` increases along the tree order (`SchedulingTree.order`)
without being the element's position in it, so a period in which operations arrive or leave numbers only them.

Every tie the strategy breaks by tree order compares ``index`` values (heap entries, the preemptive best leaf,
visits and priority lists sorted by it, pools bottom-up by ``-index``), so any numbering that increases along the
order breaks them the same way as positions do.

A full numbering (`number`) gives the k-th element of the order the key ``k * GAP``. An operation's element sits
in the tree order right after its pool when the pool's children list holds its pools first and its operations
after them (the layout every built tree has): the pool's operations, last child first, make the *block* right
after the pool, and the block ends before the element that followed it at the last full numbering (its
*bound*; pools never move without a full numbering, since a pool change makes a new structure). `place` gives the
operations added to such a pool keys between their neighbours in the block; where two neighbours leave no room,
the whole block is numbered anew inside (pool, bound), and only when the block itself is full (never in practice:
``GAP`` per element) is everything numbered again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pooltree.strategy.elements import _Element

GAP = 1 << 32
"""Distance between consecutive keys of a full numbering."""


def number(ordered: Iterable[_Element]) -> dict[_Element, int]:
    """Number ``ordered`` (every element, in tree order): the k-th (from 1) gets ``k * GAP``. Returns each pool's
    bound: the key of the first element after the pool that is not one of its operations in the block right
    after it (one ``GAP`` past the last key for a pool whose block ends the order)."""
    bounds: dict[_Element, int] = {}
    key = 0
    pool: _Element | None = None  # the pool whose block is being walked
    for element in ordered:
        key += GAP
        element.index = key
        if pool is not None:
            if element.is_op and element.parent is pool:
                continue
            bounds[pool] = key
        pool = None if element.is_op else element
    if pool is not None:
        bounds[pool] = key + GAP
    return bounds


def place(pool: _Element, added: set[_Element], bound: int) -> list[_Element] | None:
    """Keys for the ``added`` operations among ``pool.children`` (in tree order, as `publish` keeps them): each
    between the keys of its neighbours in the pool's block. Returns the operations of the block whose existing
    key moved (the block numbered anew: their entries in ``pool.heap`` carry the old key), ``None`` when the
    block does not follow the layout (an operation after a pool, a kept key out of order) or has no room: the
    caller numbers every element (`number`)."""
    children = pool.children
    block: list[_Element] = []
    for child in children:
        if not child.is_op:
            break
        block.append(child)
    if len(block) < len(children) and any(child.is_op for child in children[len(block) :]):
        return None  # an operation after a pool: not the layout the block keys assume
    low = pool.index
    previous = low
    run: list[_Element] = []
    ok = True
    for child in block:
        if child in added:
            run.append(child)
            continue
        key = child.index
        if not previous < key < bound or not _spread(run, previous, key):
            ok = False
            break
        run = []
        previous = key
    if ok and _spread(run, previous, bound):
        return []
    if bound - low <= len(block):
        return None
    kept = [child for child in block if child not in added]
    _spread(block, low, bound)
    return kept


def _spread(run: Sequence[_Element], low: int, high: int) -> bool:
    """Keys strictly between ``low`` and ``high`` for ``run``, evenly spaced; False (nothing set) without room."""
    count = len(run)
    if not count:
        return True
    span = high - low
    if span <= count:
        return False
    parts = count + 1
    for k, element in enumerate(run, 1):
        element.index = low + span * k // parts
    return True
