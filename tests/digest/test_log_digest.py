"""LogDigest against the YTsaurus rule (memory-digest.md §1.1–1.3) and a sorted-list oracle."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.digest import HistogramDigest, LogDigest
from pooltree.errors import ConfigError, PooltreeError


def upper_edge(value: float, lower: float = 0.05, precision: float = 0.01) -> float:
    """Upper edge of the bucket a value in range falls into, built the YTsaurus way (repeated ×step)."""
    index = int(math.log(value / lower) / math.log(1 + precision))
    edge = lower
    for _ in range(index + 1):
        edge *= 1 + precision
    return edge


def test_bucket_count_for_user_job_settings() -> None:
    assert LogDigest(0.05, 1.0, 0.01, 0.5).bucket_count == 302
    assert LogDigest(0.5, 2.0, 0.01, 1.0).bucket_count == math.ceil(math.log(4) / math.log(1.01))
    assert LogDigest(1.0, 1.0).bucket_count == 1


def test_empty_digest_returns_default_then_lower_bound_default() -> None:
    assert LogDigest(0.05, 1.0, 0.01, 0.5).get_quantile(0.95) == 0.5
    assert LogDigest(0.05, 1.0).get_quantile(0.95) == 0.05
    assert LogDigest(0.05, 1.0, 0.01, 0.5).sample_count == 0


@pytest.mark.parametrize("n", [1, 2, 5, 10, 19])
def test_small_n_p95_is_edge_above_the_max(n: int) -> None:
    digest = LogDigest(0.05, 1.0, 0.01, 0.5)
    values = [0.1 + 0.03 * i for i in range(n)]
    for v in values:
        digest.add_sample(v)
    assert digest.get_quantile(0.95) == upper_edge(max(values))
    assert digest.get_quantile(0.95) > max(values)


def test_n_20_p95_is_second_largest_bucket_edge() -> None:
    digest = LogDigest(0.05, 1.0, 0.01, 0.5)
    values = [0.1 + 0.03 * i for i in range(20)]
    for v in values:
        digest.add_sample(v)
    assert digest.get_quantile(0.95) == upper_edge(sorted(values)[-2])


def test_clamping_below_lower_and_at_upper() -> None:
    digest = LogDigest(0.05, 1.0, 0.01, 0.5)
    digest.add_sample(0.001)
    assert digest.buckets[0] == 1
    assert digest.get_quantile(0.95) == pytest.approx(0.05 * 1.01, rel=1e-12)
    digest.add_sample(5.0)
    digest.add_sample(1.0)
    assert digest.buckets[-1] == 2
    assert digest.get_quantile(0.95) == 1.0  # last bucket answers U, clamped down
    assert digest.get_quantile(0.0) == 0.05  # quantile 0 is L whenever there are samples


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, -math.inf, 1e308])
def test_invalid_samples_are_dropped(bad: float) -> None:
    digest = LogDigest(0.05, 1.0, 0.01, 0.5)
    digest.add_sample(bad)
    assert digest.sample_count == 0
    assert digest.get_quantile(0.5) == 0.5


def test_truncation_then_clamp_matches_linear_walk() -> None:
    digest = LogDigest(0.05, 1.0, 0.01, 0.5)
    for i in range(1, 400):
        digest.add_sample(i / 300)
    for q in (0.0, 0.01, 0.5, 0.9, 0.95, 0.99, 1.0):
        assert digest.get_quantile(q) == digest.get_quantile_linear(q)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"lower_bound": 0.0, "upper_bound": 1.0}, "lower_bound"),
        ({"lower_bound": 0.1, "upper_bound": -1.0}, "upper_bound"),
        ({"lower_bound": 0.5, "upper_bound": 0.1}, "upper_bound"),
        ({"lower_bound": 0.05, "upper_bound": 1.0, "default_value": 1.5}, "default_value"),
        ({"lower_bound": 0.05, "upper_bound": 1.0, "default_value": 0.01}, "default_value"),
        ({"lower_bound": 0.05, "upper_bound": 1.0, "relative_precision": 0.0}, "relative_precision"),
        ({"lower_bound": 1e-6, "upper_bound": 1.0, "relative_precision": 0.01}, ""),
    ],
)
def test_config_validation(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        LogDigest(**kwargs)
    assert info.value.path == field
    if not field:
        assert "1000" in info.value.reason


def test_quantile_argument_checked() -> None:
    with pytest.raises(ConfigError, match="quantile"):
        LogDigest(0.05, 1.0).get_quantile(1.5)


def test_reset_merge_and_state_round_trip() -> None:
    a = LogDigest(0.05, 1.0, 0.01, 0.5)
    b = LogDigest(0.05, 1.0, 0.01, 0.5)
    for v in (0.1, 0.2, 0.3):
        a.add_sample(v)
    for v in (0.6, 0.7):
        b.add_sample(v)
    a.merge(b)
    assert a.sample_count == 5
    assert a.get_quantile(0.95) == upper_edge(0.7)
    restored = LogDigest.from_state(a.to_state())
    assert restored.buckets == a.buckets
    assert restored.get_quantile(0.5) == a.get_quantile(0.5)
    restored.add_sample(0.9)
    assert restored.get_quantile(1.0) == upper_edge(0.9)
    with pytest.raises(PooltreeError):
        a.merge(LogDigest(0.5, 2.0, 0.01, 1.0))
    a.reset()
    assert a.sample_count == 0 and a.get_quantile(0.95) == 0.5


def test_from_state_rejects_corrupt_counts() -> None:
    state = LogDigest(0.05, 1.0).to_state()
    state["buckets"] = state["buckets"][:-1]
    with pytest.raises(ConfigError, match="302 counters"):
        LogDigest.from_state(state, path="digest")
    state = LogDigest(0.05, 1.0).to_state()
    state["sample_count"] = 3
    with pytest.raises(ConfigError) as info:
        LogDigest.from_state(state)
    assert info.value.path == "sample_count"


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(st.floats(min_value=1e-4, max_value=3.0, allow_nan=False), min_size=1, max_size=300),
    q=st.floats(min_value=0.0, max_value=1.0),
)
def test_quantile_against_sorted_list_oracle(values: list[float], q: float) -> None:
    lower, upper = 0.05, 1.0
    digest = LogDigest(lower, upper, 0.01, 0.5)
    for v in values:
        digest.add_sample(v)
    answer = digest.get_quantile(q)
    assert answer == digest.get_quantile_linear(q)
    assert lower <= answer <= upper
    ordered = sorted(values)
    rank = math.ceil(q * len(values))
    if rank == 0:
        assert answer == lower
        return
    exact = ordered[rank - 1]  # nearest-rank quantile
    if exact >= upper:
        assert answer == upper  # clamped down to U
    elif exact < lower:
        assert answer == pytest.approx(lower * 1.01, rel=1e-12)
    else:
        assert answer >= exact  # never below: the upper edge of the sample's bucket
        assert answer <= exact * 1.01 * (1 + 1e-12)  # at most one bucket above


@settings(max_examples=80, deadline=None)
@given(values=st.lists(st.floats(min_value=-1.0, max_value=3.0, allow_nan=False), max_size=200))
def test_histogram_digest_against_oracle(values: list[float]) -> None:
    digest = HistogramDigest(0.0, 2.0, 0.001)
    for v in values:
        digest.add_sample(v)
    if not values:
        assert digest.get_quantile(0.5) == 0.0
        return
    clamped = sorted(min(max(v, 0.0), 2.0) for v in values)
    for q in (0.1, 0.5, 0.95):
        exact = clamped[max(math.ceil(q * len(values)), 1) - 1]
        assert abs(digest.get_quantile(q) - exact) <= 0.0005 + 1e-9


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=70),
    threshold=st.floats(min_value=0.0, max_value=400.0, allow_nan=False),
)
def test_shared_bucket_counts_prefix_matches_linear_walk(counts: list[int], threshold: float) -> None:
    from pooltree.digest import _BucketCounts

    tree = _BucketCounts(len(counts))
    for bucket, count in enumerate(counts):
        for _ in range(count):
            tree.add(bucket)
    assert tree.total == sum(counts) and tree.counts == counts
    prefix, running = 0, 0
    while prefix < len(counts) and running + counts[prefix] < threshold:
        running += counts[prefix]
        prefix += 1
    assert tree.prefix_below(threshold) == prefix
    tree.load(list(reversed(counts)))
    assert tree.counts == list(reversed(counts)) and tree.total == sum(counts)
