"""The spec's ``schedule_in_single_tree`` (issue 30): the choice of one tree, as YTsaurus's
``ChooseBestSingleTreeForOperation`` makes it (its integration tests ``TestSchedulerScheduleInSingleTree``: a busy
pool, an unequal guarantee, unequal totals; ``consider_guarantees_for_single_tree`` failing on empty and
zero-guarantee trees). The simulator's and the live service's use: ``tests/sim/test_sim_single_tree.py``,
``tests/server/test_live_single_tree.py``."""

from __future__ import annotations

import numpy as np
import pytest

from pooltree.config import OperationSpec, parse_pool_trees
from pooltree.config.support import unsupported_options
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.errors import ConfigError, PooltreeError
from pooltree.resources import vector
from pooltree.strategy import NodeHeartbeat
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.single_tree import (
    NO_SINGLE_TREE,
    SingleTreeCandidate,
    choose_single_tree,
    choose_tree,
    schedules_in_single_tree,
)
from pooltree.tree import PoolTree

GiB = 1024.0**3
TOTAL = vector(user_slots=10, cpu=10, memory=10 * GiB)
NEED = vector(user_slots=2, cpu=2, memory=2 * GiB)


def _candidate(tree: str, *, demand: float = 0.0, guarantee: float = 0.0, total=TOTAL, running=True):
    return SingleTreeCandidate(tree, running, total, np.full(5, demand), np.full(5, guarantee))


def test_the_tree_whose_pool_is_less_busy_wins() -> None:
    candidates = [_candidate("default", demand=0.5, guarantee=0.1), _candidate("nirvana", guarantee=0.1)]
    assert choose_single_tree("op", candidates, NEED, consider_guarantees=False) == "nirvana"


def test_the_tree_with_the_larger_guarantee_wins() -> None:
    candidates = [_candidate("default"), _candidate("nirvana", guarantee=0.3)]
    assert choose_single_tree("op", candidates, NEED, consider_guarantees=False) == "nirvana"


def test_the_larger_tree_wins_when_shares_are_equal() -> None:
    """The operation's needs are a smaller share of a larger tree (resources a tree lacks are left out)."""
    big = TOTAL * 2
    big[2] = 0.0  # no gpu anywhere: not compared
    candidates = [_candidate("default"), _candidate("nirvana", total=big)]
    assert choose_single_tree("op", candidates, NEED, consider_guarantees=False) == "nirvana"


def test_pending_trees_are_not_candidates_and_empty_trees_are_the_fallback() -> None:
    candidates = [_candidate("busy", guarantee=0.9, running=False), _candidate("empty", total=np.zeros(5))]
    assert choose_single_tree("op", candidates, NEED, consider_guarantees=False) == "empty"


def test_consider_guarantees_fails_on_empty_and_zero_guarantee_trees() -> None:
    candidates = [_candidate("empty", total=np.zeros(5)), _candidate("plain")]
    with pytest.raises(PooltreeError) as error:
        choose_single_tree("op", candidates, NEED, consider_guarantees=True)
    assert error.value.message == NO_SINGLE_TREE
    assert error.value.attributes["empty_candidate_trees"] == ["empty"]
    assert error.value.attributes["zero_guarantee_candidate_trees"] == ["plain"]
    with_guarantee = [*candidates, _candidate("guaranteed", guarantee=0.2)]
    assert choose_single_tree("op", with_guarantee, NEED, consider_guarantees=True) == "guaranteed"


def test_the_options_are_implemented_and_checked() -> None:
    spec = OperationSpec.parse(
        {
            "pool_trees": ["a", "b"],
            "schedule_in_single_tree": True,
            "consider_guarantees_for_single_tree": True,
        },
        "spec",
    )
    assert schedules_in_single_tree(spec)
    trees = parse_pool_trees({"a": {}, "b": {}})
    assert unsupported_options(trees, [("op", spec)]) == []
    with pytest.raises(ConfigError, match=r"spec\.schedule_in_single_tree"):
        schedules_in_single_tree(OperationSpec.parse({"schedule_in_single_tree": "yes"}, "spec"))


def _core(name: str, pools: dict, nodes: int) -> SchedulerCore:
    core = SchedulerCore(PoolTree(parse_pool_trees({name: {"pools": pools}})[name]))
    for index in range(nodes):
        core.add_node(f"{name}-{index}", TOTAL)
    return core


def test_choose_tree_reads_the_cores_last_updates() -> None:
    """Pool research is busy in tree a (an operation there wants all of it): b is chosen."""
    cores = {"a": _core("a", {"research": {}}, 1), "b": _core("b", {"research": {}}, 1)}
    busy = VanillaController("busy", [TaskSpec("main", 10, vector(user_slots=1, cpu=1, memory=GiB))])
    cores["a"].register_operation("busy", busy, user="u", pool="research", spec={"pool": "research"})
    for core in cores.values():
        core.update_fair_share(0.0)
    cores["a"].process_heartbeat(NodeHeartbeat("a-0", TOTAL), 0.0)
    spec = OperationSpec.parse({"pool": "research", "schedule_in_single_tree": True}, "spec")
    chosen = choose_tree(
        cores,
        ["a", "b"],
        "new",
        spec,
        user="u",
        operation_type="vanilla",
        new_demand=NEED,
        pool_of={"a": "research", "b": "research"},
    )
    assert chosen == "b"
    assert "new" not in cores["a"].pool_tree.operations  # a dry run: nothing registered
