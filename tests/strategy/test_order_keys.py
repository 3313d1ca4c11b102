"""Order keys of published elements (`pooltree/strategy/order.py`): a full numbering and the keys `place` gives
operations added to a pool's block increase along the tree order, whatever the room between the keys."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from pooltree.strategy import order
from pooltree.strategy.elements import _Element
from pooltree.strategy.snapshot import ROOT_ID, ElementSpec, SchedulingTree


def _element(element_id: str, parent: _Element | None, kind: str = "operation") -> _Element:
    spec = ElementSpec(id=element_id, parent=None if parent is None else parent.id, kind=kind)
    tree = SchedulingTree(np.ones(5), [])
    element = _Element(spec, 0, tree.effective[ROOT_ID])
    element.parent = parent
    return element


def _walk(root: _Element) -> list[_Element]:
    """The tree order of `SchedulingTree` over ``children`` kept in that order (as `publish` keeps them)."""
    out: list[_Element] = []
    stack = [root]
    while stack:
        element = stack.pop()
        out.append(element)
        stack.extend(reversed(element.children))
    return out


def _increasing(elements: list[_Element]) -> bool:
    return all(a.index < b.index for a, b in itertools.pairwise(elements))


@pytest.mark.parametrize("gap", [1, 2, 3, 1 << 32])
@pytest.mark.parametrize("seed", range(5))
def test_placed_keys_follow_the_tree_order(monkeypatch, gap, seed):
    monkeypatch.setattr(order, "GAP", gap)
    rng = random.Random(seed)
    root = _element(ROOT_ID, None, "pool")
    pools = [root]
    for name in ("a", "b", "a1", "a2", "b1"):
        parent = root if len(name) == 1 else next(pool for pool in pools if pool.id == name[0])
        pool = _element(name, parent, "pool")
        parent.children.append(pool)  # pools first in tree order are the last children: order kept as built
        pools.append(pool)
    for pool in pools:
        pool.children.reverse()
    counter = itertools.count()
    for pool in pools:  # operations come right after their pool, before its child pools
        pool.children[:0] = [_element(f"op{next(counter)}", pool) for _ in range(rng.randint(0, 3))]
    bounds = order.number(_walk(root))
    assert _increasing(_walk(root))
    renumbered = 0
    for _ in range(60):
        pool = rng.choice(pools)
        block = [child for child in pool.children if child.is_op]
        added: set[_Element] = set()
        for _ in range(rng.randint(0, 3)):
            if block and rng.random() < 0.4:
                pool.children.remove(block.pop(rng.randrange(len(block))))
            else:
                new = _element(f"op{next(counter)}", pool)
                at = 0 if rng.random() < 0.8 else len(block)  # arrivals go first (newest first in the order)
                block.insert(at, new)
                pool.children.insert(at, new)
                added.add(new)
        kept = {child: child.index for child in block if child not in added}
        moved = order.place(pool, added, bounds[pool])
        if moved is None:
            bounds = order.number(_walk(root))
            renumbered += 1
        else:
            assert {child for child in kept if child.index != kept[child]} <= set(moved)
        assert _increasing(_walk(root))
    if gap == 1 << 32:
        assert renumbered == 0


def test_an_operation_before_a_pool_is_not_placed():
    root = _element(ROOT_ID, None, "pool")
    pool = _element("a", root, "pool")
    op = _element("x", root)
    root.children[:] = [pool, op]  # in tree order: the pool's subtree first, then the operation
    bounds = order.number(_walk(root))
    new = _element("y", root)
    root.children.insert(0, new)
    assert order.place(root, {new}, bounds[root]) is None
