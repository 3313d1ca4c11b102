"""Priority tier of strong-guarantee shrinking and its validation (yt-semantics b.2 step 1, b.4)."""

from __future__ import annotations

import numpy as np

from pooltree.fairshare import Operation, Pool, UpdateSettings, update_fair_share
from pooltree.resources import vector

TOTAL = vector(user_slots=1000, cpu=100, memory=1000)


def _guaranteed(name: str, cpu: float, *, priority: bool = False) -> Pool:
    return Pool(
        name,
        strong_guarantee_resources=vector(cpu=cpu),
        specified_guarantee_resources=frozenset({"cpu"}),
        enable_priority_strong_guarantee_adjustment=priority,
        children=[Operation(f"{name}-op", demand=vector(user_slots=100, cpu=100, memory=100))],
    )


def _tree(children: list[Pool], *, donor: bool = True, parent_cpu: float = 100.0) -> Pool:
    parent = Pool(
        "donor",
        strong_guarantee_resources=vector(cpu=parent_cpu),
        specified_guarantee_resources=frozenset({"cpu"}),
        enable_priority_strong_guarantee_adjustment_donorship=donor,
        children=list(children),
    )
    return Pool("<Root>", children=[parent])


def _cpu_guarantees(root: Pool, *names: str) -> tuple[list[float], list[int]]:
    result = update_fair_share(root, TOTAL, UpdateSettings(), 0.0)
    return [float(result.elements[n].strong_guarantee_share[1]) for n in names], [
        e.code for e in result.errors
    ]


def test_without_priority_pools_guarantees_shrink_proportionally() -> None:
    # 60 + 60 CPU into 100: factor 100/120 for both.
    shares, errors = _cpu_guarantees(_tree([_guaranteed("a", 60), _guaranteed("b", 60)]), "a", "b")
    np.testing.assert_allclose(shares, [0.5, 0.5], atol=1e-12)
    assert errors == []


def test_priority_pool_keeps_its_guarantee_and_the_regular_tier_takes_the_rest() -> None:
    # Tier 0: a keeps 60; tier 1: b (60) and c (20) scaled into the remaining 40 -> factor 0.5.
    root = _tree([_guaranteed("a", 60, priority=True), _guaranteed("b", 60), _guaranteed("c", 20)])
    shares, errors = _cpu_guarantees(root, "a", "b", "c")
    np.testing.assert_allclose(shares, [0.6, 0.3, 0.1], atol=1e-12)
    assert errors == []


def test_overflowing_priority_tier_is_scaled_and_regular_tier_zeroed() -> None:
    # Tier 0: 80 + 40 = 120 > 100 -> factor 5/6; tier 1 gets nothing.
    root = _tree(
        [_guaranteed("a", 80, priority=True), _guaranteed("b", 40, priority=True), _guaranteed("c", 20)]
    )
    shares, _ = _cpu_guarantees(root, "a", "b", "c")
    np.testing.assert_allclose(shares, [80 / 120, 40 / 120, 0.0], atol=1e-9)


def test_priority_pool_without_donor_ancestor_is_an_alert_and_counts_as_regular() -> None:
    root = _tree([_guaranteed("a", 60, priority=True), _guaranteed("b", 60)], donor=False)
    result = update_fair_share(root, TOTAL, UpdateSettings(), 0.0)
    (error,) = [e for e in result.errors if e.code == 29002]
    assert error.attributes == {"pools_without_donor": ["a"]}
    np.testing.assert_allclose(
        [result.elements[n].strong_guarantee_share[1] for n in ("a", "b")], [0.5, 0.5], atol=1e-12
    )
    # The donor itself being flagged does not make it its own donor.
    selfish = _tree([_guaranteed("a", 10)], donor=True)
    selfish.children[0].enable_priority_strong_guarantee_adjustment = True  # type: ignore[attr-defined]
    codes = [e.code for e in update_fair_share(selfish, TOTAL, UpdateSettings(), 0.0).errors]
    assert codes == [29002]
