"""Issue 2 bug report: pools without operations (after the last one unregistered) and zero total resources."""

from __future__ import annotations

import numpy as np
import pytest

from pooltree.fairshare import (
    NORMAL,
    IntegralGuarantees,
    Operation,
    Pool,
    UpdateSettings,
    UpdateState,
    update_fair_share,
)
from pooltree.resources import vector


def _tree(with_operation: bool) -> Pool:
    leaf = Pool(
        "leaf",
        mode="fifo",
        children=[Operation("op", demand=vector(user_slots=1, cpu=1))] if with_operation else [],
    )
    burst = Pool(
        "burst",
        integral_guarantees=IntegralGuarantees(
            "burst", burst_guarantee_resources=vector(cpu=2), resource_flow=vector(cpu=1)
        ),
        children=[Pool("deep", children=[Pool("deepest")])],
    )
    guaranteed = Pool(
        "guaranteed",
        strong_guarantee_resources=vector(cpu=3),
        specified_guarantee_resources=frozenset({"cpu"}),
        compute_promised_guarantee_fair_share=True,
        children=[leaf],
    )
    return Pool("<Root>", children=[guaranteed, burst, Pool("empty")])


@pytest.mark.parametrize("total", [np.zeros(5), vector(user_slots=10, cpu=10, memory=100)])
def test_pools_without_operations_after_the_last_one_left(total: np.ndarray) -> None:
    settings = UpdateSettings(
        infer_weight_from_guarantees_share_multiplier=2.0, fifo_pool_scheduling_order="fifo"
    )
    first = update_fair_share(_tree(True), total, settings, 10.0, UpdateState())
    second = update_fair_share(_tree(False), total, settings, 20.0, first.state)
    assert set(second.elements) == {"<Root>", "guaranteed", "leaf", "burst", "deep", "deepest", "empty"}
    for eid in second.elements:
        r = second.elements[eid]
        assert np.all(r.fair_share == 0.0), eid
        assert np.all(r.demand_share == 0.0) and np.all(r.usage_share == 0.0), eid
        assert r.scheduling_status == NORMAL
        assert np.all(np.isfinite(r.estimated_guarantee_share)), eid
    assert second.elements["deepest"].parent == "deep"
    assert second.state.previous_update_time == 20.0


def test_root_alone_with_zero_totals() -> None:
    result = update_fair_share(Pool("<Root>"), np.zeros(5), UpdateSettings(), 0.0)
    assert list(result.elements) == ["<Root>"]
    assert np.all(result.elements["<Root>"].fair_share == 0.0) and result.errors == []
