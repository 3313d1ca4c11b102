"""Tentative pool trees' rules (``pooltree/strategy/tentative.py``, YTsaurus's ``TTentativeTreeEligibility`` and
``GetOperationPoolTrees``): when a tentative tree declines, when it is banned, which trees are tentative."""

from __future__ import annotations

import pytest

from pooltree.errors import ConfigError
from pooltree.strategy.tentative import (
    TentativeEligibility,
    TentativeGate,
    TentativeTreeEligibilityConfig,
    tentative_trees,
)

CONFIG = TentativeTreeEligibilityConfig(
    sample_job_count=2, max_tentative_job_duration_ratio=3.0, min_job_duration=5.0
)


def _eligibility() -> TentativeEligibility:
    return TentativeEligibility(["cloud"], CONFIG)


def test_a_tentative_tree_waits_for_its_sample_before_starting_more_jobs() -> None:
    e = _eligibility()
    assert e.can_start("cloud")
    e.on_started("main", "cloud", 0.0)
    assert e.can_start("cloud")
    e.on_started("main", "cloud", 0.0)
    assert not e.can_start("cloud")  # 2 running = the sample still to complete
    assert e.can_start("physical")  # a regular tree never declines
    e.on_finished("main", "cloud", "completed", 4.0, 4.0)
    assert not e.can_start("cloud")  # 1 running, 1 still to complete
    e.on_finished("main", "cloud", "completed", 4.0, 4.0)
    assert e.can_start("cloud")  # the sample is complete: no more waiting


def test_a_tree_whose_jobs_are_ratio_times_slower_is_banned_after_the_regular_sample() -> None:
    e = _eligibility()
    e.on_started("main", "cloud", 0.0)
    assert e.on_finished("main", "cloud", "completed", 30.0, 30.0) == []  # no regular sample yet
    assert e.on_finished("main", "physical", "completed", 4.0, 31.0) == []  # 1 of 2 regular samples
    assert e.on_finished("main", "physical", "completed", 6.0, 32.0) == ["cloud"]  # mean 30 / 5 >= 3
    assert not e.can_start("cloud")
    assert e.on_finished("main", "physical", "completed", 5.0, 33.0) == []  # banned once


def test_a_tree_below_the_ratio_or_the_min_duration_is_kept() -> None:
    e = _eligibility()
    for _ in range(2):  # a full sample: its mean alone counts
        e.on_started("main", "cloud", 0.0)
        e.on_finished("main", "cloud", "completed", 14.0, 14.0)
    e.on_finished("main", "physical", "completed", 5.0, 15.0)
    assert e.on_finished("main", "physical", "completed", 5.0, 16.0) == []  # 14 / 5 < 3
    fast = TentativeEligibility(["cloud"], CONFIG)
    fast.on_started("main", "cloud", 0.0)
    fast.on_finished("main", "cloud", "completed", 4.0, 4.0)
    fast.on_finished("main", "physical", "completed", 1.0, 4.0)
    assert fast.on_finished("main", "physical", "completed", 1.0, 4.0) == []  # 4 s < min_job_duration


def test_a_running_job_counts_until_now_while_the_sample_is_short() -> None:
    e = _eligibility()
    e.on_finished("main", "physical", "completed", 2.0, 2.0)
    e.on_started("main", "cloud", 0.0)  # still running at 20 s: one sample of 20 s
    assert e.on_finished("main", "physical", "completed", 2.0, 20.0) == ["cloud"]


def test_failed_and_aborted_jobs_are_no_samples() -> None:
    e = _eligibility()
    e.on_started("main", "cloud", 0.0)
    e.on_finished("main", "cloud", "failed", 100.0, 100.0)
    e.on_finished("main", "physical", "aborted", 1.0, 100.0)
    assert e.tasks["main"].non_tentative.count == 0
    assert e.tasks["main"].completed == {}


def test_the_gate_saturates_an_operation_for_the_period_after_a_decline() -> None:
    gate = TentativeGate(period=10.0)
    gate.tree = "cloud"
    e = _eligibility()
    gate.operations["op"] = e
    assert gate.deactivation("other", 0.0) is None  # not tentative here
    assert gate.deactivation("op", 0.0) is None
    e.on_started("main", "cloud", 0.0)
    e.on_started("main", "cloud", 0.0)
    assert gate.deactivation("op", 1.0) == "declined"
    assert gate.deactivation("op", 5.0) == "saturated_in_tentative_tree"
    e.on_finished("main", "cloud", "completed", 1.0, 6.0)
    e.on_finished("main", "cloud", "completed", 1.0, 6.0)
    assert gate.deactivation("op", 10.9) == "saturated_in_tentative_tree"
    assert gate.deactivation("op", 11.0) is None  # the period is over and the sample is complete


def test_which_trees_are_tentative() -> None:
    spec = {"pool_trees": ["physical"], "tentative_pool_trees": ["cloud", "gone"]}
    with pytest.raises(ConfigError, match="Pool tree 'gone' not found"):
        tentative_trees(spec, "vanilla", ["physical", "cloud"], {})
    ignoring = {**spec, "tentative_tree_eligibility": {"ignore_missing_pool_trees": True}}
    assert tentative_trees(ignoring, "vanilla", ["physical", "cloud"], {}) == ["cloud"]
    assert tentative_trees(ignoring, "map_reduce", ["physical", "cloud"], {}) == []  # YTsaurus's default
    assert tentative_trees(ignoring, "vanilla", ["physical", "cloud"], {"cloud": ["vanilla"]}) == []
    with pytest.raises(ConfigError, match="must not intersect"):
        tentative_trees(
            {"pool_trees": ["cloud"], "tentative_pool_trees": ["cloud"]}, "vanilla", ["cloud"], {}
        )
    with pytest.raises(ConfigError, match="Regular pool trees must be explicitly specified"):
        tentative_trees({"tentative_pool_trees": ["cloud"]}, "vanilla", ["cloud"], {})
    with pytest.raises(ConfigError, match=r"tentative_tree_eligibility\.sample_job_count"):
        tentative_trees({**spec, "tentative_tree_eligibility": {"sample_job_count": 0}}, "vanilla", [], {})


def test_the_eligibility_config_defaults_are_ytsaurus_s() -> None:
    config = TentativeTreeEligibilityConfig.parse({"min_job_duration": 1500})
    assert (config.sample_job_count, config.max_tentative_job_duration_ratio) == (10, 10.0)
    assert config.min_job_duration == 1.5
    with pytest.raises(ConfigError, match="max_tentative_job_duration_ratio"):
        TentativeTreeEligibilityConfig.parse({"max_tentative_job_duration_ratio": -1})
