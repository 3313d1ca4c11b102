"""The tree's ``allow_preemption_from_starving_operations`` (issue 30): may a starving operation's allocations be
preempted?

One node of 10 cpu. ``victim`` (pool pa, fair share 8 cpu) runs its six 1-cpu jobs; its two 20-cpu jobs fit no
node. It is below its fair share (6 < 0.8 × 8), so it starves after 30 s; with
``preemption_satisfaction_threshold`` 0.5 its allocations past 4 cpu are preemptible. ``hungry`` (pool pc, fair
share 2 cpu) wants one 5-cpu job: 4 cpu are free, so it needs one of the victim's preemptible allocations once it
starves itself (30 s)."""

from __future__ import annotations

import pytest
from strategykit import GiB, Kit

from pooltree.config import parse_pool_trees
from pooltree.config.support import unsupported_options
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy import StarvationStatus, StrategyConfig


def _preempted(**config: object) -> tuple[int, StarvationStatus]:
    kit = Kit(
        node_count=1,
        node_cpu=10,
        config=StrategyConfig(
            preemption_satisfaction_threshold=0.5,
            aggressive_preemption_satisfaction_threshold=0.2,
            preemptive_scheduling_backoff=0.0,
            enable_pool_starvation=False,
            **config,  # type: ignore[arg-type]
        ),
    )
    kit.pool("pa")
    kit.pool("pc")
    # six 1-cpu jobs that run, and two 20-cpu jobs no node can take: its demand stays above its fair share
    victim = VanillaController(
        "victim",
        [
            TaskSpec("small", 6, vector(user_slots=1, cpu=1, memory=GiB)),
            TaskSpec("big", 2, vector(user_slots=1, cpu=20, memory=20 * GiB)),
        ],
    )
    kit.ops["victim"] = {"pool": "pa", "controller": victim}
    kit.scheduler.register_operation("victim", victim)
    kit.set_fair_share({"pa": 8, "victim": 8})
    kit.round(0)
    assert kit.usage_cpu("victim") == 6
    kit.operation("hungry", "pc", jobs=1, cpu=5.0)
    kit.set_fair_share({"pa": 8, "victim": 8, "pc": 2, "hungry": 2})
    preempted = []
    for t in range(1, 60):
        for result in kit.round(float(t)):
            preempted.extend(result.allocations_to_preempt)
        if preempted:
            break  # the first preemption decides; what the victim does next is another story
    assert {record.preemptor_operation_id for record in preempted} <= {"hungry"}
    return len(preempted), kit.scheduler.starvation_status("victim")


def test_unset_keeps_the_compat_starvation_check() -> None:
    count, status = _preempted()
    assert status == StarvationStatus.STARVING
    assert count == 0  # preemption_check_starvation (default true) protects the starving victim


def test_true_lets_a_starving_operation_lose_allocations() -> None:
    count, _ = _preempted(allow_preemption_from_starving_operations=True)
    assert count == 1


@pytest.mark.parametrize("check_starvation", [True, False])
def test_false_protects_a_starving_operation_whatever_the_compat_option(check_starvation: bool) -> None:
    count, status = _preempted(
        allow_preemption_from_starving_operations=False, preemption_check_starvation=check_starvation
    )
    assert status == StarvationStatus.STARVING
    assert count == 0


def test_compat_option_off_alone_allows_it() -> None:
    count, _ = _preempted(preemption_check_starvation=False)
    assert count == 1


def test_the_tree_option_reaches_the_strategy_and_is_not_reported() -> None:
    trees = parse_pool_trees(
        {"t": {"config": {"allow_preemption_from_starving_operations": False}, "pools": {"p": {}}}}
    )
    assert unsupported_options(trees) == []
    config = StrategyConfig.from_options(trees["t"].config)
    assert config.allow_preemption_from_starving_operations is False
    assert (
        StrategyConfig.from_options(
            parse_pool_trees({"t": {}})["t"].config
        ).allow_preemption_from_starving_operations
        is None
    )
