"""A pool's ``infer_children_weights_from_historic_usage`` (issue 30): children's weights × 2^−(their adjusted
exponential moving average of dominant usage share), half-life ``historic_usage_aggregation_period`` (10 s)."""

from __future__ import annotations

import numpy as np
import pytest

from pooltree.config import parse_pool_trees
from pooltree.config.support import feature_unsupported_options, unsupported_options
from pooltree.fairshare import Operation, Pool, UpdateSettings, update_fair_share
from pooltree.fairshare import functions as fn
from pooltree.fairshare.historic_usage import DEFAULT_HALFLIFE, HistoricUsage, historic_usage_halflife
from pooltree.resources import vector

TOTAL = vector(user_slots=10, cpu=10, memory=100.0)


@pytest.fixture(params=["compiled", "numpy"])
def kernels(request: pytest.FixtureRequest):
    with fn.use_compiled_kernels(request.param == "compiled"):
        yield request.param


def test_average_is_yt_adjusted_ema() -> None:
    """Σ 2^−(tₙ−tᵢ)/h vᵢ / Σ 2^−(tₙ−tᵢ)/h; the first sample is the average; an older sample is ignored; a new
    half-life starts again; a zero half-life keeps the last sample only."""
    samples = [(0.0, 1.0), (10.0, 0.0), (25.0, 0.5), (26.0, 0.25)]
    usage = HistoricUsage(10.0)
    for t, v in samples:
        usage = usage.sampled(t, v, 10.0)
    weights = [2.0 ** (-(26.0 - t) / 10.0) for t, _ in samples]
    expected = sum(w * v for w, (_, v) in zip(weights, samples, strict=True)) / sum(weights)
    assert usage.average == pytest.approx(expected, rel=1e-12)
    assert usage.sampled(20.0, 1.0, 10.0) == usage
    assert usage.sampled(30.0, 0.75, 5.0).average == 0.75
    assert HistoricUsage(0.0).sampled(1.0, 0.3, 0.0).sampled(2.0, 0.9, 0.0).average == 0.9


def _tree(
    infer: bool, busy_usage: float, halflife: float | None = 10.0, busy_weight: float | None = None
) -> Pool:
    demand = vector(user_slots=10, cpu=10, memory=10.0)
    busy = Operation("busy", usage=vector(user_slots=busy_usage, cpu=busy_usage), demand=demand)
    new = Operation("new", demand=demand)
    parent = Pool(
        "parent",
        children=[
            Pool("child1", weight=busy_weight, children=[busy]),
            Pool("child2", weight=2.0, children=[new]),
        ],
        historic_usage_halflife=halflife if infer else None,
    )
    return Pool("<Root>", children=[parent])


def test_weights_follow_historic_usage(kernels: str) -> None:
    plain = update_fair_share(_tree(False, 10.0), TOTAL, UpdateSettings(), 0.0).elements
    assert plain["child1"].weight == 1.0 and plain["child2"].weight == 2.0
    assert plain["child2"].fair_share[1] == pytest.approx(2.0 / 3.0)
    first = update_fair_share(_tree(True, 10.0), TOTAL, UpdateSettings(), 0.0)
    # child1 used the whole cluster: average 1, weight 1 × 2^-1; child2 used nothing: its weight 2 stays.
    assert first.elements["child1"].weight == pytest.approx(0.5)
    assert first.elements["child2"].weight == pytest.approx(2.0)
    assert first.elements["child2"].fair_share[1] == pytest.approx(0.8)
    assert first.elements["busy"].weight == 1.0  # only the pool's own children
    # One half-life later child1 uses nothing: its average is (0 + 1·½) / (1 + ½) = ⅓.
    second = update_fair_share(_tree(True, 0.0), TOTAL, UpdateSettings(), 10.0, first.state)
    assert second.elements["child1"].weight == pytest.approx(2.0 ** (-1.0 / 3.0))
    # Without the carried state the average starts again from the current sample (0): weight 1.
    fresh = update_fair_share(_tree(True, 0.0), TOTAL, UpdateSettings(), 10.0)
    assert fresh.elements["child1"].weight == 1.0


def test_same_tree_updates_take_new_weights_not_kept_ones(kernels: str) -> None:
    """The update keeps guarantees and weights for the next update of the same tree; historic weights change
    with usage, so a later update of the very same elements must not take the kept ones (bit for bit the same
    as an update of fresh copies)."""
    # Both children's weights set and no usage at first: the first update's weights are the configured ones, so
    # the next update's configuration matches what was kept, while its historic weights do not.
    root = _tree(True, 0.0, busy_weight=1.0)
    busy = root.children[0].children[0].children[0]  # type: ignore[attr-defined]
    state = None
    for step, usage in enumerate([0.0, 10.0, 10.0, 0.0, 0.0, 5.0]):
        busy.usage = vector(user_slots=usage, cpu=usage)
        result = update_fair_share(root, TOTAL, UpdateSettings(), 5.0 * step, state)
        copy = _tree(True, usage, busy_weight=1.0)
        reference = update_fair_share(copy, TOTAL, UpdateSettings(), 5.0 * step, state)
        for name in ("child1", "child2", "busy", "new"):
            assert result.elements[name].weight == reference.elements[name].weight
            np.testing.assert_array_equal(
                result.elements[name].fair_share, reference.elements[name].fair_share
            )
        state = result.state


def test_pool_config_gives_the_halflife() -> None:
    trees = parse_pool_trees(
        {
            "t": {
                "pools": {
                    "a": {"infer_children_weights_from_historic_usage": True},
                    "b": {
                        "infer_children_weights_from_historic_usage": True,
                        "historic_usage_aggregation_period": 60000,
                    },
                    "c": {"historic_usage_aggregation_period": 60000},  # YTsaurus: no effect without the flag
                }
            }
        }
    )
    pools = trees["t"].pools
    assert historic_usage_halflife(pools["a"].config) == DEFAULT_HALFLIFE == 10.0
    assert historic_usage_halflife(pools["b"].config) == 60.0
    assert historic_usage_halflife(pools["c"].config) is None
    assert unsupported_options(trees) == []
    assert "infer_children_weights_from_historic_usage" not in feature_unsupported_options()["pool"]
    assert "historic_usage_aggregation_period" not in feature_unsupported_options()["pool"]
