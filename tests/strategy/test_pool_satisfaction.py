"""The tree's and pools' ``use_pool_satisfaction_for_scheduling`` (issue 30): a pool competes with
min(its best child's satisfaction, its own).

One node of 10 cpu. Pool A (fair share 5 cpu) runs a1 on 1 cpu, but a1's own fair share is 0.5 cpu: a1 is
satisfied (2.0) while A itself is hungry (1 / 5 = 0.2). Pool B (fair share 5) runs b1 on 2 cpu of 5 (0.4). By
default A's key is its best child's, 2.0, so B wins the next allocation; with the option A's key is 0.2, so A wins
it. The same choice in the preemptive stage's ordering is `PreemptiveStages._best_among`."""

from __future__ import annotations

from typing import Any

import pytest
from strategykit import GiB, Kit

from pooltree.config import parse_pool_trees
from pooltree.config.support import unsupported_options
from pooltree.resources import vector
from pooltree.strategy import StrategyConfig
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree


def _first_winner(config: StrategyConfig, pool_a: dict[str, Any] | None = None) -> tuple[str, Kit]:
    kit = Kit(node_count=1, node_cpu=10, config=config)
    kit.pool("A", **(pool_a or {}))
    kit.pool("B")
    kit.operation("b1", "B", jobs=10)
    kit.set_fair_share({"B": 5, "b1": 5})
    kit.publish(0)
    kit.heartbeat(0, 0.0, limits=vector(user_slots=2, cpu=2, memory=2 * GiB))
    kit.operation("a1", "A", jobs=10)
    kit.set_fair_share({"A": 5, "a1": 0.5, "B": 5, "b1": 5})
    kit.publish(1)
    kit.heartbeat(0, 1.0, limits=vector(user_slots=3, cpu=3, memory=3 * GiB))
    assert (kit.usage_cpu("a1"), kit.usage_cpu("b1")) == (1.0, 2.0)
    kit.publish(2)
    result = kit.heartbeat(0, 2.0, limits=vector(user_slots=4, cpu=4, memory=4 * GiB))
    assert len(result.allocations_to_start) == 1
    return result.allocations_to_start[0].operation_id, kit


def test_by_default_the_best_child_decides() -> None:
    winner, _ = _first_winner(StrategyConfig())
    assert winner == "b1"


def test_with_the_tree_option_the_hungry_pool_wins() -> None:
    winner, _ = _first_winner(StrategyConfig(use_pool_satisfaction_for_scheduling=True))
    assert winner == "a1"


@pytest.mark.parametrize(("tree", "pool", "expected"), [(False, True, "a1"), (True, False, "b1")])
def test_a_pools_own_value_wins_over_the_trees(tree: bool, pool: bool, expected: str) -> None:
    config = StrategyConfig(use_pool_satisfaction_for_scheduling=tree)
    winner, _ = _first_winner(config, {"use_pool_satisfaction_for_scheduling": pool})
    assert winner == expected


def test_keys_follow_usage_between_publishes() -> None:
    """After the allocation, A's own satisfaction is 2 / 5 = 0.4 = B's: the heaps were re-keyed up to the root
    (no stale key), so the next choice is by the usual tie-break (least recently served: b1)."""
    _, kit = _first_winner(StrategyConfig(use_pool_satisfaction_for_scheduling=True))
    result = kit.heartbeat(0, 3.0, limits=vector(user_slots=5, cpu=5, memory=5 * GiB))
    assert [a.operation_id for a in result.allocations_to_start] == ["b1"]
    pool_a = kit.scheduler.state.elements["A"]
    assert pool_a.sat == pytest.approx(0.4)


def test_the_options_reach_the_strategy_and_are_not_reported() -> None:
    trees = parse_pool_trees(
        {
            "t": {
                "config": {"use_pool_satisfaction_for_scheduling": True},
                "pools": {"p": {"use_pool_satisfaction_for_scheduling": False}},
            }
        }
    )
    assert unsupported_options(trees) == []
    assert StrategyConfig.from_options(trees["t"].config).use_pool_satisfaction_for_scheduling is True
    assert trees["t"].pools["p"].config.use_pool_satisfaction_for_scheduling is False
    core = SchedulerCore(PoolTree(trees["t"]))
    core.update_fair_share(0.0)
    effective = core.strategy.tree.effective
    assert effective["<Root>"].use_pool_satisfaction and not effective["p"].use_pool_satisfaction
