"""Pending operations (held by a running limit) are not elements of the per-period step (issue 13 bullet 4).

As in YTsaurus, an operation waiting for ``max_running_operation_count`` is only counted in its pools' queues: the
fair-share input, the update's result and the strategy's snapshot hold running operations only, so the step costs
the same with 2 or 2,000 queued operations. The orchid view still lists every pending operation with its queue
position and zero shares; once it runs it is an element from the next update on.
"""

from __future__ import annotations

from typing import Any

from pooltree.config import OperationSpec, parse_pool_trees
from pooltree.fairshare import update_fair_share
from pooltree.orchid import snapshot_strategy, tree_view
from pooltree.resources import vector
from pooltree.strategy.snapshot import StrategyConfig
from pooltree.tree import PoolTree
from tests.periods import Builds, InputReads

TOTAL = vector(user_slots=100, cpu=100, memory=400 * 1024.0**3)


def tree_with_queue(queued: int) -> PoolTree:
    document = {
        "pools": {"team": {"max_running_operation_count": 2, "max_operation_count": 1000}, "other": {}}
    }
    tree = PoolTree(parse_pool_trees({"physical": document})["physical"])
    for index in range(2 + queued):
        tree.register_operation(
            f"t{index}", user="u", pool="team", spec=OperationSpec(pool="team"), now=index
        )
    tree.register_operation("o0", user="v", pool="other", spec=OperationSpec(pool="other"), now=0)
    return tree


def usage(operation_id: str) -> tuple[Any, Any]:
    running = 0.0 if operation_id.startswith("t") and int(operation_id[1:]) >= 2 else 2.0
    return vector(user_slots=running, cpu=running), vector(user_slots=3, cpu=3)


def step(tree: PoolTree) -> tuple[Any, Any]:
    root, settings = InputReads().input(tree, usage)
    result = update_fair_share(root, TOTAL, settings, 10.0)
    built = Builds().build(tree, result, TOTAL, StrategyConfig())
    return result, built


def test_queued_operations_are_not_elements_and_do_not_change_the_others():
    short, long = tree_with_queue(2), tree_with_queue(200)
    short_result, short_tree = step(short)
    long_result, long_tree = step(long)
    running = {"<Root>", "team", "other", "t0", "t1", "o0"}
    assert set(short_result.elements) == running == set(long_result.elements)
    assert set(short_tree.elements) == running == set(long_tree.elements)
    for element_id in running:
        assert short_result.elements[element_id].fair_share.tolist() == (
            long_result.elements[element_id].fair_share.tolist()
        )


def test_orchid_lists_pending_operations_with_their_queue_position():
    tree = tree_with_queue(3)
    result, _ = step(tree)
    view = tree_view(tree, result, TOTAL, snapshot_strategy(tree, result, TOTAL, 10.0))
    pending = view["operations"]["t4"]
    assert pending["pending_pool"] == "team" and pending["pending_position"] == 2
    assert pending["fair_share_ratio"] == 0.0 and pending["scheduling_status"] == "normal"
    assert view["operations"]["t0"]["running"] is True
    # the first queued operation runs once a running one leaves: it is an element of the next step
    assert tree.unregister_operation("t0") == ["t2"]
    result, built = step(tree)
    assert "t2" in result.elements and "t2" in built.elements and "t3" not in result.elements


def test_queueing_does_not_leave_the_fast_path():
    """Operations joining or leaving a queue change nothing the step reads: the tree's revision stays, so the
    input and snapshot are reused whole while a long queue grows (as in the live service)."""
    tree = tree_with_queue(3)
    input_cache, build_cache, config = InputReads(), Builds(), StrategyConfig()
    root, settings = input_cache.input(tree, usage)
    result = update_fair_share(root, TOTAL, settings, 10.0)
    first = build_cache.build(tree, result, TOTAL, config)
    revision = tree.revision
    for index in range(5, 25):
        tree.register_operation(
            f"t{index}", user="u", pool="team", spec=OperationSpec(pool="team"), now=index
        )
    tree.unregister_operation("t4")
    assert tree.revision == revision
    again, settings = input_cache.input(tree, usage)
    assert again is root
    result = update_fair_share(again, TOTAL, settings, 11.0)
    built = build_cache.build(tree, result, TOTAL, config)
    assert all(built.elements[key] is first.elements[key] for key in first.elements)
    # a running operation leaving activates the head of the queue: a structural change
    tree.unregister_operation("t1")
    assert tree.revision > revision
    root, settings = input_cache.input(tree, usage)
    assert "t2" in {child.id for child in root.children[0].children}
