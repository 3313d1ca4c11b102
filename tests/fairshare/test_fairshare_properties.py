"""Property tests of the fair-share update on random trees up to depth 3 (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.fairshare import Operation, Pool, UpdateSettings, update_fair_share
from pooltree.resources import vector

TOTAL = vector(user_slots=100, cpu=100, gpu=8, memory=1000, network=100)
TOL = 1e-6


@st.composite
def operations(draw, prefix: str) -> Operation:
    per_job = np.array(
        [
            1.0,
            draw(st.sampled_from([1, 2, 4])),
            draw(st.sampled_from([0, 0, 1])),
            draw(st.sampled_from([5, 20, 60])),
            0.0,
        ]
    )
    jobs = draw(st.integers(0, 40))
    running = draw(st.integers(0, jobs))
    return Operation(
        prefix, usage=per_job * running, demand=per_job * jobs, weight=draw(st.sampled_from([None, 1.0, 2.0]))
    )


@st.composite
def pools(draw, prefix: str, depth: int) -> Pool:
    fifo = depth == 0 and draw(st.booleans())
    pool = Pool(
        prefix,
        weight=draw(st.sampled_from([None, 0.5, 1.0, 3.0])),
        mode="fifo" if fifo else "fair_share",
        max_share_ratio=draw(st.sampled_from([1.0, 1.0, 0.5])),
    )
    if draw(st.booleans()):
        pool.strong_guarantee_resources = vector(cpu=draw(st.sampled_from([5.0, 20.0, 40.0])))
        pool.specified_guarantee_resources = frozenset({"cpu"})
    count = draw(st.integers(0, 3))
    for k in range(count):
        name = f"{prefix}.{k}"
        if depth > 0 and not fifo and draw(st.booleans()):
            pool.children.append(draw(pools(name, depth - 1)))
        else:
            pool.children.append(draw(operations(name)))
    return pool


def check_tree(root: Pool) -> dict:
    result = update_fair_share(root, TOTAL, UpdateSettings(), 0.0)
    elements = result.elements
    stack = [root]
    while stack:
        element = stack.pop()
        r = elements[element.id]
        fs = r.fair_share
        assert np.all(np.isfinite(fs)) and np.all(fs >= -1e-12)
        if element.id != "<Root>":
            assert np.all(fs <= r.demand_share + TOL)
            assert np.all(fs <= r.limits_share + TOL)
        if isinstance(element, Pool):
            if element.children:
                total_children = sum(elements[c.id].fair_share for c in element.children)
                assert np.all(total_children <= fs + TOL)
            stack.extend(element.children)
    return elements


@settings(max_examples=40, deadline=None)
@given(pools("<Root>", 3))
def test_random_trees_are_feasible(root):
    check_tree(root)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([0.0, 10.0, 30.0]), st.integers(0, 80)), min_size=1, max_size=4),
    st.integers(0, 3),
)
def test_guarantee_is_met_when_demand_covers_it(specs, seed):
    # Pools demanding a fixed share of every resource; cpu guarantees (others implicit, proportional).
    children = []
    for k, (guarantee, percent) in enumerate(specs):
        pool = Pool(f"p{k}", children=[Operation(f"o{k}", demand=TOTAL * percent / 100.0)])
        if guarantee:
            pool.strong_guarantee_resources = vector(cpu=guarantee)
            pool.specified_guarantee_resources = frozenset({"cpu"})
        children.append(pool)
    elements = check_tree(Pool("<Root>", children=children))
    for k in range(len(specs)):
        r = elements[f"p{k}"]
        need = np.minimum(r.strong_guarantee_share, r.demand_share)
        assert np.all(r.fair_share >= need - TOL)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 5), st.integers(1, 60), st.permutations(list(range(5))), st.integers(0, 60))
def test_equal_siblings_and_sibling_order(count, percent, order, other):
    def build(indices):
        kids = [Pool(f"p{i}", children=[Operation(f"o{i}", demand=TOTAL * percent / 100.0)]) for i in indices]
        kids.append(Pool("other", children=[Operation("x", demand=TOTAL * other / 100.0)]))
        return Pool("<Root>", children=kids)

    first = check_tree(build(list(range(count))))
    shares = [first[f"p{i}"].fair_share for i in range(count)]
    for s in shares[1:]:
        np.testing.assert_allclose(s, shares[0], atol=1e-9)
    permuted = [i for i in order if i < count]
    second = check_tree(build(permuted))
    for i in range(count):
        np.testing.assert_allclose(second[f"p{i}"].fair_share, first[f"p{i}"].fair_share, atol=1e-9)
    np.testing.assert_allclose(second["other"].fair_share, first["other"].fair_share, atol=1e-9)
