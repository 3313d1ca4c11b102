"""`SchedulerCore.input_resources` hands the fair-share input each operation's current (usage, needed), the same
object while both are unchanged, and forgets an operation whose controller leaves."""

from __future__ import annotations

from pooltree.config import parse_pool_trees
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

GiB = 1024.0**3
JOB = vector(user_slots=1, cpu=1, memory=GiB)


def _controller(operation_id: str, jobs: int) -> VanillaController:
    return VanillaController(operation_id, [TaskSpec("main", jobs, JOB)])


def test_resources_follow_revisions_and_controllers():
    tree = PoolTree(parse_pool_trees({"t": {"pools": {"a": {}}}})["t"])
    core = SchedulerCore(tree)
    core.add_node("n0", vector(user_slots=8, cpu=8, memory=8 * GiB))
    core.register_operation("x", _controller("x", 3), user="u", pool="a")
    core.update_fair_share(0.0)
    first = core.input_resources.resources("x")
    assert first is not None and first[1].tolist() == (JOB * 3).tolist()
    assert core.input_resources.resources("x") is first  # unchanged: the very same object
    controller = core.controllers["x"]
    controller._tasks["main"].pending.pop()  # pending work changes behind the strategy's back
    controller._refresh()
    second = core.input_resources.resources("x")
    assert second is not first and second[1].tolist() == (JOB * 2).tolist()
    # detached: the cached entry (which holds the controller and the runtime) goes; a new controller of the same
    # id is read afresh
    core.detach_controller("x")
    assert "x" not in core.input_resources.cache
    core.attach_controller("x", _controller("x", 5))
    third = core.input_resources.resources("x")
    assert third is not None and third[1].tolist() == (JOB * 5).tolist()
