"""Where gang operations may run (YTsaurus AreGangOperationsAllowed) and the pool's step-function switch."""

from __future__ import annotations

import numpy as np
import pytest

from pooltree.config import parse_pool_trees
from pooltree.errors import PooltreeError
from pooltree.fairshare import update_fair_share
from pooltree.resources import vector
from pooltree.tree import PoolTrees, build_fair_share_input

POOLS = {
    "queue": {"mode": "fifo"},
    "shared": {},
    "trusted": {"always_allow_gang_operations": True},
    "hub": {"create_ephemeral_subpools": True, "ephemeral_subpool_config": {"mode": "fifo"}},
}


def trees(only_fifo: bool) -> PoolTrees:
    config = {"allow_gang_operations_only_in_fifo_pools": only_fifo}
    return PoolTrees(parse_pool_trees({"t": {"config": config, "pools": POOLS}}), default_tree="t")


@pytest.mark.parametrize("pool", ["queue", "trusted", "hub", "hub$alice"])
def test_gang_operations_run_in_fifo_pools_and_where_a_pool_always_allows_them(pool: str) -> None:
    registry = trees(only_fifo=True)
    registry.register_operation("g", {"pool": pool, "is_gang": True}, user="alice")
    assert registry.operation("g").spec["is_gang"]


def test_a_gang_operation_in_a_fair_share_pool_is_refused_with_the_rule_named() -> None:
    registry = trees(only_fifo=True)
    with pytest.raises(PooltreeError, match="Gang operations are allowed only in FIFO pools") as info:
        registry.register_operation("g", {"pool": "shared", "is_gang": True}, user="alice")
    assert info.value.attributes["pool"] == "shared"
    # A regular operation is fine there, and nothing was left registered by the refused one.
    registry.register_operation("g", {"pool": "shared"}, user="alice")


def test_without_the_tree_rule_gang_operations_run_anywhere() -> None:
    registry = trees(only_fifo=False)
    registry.register_operation("g", {"pool": "shared", "is_gang": True}, user="alice")


def test_a_pool_can_turn_the_gang_step_function_off() -> None:
    def gang_fair_share(step_in_pool: bool) -> float:
        doc = {
            "t": {
                "config": {"enable_step_function_for_gang_operations": True},
                "pools": {"p": {"enable_step_function_for_gang_operations": step_in_pool}, "q": {}},
            }
        }
        registry = PoolTrees(parse_pool_trees(doc), default_tree="t")
        registry.register_operation("g", {"pool": "p", "is_gang": True}, user="u")
        registry.register_operation("o", {"pool": "q"}, user="u")
        demand = {
            "g": (np.zeros(5), vector(user_slots=60, cpu=60)),
            "o": (np.zeros(5), vector(user_slots=60, cpu=60)),
        }
        root, settings = build_fair_share_input(registry.tree("t"), demand)
        total = vector(user_slots=100, cpu=100)
        return float(update_fair_share(root, total, settings, 0.0).elements["g"].fair_share[1])

    # With the step, the gang's share is all of its demand or nothing: 0.6 does not fit next to o's 0.5.
    assert gang_fair_share(True) == pytest.approx(0.0)
    assert gang_fair_share(False) == pytest.approx(0.5)


def test_single_allocation_vanilla_operations_can_count_as_gangs() -> None:
    def is_gang(consider: bool, job_count: int, operation_type: str = "vanilla") -> bool:
        config = {"consider_single_allocation_vanilla_operations_as_gang": consider}
        registry = PoolTrees(
            parse_pool_trees({"t": {"config": config, "pools": {"p": {}}}}), default_tree="t"
        )
        spec = {"pool": "p", "tasks": {"main": {"command": "true", "job_count": job_count}}}
        registry.register_operation("o", spec, user="u", operation_type=operation_type)
        root, _ = build_fair_share_input(registry.tree("t"), {})
        return root.children[0].children[0].is_gang

    assert is_gang(True, 1)
    assert not is_gang(True, 2)
    assert not is_gang(False, 1)
    assert not is_gang(True, 1, operation_type="map")
