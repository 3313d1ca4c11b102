"""`SchedulerCore.input_resources` hands the fair-share input each operation's current (usage, needed) and says which
operations may have moved; the input writes an answer into the operation's element only when it moved."""

from __future__ import annotations

from pooltree.config import parse_pool_trees
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.update_steps import _fair_share_input
from pooltree.tree import PoolTree

GiB = 1024.0**3
JOB = vector(user_slots=1, cpu=1, memory=GiB)


def _controller(operation_id: str, jobs: int) -> VanillaController:
    return VanillaController(operation_id, [TaskSpec("main", jobs, JOB)])


def test_resources_follow_controllers():
    tree = PoolTree(parse_pool_trees({"t": {"pools": {"a": {}}}})["t"])
    core = SchedulerCore(tree)
    core.add_node("n0", vector(user_slots=8, cpu=8, memory=8 * GiB))
    core.register_operation("x", _controller("x", 3), user="u", pool="a")
    core.update_fair_share(0.0)
    first = core.input_resources.resources("x")
    assert first is not None and first[1].tolist() == (JOB * 3).tolist()
    controller = core.controllers["x"]
    controller._tasks["main"].pending.pop()  # pending work changes behind the strategy's back: notified
    controller._refresh()
    assert "x" in core.input_resources.changed()[0]
    second = core.input_resources.resources("x")
    assert second is not None and second[1].tolist() == (JOB * 2).tolist()
    core.detach_controller("x")  # no controller, no answer; a new controller of the same id is read afresh
    assert core.input_resources.resources("x") is None
    core.attach_controller("x", _controller("x", 5))
    third = core.input_resources.resources("x")
    assert third is not None and third[1].tolist() == (JOB * 5).tolist()


def test_the_input_writes_the_notified_operations():
    """The period's delta names the notified operations: each is asked and written (the update re-reads its row),
    whether its answer moved or not; nothing compares answers."""
    tree = PoolTree(parse_pool_trees({"t": {"pools": {"a": {}}}})["t"])
    core = SchedulerCore(tree)
    core.add_node("n0", vector(user_slots=8, cpu=8, memory=8 * GiB))
    core.register_operation("x", _controller("x", 3), user="u", pool="a")
    core.register_operation("y", _controller("y", 2), user="u", pool="a")
    core.update_fair_share(0.0)
    core.strategy.state.changes.usage.update({"x", "y"})  # notified, nothing moved
    controller = core.controllers["y"]
    controller._tasks["main"].pending.pop()  # y's pending work moves
    controller._refresh()
    kept = core.kept
    read = _fair_share_input(core, kept, kept.delta(core.pool_tree, core.input_resources.changed()[0]), 1.0)
    written = read.written
    assert written is not None and sorted(element.id for element in written) == ["x", "y"]
    assert read.rows is not None
    element = read.rows.operations["y"][0]
    assert element.demand.tolist() == (JOB * 1).tolist()
