"""Reserve selection per task: spec normalization, demand, samples, overdraft variants, restart reserve."""

from __future__ import annotations

import pytest

from pooltree.controllers.memory import (
    MemoryDigestSettings,
    TaskMemoryOptions,
    TaskMemoryReserve,
    estimate_job_proxy_memory,
)
from pooltree.digest import LogDigest
from pooltree.errors import ConfigError, PooltreeError

GiB = 1024.0**3
MiB = 1024.0**2


def task(spec: dict | None = None, **settings) -> TaskMemoryReserve:
    s = MemoryDigestSettings(**settings)
    return TaskMemoryReserve(TaskMemoryOptions.from_spec(spec or {"memory_limit": "1Gi"}, s), s)


def edge(value: float, lower: float = 0.05) -> float:
    d = LogDigest(lower, 1.0, 0.01)
    d.add_sample(value)
    return d.get_quantile(1.0)


def test_defaults_and_cold_start_demand() -> None:
    t = task({"memory_limit": "1Gi", "input_table_count": 2, "output_table_count": 3})
    assert t.user_job_reserve_factor() == 0.5
    assert t.job_proxy_reserve_factor() == 1.0
    jp = estimate_job_proxy_memory(2, 3)
    assert jp == (64 + 2 * 16 + 3 * 32) * MiB
    assert t.memory_demand() == 16 * MiB + jp * 1.0 + GiB * 0.5


def test_completed_samples_move_the_reserve() -> None:
    t = task()
    for _ in range(10):
        t.on_job_completed(0.3 * GiB, 100 * MiB)
    assert t.user_job_reserve_factor() == edge(0.3)
    reserve = t.start_job("c1")
    assert reserve.user_job_memory_reserve == GiB * edge(0.3)
    jp_ratio = 100 * MiB / (t.options.job_proxy_memory + t.options.footprint_memory)
    assert jp_ratio == pytest.approx(100 / 128)
    jp_digest = LogDigest(0.5, 2.0, 0.01, 1.0)
    jp_digest.add_sample(jp_ratio)
    assert t.job_proxy_reserve_factor() == jp_digest.get_quantile(0.95) < 1.0
    assert (
        reserve.memory_demand
        == 16 * MiB + t.options.job_proxy_memory * reserve.job_proxy_reserve_factor + GiB * edge(0.3)
    )


def test_failed_and_other_aborts_add_nothing() -> None:
    t = task()
    t.start_job(1)
    t.on_job_failed(1, "Memory limit exceeded")
    t.on_job_aborted(2, "preemption")
    assert t.user_job_digest.sample_count == 0
    with pytest.raises(PooltreeError):
        t.on_job_aborted(3, "resource_overdraft")


def test_tmpfs_raises_lower_bound_and_default() -> None:
    opts = TaskMemoryOptions.from_spec({"memory_limit": "1Gi", "tmpfs_size": "700Mi"})
    assert opts.user_job_digest_lower_bound == pytest.approx(700 / 1024)
    assert opts.user_job_digest_default_value == pytest.approx(700 / 1024)
    t = TaskMemoryReserve(opts)
    t.on_job_completed(0.1 * GiB)
    assert t.user_job_reserve_factor() >= 700 / 1024
    opts = TaskMemoryOptions.from_spec(
        {
            "memory_limit": "1Gi",
            "tmpfs_volumes": [{"size": "100Mi", "path": "a"}, {"size": "100Mi", "path": "b"}],
        }
    )
    assert opts.user_job_digest_default_value == 0.5 and opts.user_job_digest_lower_bound == pytest.approx(
        0.2 / 1.024
    )
    full = TaskMemoryOptions.from_spec({"memory_limit": "1Gi", "tmpfs_size": "1Gi"})
    assert full.user_job_digest_lower_bound == 1.0 == full.user_job_digest_default_value


def test_tmpfs_above_limit_rejected() -> None:
    with pytest.raises(ConfigError) as info:
        TaskMemoryOptions.from_spec({"memory_limit": "1Gi", "tmpfs_size": "2Gi"}, path="spec.mapper")
    assert info.value.path == "spec.mapper.tmpfs_size"
    assert "exceeds memory_limit" in info.value.reason


def test_memory_reserve_factor_alias() -> None:
    opts = TaskMemoryOptions.from_spec({"memory_limit": "1Gi", "memory_reserve_factor": 0.8})
    assert opts.user_job_digest_lower_bound == 0.8 == opts.user_job_digest_default_value
    ignoring = MemoryDigestSettings(ignore_memory_reserve_factor_less_than_one=True)
    opts = TaskMemoryOptions.from_spec({"memory_limit": "1Gi", "memory_reserve_factor": 0.8}, ignoring)
    assert opts.user_job_digest_lower_bound == 0.05 and opts.user_job_digest_default_value == 0.5
    opts = TaskMemoryOptions.from_spec({"memory_limit": "1Gi", "memory_reserve_factor": 1.0}, ignoring)
    assert opts.user_job_digest_lower_bound == 1.0


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"memory_limit": 0}, "spec.memory_limit"),
        ({"user_job_memory_digest_default_value": 1.5}, "spec.user_job_memory_digest_default_value"),
        ({"user_job_memory_digest_lower_bound": 0}, "spec.user_job_memory_digest_lower_bound"),
        (
            {"job_proxy_memory_digest": {"lower_bound": 0.5, "upper_bound": 2.0, "default_value": 3.0}},
            "spec.job_proxy_memory_digest.default_value",
        ),
        ({"job_proxy_memory_digest": {"lower_bound": "half"}}, "spec.job_proxy_memory_digest.lower_bound"),
        (
            {"job_proxy_memory_digest": {"relative_precision": -1}},
            "spec.job_proxy_memory_digest.relative_precision",
        ),
        ({"memroy_limit": 1}, "spec.memroy_limit"),
        ({"output_table_count": -1}, "spec.output_table_count"),
    ],
)
def test_bad_spec_names_the_field(spec: dict, path: str) -> None:
    with pytest.raises(ConfigError) as info:
        TaskMemoryOptions.from_spec(spec)
    assert info.value.path == path


def test_settings_validation() -> None:
    with pytest.raises(ConfigError) as info:
        MemoryDigestSettings.from_mapping({"overdraft_sample_variant": "bogus"})
    assert info.value.path == "controller_agent.overdraft_sample_variant"
    with pytest.raises(ConfigError):
        MemoryDigestSettings(memory_digest_resource_overdraft_factor=0.9)
    legacy = MemoryDigestSettings.from_mapping({"resource_overdraft_factor": 1.3})
    assert legacy.memory_digest_resource_overdraft_factor == 1.3


@pytest.mark.parametrize(
    ("variant", "ratio", "expected"),
    [
        ("docs", 0.6, 0.6 * 1.1),  # ratio × 1.1
        ("code", 0.6, max(0.6, 0.5 * 1.1)),  # max(ratio, reserve × 1.1)
        ("code", 0.52, 0.5 * 1.1),
        ("newest", 0.52, 0.52),  # below the limit: plain ratio
    ],
)
def test_overdraft_sample_variants(variant: str, ratio: float, expected: float) -> None:
    t = task(overdraft_sample_variant=variant)
    t.start_job("c")
    t.on_job_aborted_resource_overdraft("c", ratio * GiB)
    assert t.user_job_digest.sample_count == 1
    assert t.user_job_reserve_factor() == edge(expected)
    assert t.resource_overdraft_count == 1


def test_newest_variant_bumps_at_or_above_limit() -> None:
    t = task(overdraft_sample_variant="newest")
    t.start_job("c")
    t.on_job_aborted_resource_overdraft("c", 1.0 * GiB)
    assert t.user_job_digest.get_quantile(0.95) == 1.0


def test_restart_reserve_upper_bound_then_completion_clears_it() -> None:
    t = task()
    for _ in range(5):
        t.on_job_completed(0.2 * GiB)
    first = t.start_job("c")
    assert not first.restarted
    restart = t.on_job_aborted_resource_overdraft("c", 0.4 * GiB)
    assert restart is not None and restart.user_job_reserve_factor == 1.0 and restart.overdraft_count == 1
    assert t.reserve_for_restart("c") == restart
    rerun = t.start_job("c")
    assert rerun.restarted and rerun.user_job_reserve_factor == 1.0
    assert t.start_job("other").user_job_reserve_factor < 1.0
    t.on_job_completed(0.4 * GiB, cookie="c")
    assert t.reserve_for_restart("c") is None


def test_restart_reserve_with_multiplier() -> None:
    t = task(user_job_resource_overdraft_memory_multiplier=1.5)
    for _ in range(5):
        t.on_job_completed(0.2 * GiB)
    factor = t.start_job("c").user_job_reserve_factor
    restart = t.on_job_aborted_resource_overdraft("c", 0.3 * GiB)
    assert restart.user_job_reserve_factor == pytest.approx(factor * 1.5)
    t.start_job("c")
    second = t.on_job_aborted_resource_overdraft("c", 0.5 * GiB)
    assert (
        second.user_job_reserve_factor == 1.0 and second.overdraft_count == 2
    )  # second overdraft: upper bound


def test_blame_goes_to_the_process_above_its_reserve() -> None:
    t = task(job_proxy_resource_overdraft_memory_multiplier=None)
    reserve = t.start_job("c")
    proxy_over = reserve.job_proxy_memory_reserve + reserve.footprint_memory + 50 * MiB
    restart = t.on_job_aborted_resource_overdraft("c", 0.1 * GiB, proxy_over)
    assert restart.job_proxy_reserve_factor == 2.0  # job proxy digest upper bound
    assert restart.user_job_reserve_factor is None  # user job keeps using its digest
    # the user job added its plain ratio (not bumped)
    assert t.user_job_reserve_factor() == edge(0.1)


def test_jobs_started_with_the_same_factors_share_one_reserve() -> None:
    """A start makes no reserve object while the factors hold: the jobs share one (a value), each running job
    keeps the one it started with, and a move of the factors or a restart reserve gives another."""
    t = task()
    first, second = t.start_job(("main", 0)), t.start_job(("main", 1))
    assert second is first and not first.restarted
    for _ in range(10):
        t.on_job_completed(0.3 * GiB, 100 * MiB)
    moved = t.start_job(("main", 2))
    assert moved is not first and moved.user_job_reserve_factor == edge(0.3)
    assert t.running_reserve(("main", 0)) is first and t.running_reserve(("main", 2)) is moved
    assert first.user_job_reserve_factor == 0.5  # what the first job started with, kept
    t.on_job_completed(0.3 * GiB, 100 * MiB)  # another sample: the factors read again, the same values
    assert t.start_job(("main", 3)) is moved
    t.on_job_aborted_resource_overdraft(("main", 2), 0.9 * GiB)
    rerun = t.start_job(("main", 2))
    assert rerun.restarted and rerun is not moved and rerun.user_job_reserve_factor == 1.0
    assert t.start_job(("main", 4)).restarted is False
