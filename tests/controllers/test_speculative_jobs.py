"""Speculative jobs in the controllers and the strategy (YTsaurus's speculative job manager, restated).

Each test drives a real ``SchedulerCore`` with real controllers: heartbeats start jobs, the period's check
requests copies of jobs past ``job_speculation_timeout``, node reports end them.
"""

from __future__ import annotations

import numpy as np
import pytest

from pooltree.config import OperationSpec, parse_pool_trees
from pooltree.config.support import feature_unsupported_options, unsupported_spec_options
from pooltree.controllers.operations import TaskSpec, make_controller
from pooltree.controllers.speculative import speculation_from_spec
from pooltree.errors import ConfigError
from pooltree.resources import vector
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.model import FinishedAllocation, NodeHeartbeat
from pooltree.tree import PoolTree

NODE = vector(user_slots=4, cpu=4, memory=8 * 1024**3)


def _core(spec: dict, *, job_count: int = 1, nodes: int = 2, operation_type: str = "vanilla"):
    core = SchedulerCore(PoolTree(parse_pool_trees({"t": {"pools": {"a": {}}}})["t"]))
    for index in range(nodes):
        core.add_node(f"n{index}", NODE)
    model = OperationSpec.parse({"pool": "a", **spec}, "spec")
    tasks = [TaskSpec("main", job_count, vector(user_slots=1, cpu=1, memory=1024**3))]
    controller = make_controller("op", operation_type, tasks)
    controller.speculation = speculation_from_spec(model, tasks)
    core.register_operation("op", controller, user="u", operation_type=operation_type, spec=model, now=0.0)
    core.update_fair_share(0.0)
    return core, controller


def _beat(core: SchedulerCore, node: str, now: float, finished=()):
    return core.process_heartbeat(NodeHeartbeat(node, NODE, finished=list(finished)), now)


def _copy_started(core: SchedulerCore, now: float, node: str = "n1"):
    assert core.launch_speculative_jobs(now) == ["op"]
    core.update_fair_share(now)
    result = _beat(core, node, now)
    assert len(result.allocations_to_start) == 1
    return result.allocations_to_start[0]


def test_a_job_past_its_timeout_gets_one_copy_and_the_copy_wins() -> None:
    core, controller = _core({"job_speculation_timeout": 10_000})
    original = _beat(core, "n0", 1.0).allocations_to_start[0]
    assert core.launch_speculative_jobs(5.0) == []  # not yet past the timeout
    assert controller.pending_allocation_count == 0
    assert core.launch_speculative_jobs(11.0) == ["op"]
    assert controller.pending_allocation_count == 1  # the requested copy is demand
    assert core.launch_speculative_jobs(12.0) == []  # one copy per job
    core.update_fair_share(11.0)
    copy = _beat(core, "n1", 11.0).allocations_to_start[0]
    assert copy.payload.speculative and copy.payload.index == original.payload.index
    assert controller.progress()["running_job_count"] == 2
    # the copy completes first: the original is aborted with speculative_run_won, on its node's next heartbeat
    result = _beat(core, "n1", 12.0, [FinishedAllocation(copy.id, "completed")])
    assert not result.allocations_to_preempt  # the loser is on n0
    stop = _beat(core, "n0", 12.5).allocations_to_preempt
    assert [(r.allocation_id, r.reason.value, r.timeout) for r in stop] == [
        (original.id, "speculative_run_won", 0.0)
    ]
    assert not controller.is_completed  # the loser still runs until its node reports it
    _beat(core, "n0", 13.0, [FinishedAllocation(original.id, "aborted")])
    progress = controller.progress()
    assert controller.is_completed
    assert progress["completed_job_count"] == 1  # never both results
    assert progress["aborted_job_count_by_reason"] == {"speculative_run_won": 1}
    assert progress["preempted_job_count"] == 0
    assert progress["speculative_job_counter"] == {
        "main": {"pending": 0, "running": 0, "completed": 1, "aborted": 0, "failed": 0}
    }


def test_the_original_winning_aborts_the_copy_with_speculative_run_lost() -> None:
    core, controller = _core({"job_speculation_timeout": 10_000})
    original = _beat(core, "n0", 0.0).allocations_to_start[0]
    copy = _copy_started(core, 10.0)
    result = _beat(core, "n1", 11.0, [])
    assert not result.allocations_to_preempt
    _beat(core, "n0", 11.0, [FinishedAllocation(original.id, "completed")])
    stop = _beat(core, "n1", 12.0).allocations_to_preempt
    assert [(r.allocation_id, r.reason.value) for r in stop] == [(copy.id, "speculative_run_lost")]
    # the copy happens to complete before the stop reached it: still an abort, never a second completion
    _beat(core, "n1", 12.5, [FinishedAllocation(copy.id, "completed")])
    assert controller.completed_job_count == 1
    assert dict(controller.aborted_job_count_by_reason) == {"speculative_run_lost": 1}
    assert controller.is_completed


def test_a_failed_copy_leaves_the_original_running_and_counts_as_failed() -> None:
    core, controller = _core({"job_speculation_timeout": 10_000})
    original = _beat(core, "n0", 0.0).allocations_to_start[0]
    copy = _copy_started(core, 10.0)
    _beat(core, "n1", 11.0, [FinishedAllocation(copy.id, "failed")])
    assert controller.failed_job_count == 1
    assert controller.pending_allocation_count == 0  # the original carries on with the job
    assert controller.running_allocation_count == 1
    # the pair broke up: the original, still past its timeout, may get a new copy
    assert core.launch_speculative_jobs(12.0) == ["op"]
    core.update_fair_share(12.0)
    again = _beat(core, "n1", 12.0).allocations_to_start
    assert len(again) == 1 and again[0].payload.speculative
    _beat(core, "n0", 13.0, [FinishedAllocation(original.id, "completed")])
    _beat(core, "n1", 14.0, [FinishedAllocation(again[0].id, "aborted")])
    assert controller.completed_job_count == 1 and controller.is_completed


def test_an_aborted_original_hands_the_job_to_its_copy() -> None:
    core, controller = _core({"job_speculation_timeout": 10_000})
    original = _beat(core, "n0", 0.0).allocations_to_start[0]
    copy = _copy_started(core, 10.0)
    _beat(core, "n0", 11.0, [FinishedAllocation(original.id, "aborted", abort_reason="other")])
    assert controller.pending_allocation_count == 0  # not returned to pending: the copy runs it
    _beat(core, "n1", 12.0, [FinishedAllocation(copy.id, "completed")])
    assert controller.completed_job_count == 1 and controller.is_completed
    assert dict(controller.aborted_job_count_by_reason) == {"other": 1}


def test_the_last_competitor_failing_returns_the_job_to_pending() -> None:
    core, controller = _core({"job_speculation_timeout": 10_000})
    original = _beat(core, "n0", 0.0).allocations_to_start[0]
    copy = _copy_started(core, 10.0)
    core.on_allocation_finished(FinishedAllocation(copy.id, "failed"), 11.0)
    core.on_allocation_finished(FinishedAllocation(original.id, "failed"), 12.0)
    assert controller.failed_job_count == 2
    assert controller.pending_allocation_count == 1
    assert controller.running_allocation_count == 0


def test_a_request_is_cancelled_when_the_original_ends_first() -> None:
    core, controller = _core({"job_speculation_timeout": 10_000})
    original = _beat(core, "n0", 0.0).allocations_to_start[0]
    assert core.launch_speculative_jobs(10.0) == ["op"]
    assert controller.pending_allocation_count == 1
    _beat(core, "n0", 10.5, [FinishedAllocation(original.id, "completed")])
    assert controller.pending_allocation_count == 0
    assert controller.is_completed


def test_the_cap_counts_requests_in_flight_per_task() -> None:
    core, controller = _core(
        {"job_speculation_timeout": 10_000, "max_speculative_job_count_per_task": 1}, job_count=3
    )
    originals = _beat(core, "n0", 0.0).allocations_to_start
    assert len(originals) == 3
    assert core.launch_speculative_jobs(10.0) == ["op"]
    assert controller.pending_allocation_count == 1  # one of three: the cap is 1
    core.update_fair_share(10.0)
    copy = _beat(core, "n1", 10.0).allocations_to_start[0]
    assert core.launch_speculative_jobs(11.0) == []  # the running pair still counts
    # the pair ends (the copy wins, the original is stopped and reports): room for the next held-back job
    _beat(core, "n1", 12.0, [FinishedAllocation(copy.id, "completed")])
    assert core.launch_speculative_jobs(12.5) == []  # the loser has not ended yet
    loser = next(a for a in originals if a.payload.index == copy.payload.index)
    _beat(core, "n0", 13.0, [FinishedAllocation(loser.id, "aborted")])
    assert core.launch_speculative_jobs(13.5) == ["op"]
    assert controller.pending_allocation_count == 1


def test_a_task_speculates_only_when_no_regular_job_is_pending() -> None:
    core, _controller = _core({"job_speculation_timeout": 10_000}, job_count=6, nodes=1)
    started = _beat(core, "n0", 0.0).allocations_to_start
    assert len(started) == 4  # two regular jobs wait
    assert core.launch_speculative_jobs(10.0) == ["op"]
    core.on_allocation_finished(FinishedAllocation(started[0].id, "completed"), 10.5)
    core.update_fair_share(10.5)
    nxt = _beat(core, "n0", 11.0).allocations_to_start
    assert [a.payload.speculative for a in nxt] == [False]  # a regular pending job first


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"job_speculation_timeout": 10_000, "max_speculative_job_count_per_task": 0},
        {"job_speculation_timeout": 10_000, "try_avoid_duplicating_jobs": True},
    ],
)
def test_no_timeout_or_no_room_means_no_speculation(spec: dict) -> None:
    core, controller = _core(spec)
    _beat(core, "n0", 0.0)
    assert controller.speculation is None
    assert core.launch_speculative_jobs(1_000.0) == []
    assert controller.pending_allocation_count == 0


def test_a_user_job_timeout_overrides_the_specs() -> None:
    model = OperationSpec.parse(
        {
            "job_speculation_timeout": 100_000,
            "tasks": {
                "fast": {"command": "x", "job_count": 1, "job_speculation_timeout": "5s"},
                "slow": {"command": "x", "job_count": 1},
            },
        },
        "spec",
    )
    tasks = [TaskSpec(name, 1, vector(user_slots=1)) for name in ("fast", "slow")]
    speculation = speculation_from_spec(model, tasks)
    assert speculation is not None and speculation.timeouts == {"fast": 5.0, "slow": 100.0}


def test_gang_tasks_never_speculate() -> None:
    model = OperationSpec.parse({"job_speculation_timeout": 1000}, "spec")
    assert speculation_from_spec(model, [TaskSpec("main", 2, vector(user_slots=1), gang_size=2)]) is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"job_speculation_timeout": -5}, "spec.job_speculation_timeout"),
        ({"job_speculation_timeout": "soon"}, "spec.job_speculation_timeout"),
        ({"max_speculative_job_count_per_task": -1}, "spec.max_speculative_job_count_per_task"),
        ({"max_speculative_job_count_per_task": "many"}, "spec.max_speculative_job_count_per_task"),
        ({"try_avoid_duplicating_jobs": "maybe"}, "spec.try_avoid_duplicating_jobs"),
        (
            {"tasks": {"t": {"command": "x", "job_count": 1, "job_speculation_timeout": [1]}}},
            "spec.tasks.t.job_speculation_timeout",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_field(spec: dict, field: str) -> None:
    with pytest.raises(ConfigError) as error:
        OperationSpec.parse(spec, "spec")
    assert field in str(error.value)


def test_the_options_are_no_longer_reported_unsupported_or_unrecognized() -> None:
    model = OperationSpec.parse(
        {
            "job_speculation_timeout": 1000,
            "max_speculative_job_count_per_task": 3,
            "try_avoid_duplicating_jobs": False,
        },
        "spec",
    )
    assert unsupported_spec_options(model) == []
    assert model.unrecognized_spec() == {}
    assert "max_speculative_job_count_per_task" not in feature_unsupported_options()["spec"]


def test_a_map_operation_speculates_too() -> None:
    core, controller = _core({"job_speculation_timeout": 10_000}, operation_type="map")
    original = _beat(core, "n0", 0.0).allocations_to_start[0]
    copy = _copy_started(core, 10.0)
    _beat(core, "n1", 11.0, [FinishedAllocation(copy.id, "completed")])
    _beat(core, "n0", 12.0, [FinishedAllocation(original.id, "aborted")])
    assert controller.completed_job_count == 1 and controller.is_completed
    assert np.isclose(controller.processed_fraction_pending, 0.0)
