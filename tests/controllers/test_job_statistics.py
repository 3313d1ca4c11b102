"""Job memory statistics with YTsaurus names and their per-operation aggregation."""

from __future__ import annotations

import pytest

from pooltree.controllers.memory import TaskMemoryOptions, TaskMemoryReserve
from pooltree.controllers.statistics import JobStatistics, job_memory_statistics
from pooltree.errors import ConfigError

GiB = 1024.0**3
MiB = 1024.0**2


def test_per_job_statistics_names_and_cumulative() -> None:
    t = TaskMemoryReserve(TaskMemoryOptions.from_spec({"memory_limit": "1Gi", "job_proxy_memory": "100Mi"}))
    reserve = t.start_job("c")
    stats = job_memory_statistics(reserve, 0.3 * GiB, 80 * MiB, duration=10.0)
    assert stats["user_job/memory_reserve"] == 0.5 * GiB
    assert stats["user_job/memory_limit"] == GiB
    assert stats["user_job/max_memory"] == 0.3 * GiB
    assert stats["job_proxy/memory_reserve"] == 100 * MiB
    assert stats["job_proxy/estimated_memory"] == 100 * MiB
    assert stats["job_proxy/max_memory"] == 80 * MiB
    assert stats["user_job/cumulative_memory_reserve"] == 0.5 * GiB * 10
    assert stats["user_job/cumulative_max_memory"] == 0.3 * GiB * 10
    assert stats["job_proxy/cumulative_memory_reserve"] == 100 * MiB * 10
    assert stats["job_proxy/cumulative_max_memory"] == 80 * MiB * 10
    assert stats["job_proxy/cumulative_estimated_memory"] == 100 * MiB * 10
    with pytest.raises(ConfigError):
        job_memory_statistics(reserve, -1, 0, 1)


def test_aggregation_flat_and_nested() -> None:
    agg = JobStatistics()
    agg.add_job({"user_job/max_memory": 10.0}, state="completed", job_type="map")
    agg.add_job({"user_job/max_memory": 30.0}, state="completed", job_type="map")
    agg.add_job({"user_job/max_memory": 5.0}, state="aborted", job_type="map")
    agg.add_job({"user_job/max_memory": 7.0}, state="completed", job_type="reduce")
    flat = agg.flat()
    assert flat["user_job/max_memory"] == {"sum": 52.0, "count": 4, "min": 5.0, "max": 30.0, "last": 7.0}
    completed_maps = agg.flat(states=["completed"], job_types=["map"])
    assert completed_maps["user_job/max_memory"] == {
        "sum": 40.0,
        "count": 2,
        "min": 10.0,
        "max": 30.0,
        "last": 30.0,
    }
    nested = agg.nested()
    assert nested["user_job"]["max_memory"]["$"]["completed"]["map"]["sum"] == 40.0
    assert nested["user_job"]["max_memory"]["$"]["aborted"]["map"]["count"] == 1
    assert nested["user_job"]["max_memory"]["$"]["completed"]["reduce"]["max"] == 7.0


def test_aggregation_rejects_bad_input() -> None:
    agg = JobStatistics()
    with pytest.raises(ConfigError):
        agg.add_job({"user_job/max_memory": 1.0}, state="exploded")
    with pytest.raises(ConfigError):
        agg.add_job({"/user_job/max_memory": 1.0})
    with pytest.raises(ConfigError):
        agg.add_job({"user_job/max_memory": float("nan")})
