"""The opt-in overdraft_cost reserve rule, the cluster prior for cold tasks and the warm-start margin."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.controllers.memory import (
    MemoryDigestSettings,
    TaskMemoryOptions,
    TaskMemoryReserve,
)
from pooltree.controllers.warm_start import MemoryDigestWarmStartStore
from pooltree.digest import LogDigest
from pooltree.errors import ConfigError

GiB = 1024.0**3


def brute_force(digest: LogDigest, cost: float) -> float:
    """Every bucket upper edge and the upper bound, costed literally (the rule's definition)."""
    counts = list(digest.buckets)
    n = sum(counts)
    best_value, best = digest.upper_bound, digest.upper_bound
    edge = digest.lower_bound
    for k in range(digest.bucket_count - 1):
        edge *= digest.step
        if counts[k] == 0:
            continue
        candidate = edge + cost * (sum(counts[k + 1 :]) + 1) / (n + 1)
        if candidate < best:
            best, best_value = candidate, edge
    return best_value


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.floats(min_value=0.01, max_value=1.3), min_size=1, max_size=120),
    cost=st.sampled_from([0.3, 1.0, 2.0, 5.0, 50.0]),
)
def test_predictive_reserve_matches_brute_force(values: list[float], cost: float) -> None:
    digest = LogDigest(0.05, 1.0, 0.01, 0.5)
    for v in values:
        digest.add_sample(v)
    assert digest.predictive_reserve(cost) == pytest.approx(brute_force(digest, cost), rel=1e-12)


def test_predictive_reserve_hand_cases() -> None:
    digest = LogDigest(0.05, 1.0, 0.01, 0.5)
    assert digest.predictive_reserve(2.0) == 0.5  # empty: the default value
    for _ in range(99):
        digest.add_sample(0.3)
    # Above every sample: 0.3's upper edge + 2 × 1/100 = 0.32 < 1.0 (the limit, no overdraft cost).
    assert digest.predictive_reserve(2.0) == pytest.approx(digest.get_quantile(1.0))
    # A huge overdraft cost makes the 1 % chance of beating the maximum too dear: reserve the limit.
    assert digest.predictive_reserve(100.0) == 1.0
    with pytest.raises(ConfigError):
        digest.predictive_reserve(0.0)


def test_tight_task_gets_a_high_quantile_and_wide_task_a_lower_one() -> None:
    rule = MemoryDigestSettings(user_job_reserve_rule="overdraft_cost", user_job_overdraft_cost=2.0)
    tight = TaskMemoryReserve(TaskMemoryOptions.from_spec({"memory_limit": "1Gi"}, rule), rule)
    wide = TaskMemoryReserve(TaskMemoryOptions.from_spec({"memory_limit": "1Gi"}, rule), rule)
    for i in range(100):
        tight.on_job_completed((0.40 + 0.0004 * i) * GiB)
        wide.on_job_completed((0.2 if i < 90 else 0.5 + 0.05 * (i - 90)) * GiB)  # a 10 % tail up to 0.95
    assert tight.user_job_reserve_factor() >= tight.user_job_digest.get_quantile(1.0)  # the maximum
    assert wide.user_job_reserve_factor() == pytest.approx(wide.user_job_digest.get_quantile(0.9))
    assert wide.user_job_reserve_factor() < wide.user_job_digest.get_quantile(0.95)
    assert rule.user_job_reserve_rule == "overdraft_cost"
    with pytest.raises(ConfigError) as info:
        MemoryDigestSettings(user_job_reserve_rule="median")
    assert info.value.path == "user_job_reserve_rule"
    with pytest.raises(ConfigError) as info:
        MemoryDigestSettings.from_mapping({"user_job_overdraft_cost": -1})
    assert info.value.path == "controller_agent.user_job_overdraft_cost"


def test_cold_start_prior_replaces_the_default_until_own_samples_arrive() -> None:
    prior = LogDigest(0.05, 1.0, 0.01, 1.0)
    for _ in range(300):
        prior.add_sample(0.2)
    spec = {"memory_limit": "1Gi", "tmpfs_size": "300Mi"}
    t = TaskMemoryReserve(TaskMemoryOptions.from_spec(spec), cold_start_prior=prior)
    tmpfs = 300 / 1024
    assert t.user_job_reserve_factor() == pytest.approx(tmpfs)  # prior p95 0.202 is below the tmpfs floor
    t = TaskMemoryReserve(TaskMemoryOptions.from_spec({"memory_limit": "1Gi"}), cold_start_prior=prior)
    assert t.user_job_reserve_factor() == pytest.approx(prior.get_quantile(0.95))
    t.on_job_completed(0.6 * GiB)
    assert t.user_job_reserve_factor() == pytest.approx(t.user_job_digest.get_quantile(0.95)) and (
        t.user_job_reserve_factor() > 0.6
    )
    with pytest.raises(ConfigError):
        TaskMemoryReserve(cold_start_prior={"buckets": []})  # type: ignore[arg-type]


def finished(ratio: float, jobs: int = 50) -> TaskMemoryReserve:
    t = TaskMemoryReserve(TaskMemoryOptions.from_spec({"memory_limit": "1Gi"}))
    for _ in range(jobs):
        t.on_job_completed(ratio * GiB)
    return t


def test_cluster_prior_fills_from_remembered_operations() -> None:
    store = MemoryDigestWarmStartStore(max_carried_samples=50, min_prior_samples=120)
    store.remember("alice", "p", "a", finished(0.3))
    assert store.cluster_prior() is None  # 50 samples < 120
    store.remember("bob", "p", "b", finished(0.6))
    store.remember("carol", "p", "c", finished(0.6))
    prior = store.cluster_prior()
    assert prior is not None and prior.sample_count == 150
    assert prior.get_quantile(0.3) == pytest.approx(finished(0.3).user_job_digest.get_quantile(1.0))
    assert prior.get_quantile(0.95) == pytest.approx(finished(0.6).user_job_digest.get_quantile(1.0))
    prior.add_sample(0.9)  # a copy: the store's prior is unchanged
    assert store.cluster_prior().sample_count == 150


def test_carried_scale_moves_warm_start_up() -> None:
    plain = MemoryDigestWarmStartStore()
    scaled = MemoryDigestWarmStartStore(carried_scale=1.1)
    previous = finished(0.4)
    plain.remember("u", "p", "t", previous)
    scaled.remember("u", "p", "t", previous)
    base = TaskMemoryReserve(warm_start=plain.lookup("u", "p", "t")).user_job_reserve_factor()
    up = TaskMemoryReserve(warm_start=scaled.lookup("u", "p", "t")).user_job_reserve_factor()
    assert up / base == pytest.approx(1.01 ** round(math.log(1.1) / math.log(1.01)), rel=1e-9)
    with pytest.raises(ConfigError) as info:
        MemoryDigestWarmStartStore(carried_scale=0.9)
    assert info.value.path == "carried_scale"
    with pytest.raises(ConfigError):
        MemoryDigestWarmStartStore(min_prior_samples=0)


def test_recent_window_follows_rising_usage() -> None:
    plain = MemoryDigestSettings()
    windowed = MemoryDigestSettings(user_job_recent_window=20)
    a = TaskMemoryReserve(TaskMemoryOptions.from_spec({"memory_limit": "1Gi"}, plain), plain)
    b = TaskMemoryReserve(TaskMemoryOptions.from_spec({"memory_limit": "1Gi"}, windowed), windowed)
    for i in range(200):  # usage ramps from 0.2 to 0.8 of the limit
        ratio = 0.2 + 0.6 * i / 199
        a.on_job_completed(ratio * GiB)
        b.on_job_completed(ratio * GiB)
    assert b.recent_user_job_digest is not None and b.recent_user_job_digest.sample_count == 20
    # all 200 samples: p95 is the 190th (≈ 0.77); the last 20: p95 is their 19th (≈ 0.797)
    assert a.user_job_reserve_factor() < 0.78 < b.user_job_reserve_factor()
    assert b.user_job_reserve_factor() == b.recent_user_job_digest.get_quantile(0.95)
    assert b.user_job_digest.sample_count == 200
    with pytest.raises(ConfigError) as info:
        MemoryDigestSettings(user_job_recent_window=-1)
    assert info.value.path == "user_job_recent_window"


def test_recent_window_never_lowers_the_reserve_below_the_whole_digest() -> None:
    windowed = MemoryDigestSettings(user_job_recent_window=10)
    t = TaskMemoryReserve(TaskMemoryOptions.from_spec({"memory_limit": "1Gi"}, windowed), windowed)
    for i in range(100):  # usage falls: the all-time quantile keeps the reserve
        t.on_job_completed((0.8 - 0.6 * i / 99) * GiB)
    assert t.user_job_reserve_factor() == pytest.approx(t.user_job_digest.get_quantile(0.95))


def test_discard_sample_and_copy() -> None:
    digest = LogDigest(0.05, 1.0, 0.01, 0.5)
    for v in (0.1, 0.2, 0.2, 0.7):
        digest.add_sample(v)
    twin = digest.copy()
    assert digest.discard_sample(0.7) and digest.get_quantile(1.0) < 0.3
    assert not digest.discard_sample(0.7) and not digest.discard_sample(-1.0)
    assert digest.sample_count == 3 and digest.get_quantile(1.0) == digest.get_quantile_linear(1.0)
    assert twin.sample_count == 4 and twin.get_quantile(1.0) > 0.7  # the copy is independent
    twin.add_sample(0.9)
    assert digest.sample_count == 3 and twin.to_state()["sample_count"] == 5


def test_pooltree_improved_presets() -> None:
    settings = MemoryDigestSettings.pooltree_improved()
    assert (
        settings.user_job_reserve_rule,
        settings.user_job_overdraft_cost,
        settings.user_job_recent_window,
    ) == (
        "overdraft_cost",
        2.0,
        40,
    )
    assert settings.overdraft_sample_variant == "docs"
    assert MemoryDigestSettings().user_job_reserve_rule == "quantile"  # the default stays YTsaurus
    assert MemoryDigestSettings.pooltree_improved(user_job_overdraft_cost=3.0).user_job_overdraft_cost == 3.0
    store = MemoryDigestWarmStartStore.pooltree_improved()
    assert (store.max_carried_samples, store.carried_scale) == (50, 1.1)
