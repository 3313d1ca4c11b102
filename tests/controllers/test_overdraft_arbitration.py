"""Node-side arbitration: memory limit failures, overdraft aborts and their order."""

from __future__ import annotations

import pytest

from pooltree.controllers.overdraft import JobMemory, select_overdraft_victims
from pooltree.errors import ConfigError


def job(job_id: str, reserve: float, usage: float, start: float, limit: float = 100.0) -> JobMemory:
    return JobMemory(id=job_id, reserve=reserve, usage=usage, memory_limit=limit, start_time=start)


def test_overdraft_tolerated_while_node_fits() -> None:
    jobs = [job("a", 10, 30, 0), job("b", 10, 5, 1)]
    result = select_overdraft_victims(100, jobs)
    assert result.failed == [] and result.aborted == [] and result.fits
    assert result.usage_after == 35


def test_memory_limit_exceeded_fails_even_with_spare_memory() -> None:
    jobs = [job("a", 10, 60, 0, limit=50), job("b", 10, 20, 1)]
    result = select_overdraft_victims(1000, jobs)
    assert [j.id for j in result.failed] == ["a"]
    assert result.aborted == []
    assert result.failure_error == "Memory limit exceeded"


def test_failures_free_memory_before_aborts() -> None:
    jobs = [job("a", 10, 60, 0, limit=50), job("b", 10, 30, 1), job("c", 40, 40, 2)]
    result = select_overdraft_victims(80, jobs)  # 130 used; without a it is 70 and fits
    assert [j.id for j in result.failed] == ["a"] and result.aborted == []


def test_largest_overdraft_first_until_fits() -> None:
    jobs = [
        job("small", 20, 25, 5),  # overdraft 5
        job("big", 20, 50, 0),  # overdraft 30
        job("mid", 20, 35, 9),  # overdraft 15
        job("inside", 40, 30, 10),  # within reserve: never aborted
    ]
    result = select_overdraft_victims(100, jobs)  # 140 used
    assert [j.id for j in result.aborted] == ["big"]
    assert result.usage_after == 90 and result.fits
    result = select_overdraft_victims(60, jobs)  # 140 → 90 → 55
    assert [j.id for j in result.aborted] == ["big", "mid"]
    assert result.abort_reason == "resource_overdraft" and result.fits
    result = select_overdraft_victims(
        29, jobs
    )  # every overdrafting job goes; the one inside its reserve stays
    assert [j.id for j in result.aborted] == ["big", "mid", "small"]
    assert result.usage_after == 30 and not result.fits


def test_latest_started_order_and_ties() -> None:
    jobs = [job("old", 20, 50, 0), job("new", 20, 25, 9), job("newer_tie", 20, 25, 9)]
    result = select_overdraft_victims(80, jobs, order="latest_started")  # 100 used
    assert [j.id for j in result.aborted] == ["new"]
    tie = [job("x", 10, 20, 1), job("y", 10, 20, 3)]
    assert [j.id for j in select_overdraft_victims(25, tie).aborted] == ["y"]  # equal overdraft: latest first


def test_not_fitting_without_overdraft() -> None:
    result = select_overdraft_victims(50, [job("a", 40, 40, 0), job("b", 40, 30, 1)])
    assert result.aborted == [] and not result.fits


def test_bad_input_named() -> None:
    with pytest.raises(ConfigError) as info:
        select_overdraft_victims(100, [job("a", 10, -1, 0)])
    assert info.value.path == "jobs[0].usage"
    with pytest.raises(ConfigError):
        select_overdraft_victims(100, [], order="random")
