"""Revived jobs reserved for their nodes (``LiveVanillaController``): the demand the controller reports without
walking its reserved jobs is the walk's, bit for bit, over random revivals, confirmations, releases, starts,
finishes and restart reserves; and revival marks an operation's jobs in one pass with one refresh.

A restarted scheduler holds every running job reserved until its node confirms it; each confirmation and release
refreshed the operation's counts by walking all its reserved jobs, and revival scanned the pending queue per job
record: at 10,000 nodes (40,000 running jobs) the restarted scheduler answered about a tenth of the heartbeats
40 s after its restart (``bench/live_restart.py``)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pooltree.config import OperationSpec
from pooltree.controllers.memory import RestartReserve
from pooltree.controllers.operations import Job, VanillaController
from pooltree.resources import vector
from pooltree.server.live.model import LiveVanillaController, build_tasks
from pooltree.strategy import ExecNode, FinishedAllocation

SPEC = {
    "tasks": {
        "a": {"command": "true", "job_count": 12, "cpu_limit": 1, "memory_limit": 2**30},
        "b": {"command": "true", "job_count": 8, "cpu_limit": 0.5, "memory_limit": 3 * 2**29},
        "c": {"command": "true", "job_count": 2, "cpu_limit": 2, "memory_limit": 2**31},
    }
}
NODES = ["n0", "n1", "n2"]


class WalkingController(LiveVanillaController):
    """The reference: the refresh that walks every reserved job (the code before), and the scan per revived job."""

    def _refresh(self) -> None:
        VanillaController._refresh(self)
        if not self._reserved:
            return
        had_pending = self._pending_count > 0
        for jobs in self._reserved.values():
            for job, _ in jobs.values():
                resources = self._allocation_resources(self._tasks[job.task], job)
                self._pending_count += 1
                self._needed_cache = VanillaController._needed.fget(self) + resources  # type: ignore[attr-defined]
                self._min_needed = (
                    np.minimum(self._min_needed, resources) if had_pending else resources.copy()
                )
                had_pending = True

    @property
    def _needed(self) -> Any:
        return VanillaController._needed.fget(self)  # type: ignore[attr-defined]

    @_needed.setter
    def _needed(self, value: Any) -> None:
        self._needed_cache = value

    def reviving(self) -> AbstractContextManager[None]:  # type: ignore[override]
        return nullcontext()


def _pair() -> tuple[LiveVanillaController, WalkingController]:
    model = OperationSpec.parse(SPEC, "spec")
    return (
        LiveVanillaController("op", build_tasks("op", model)),
        WalkingController("op", build_tasks("op", model)),
    )


def _state(controller: LiveVanillaController) -> tuple[Any, ...]:
    return (
        controller._pending_count,
        controller.pending_allocation_count,
        controller._min_needed.tobytes(),
        controller._needed.tobytes(),
        {task: [job.index for job in state.pending] for task, state in controller._tasks.items()},
        {node: list(jobs) for node, jobs in controller._reserved.items()},
    )


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["confirm", "release", "start", "finish", "restart_reserve", "adopt_finished"]),
        st.integers(0, len(NODES) - 1),
        st.integers(0, 40),
    ),
    max_size=30,
)
REVIVED = st.lists(
    st.tuples(
        st.sampled_from(["completed", "running"]), st.sampled_from(["a", "b", "c"]), st.integers(0, 12)
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(revived=REVIVED, node_of=st.lists(st.integers(0, 2), min_size=25, max_size=25), steps=STEPS)
def test_the_reserved_jobs_demand_is_the_walks(
    revived: list[tuple[str, str, int]], node_of: list[int], steps: list[tuple[str, int, int]]
) -> None:
    controllers = _pair()
    for controller in controllers:
        with controller.reviving():
            for n, (state, task, index) in enumerate(revived):
                if state == "completed":
                    controller.mark_completed(task, index)
                else:
                    controller.reserve(NODES[node_of[n]], task, index, f"j-{task}-{index}-{n}", float(n))
    assert _state(controllers[0]) == _state(controllers[1])
    running: list[list[Any]] = [[], []]
    for step, (kind, node, value) in enumerate(steps):
        address = NODES[node]
        exec_node = ExecNode(address, vector(user_slots=64, cpu=64, memory=2**40))
        for side, controller in enumerate(controllers):
            if (
                kind == "confirm"
            ):  # the node's heartbeat: its reserved jobs (else a new one) through the stages
                allocation = controller.schedule_allocation(
                    exec_node, exec_node.resource_limits, 100.0 + step
                )
                if allocation is not None:
                    running[side].append(allocation)
            elif kind == "release":
                ids = sorted(controller.reserved_job_ids(address))
                controller.release(address, keep=frozenset(ids[: value % (len(ids) + 1)]))
            elif kind == "start":
                allocation = controller.schedule_allocation(
                    exec_node, exec_node.resource_limits, 100.0 + step
                )
                if allocation is not None:
                    running[side].append(allocation)
            elif kind == "finish" and running[side]:
                allocation = running[side].pop(value % len(running[side]))
                state = "completed" if value % 3 else "aborted"
                controller.on_allocation_finished(
                    allocation, FinishedAllocation(allocation.id, state), 200.0 + step
                )
            elif (
                kind == "restart_reserve"
            ):  # a dedicated restart reserve (as after an overdraft), mostly for a
                # reserved job, lower or higher than a new job's
                keys = sorted(key for jobs in controller._reserved.values() for key in jobs)
                task, index = keys[value % len(keys)] if keys and value % 4 else ("a", value % 12)
                reserve = controller._tasks[task].spec.memory_reserve
                assert reserve is not None
                reserve._restarts[(task, index)] = RestartReserve(0.1 + (value % 15) / 10, None, 1)
                controller._refresh()
            elif kind == "adopt_finished":
                ids = sorted(controller.reserved_job_ids(address))
                if ids:
                    allocation = controller.adopt_finished(address, ids[value % len(ids)], 150.0 + step)
                    if allocation is not None:
                        controller.on_allocation_finished(
                            allocation, FinishedAllocation(allocation.id, "completed"), 150.0 + step
                        )
        assert _state(controllers[0]) == _state(controllers[1]), (step, kind)


def test_revival_marks_an_operation_s_jobs_with_one_refresh(monkeypatch: Any) -> None:
    """Revival of an operation with many records refreshes its counts once and reads its pending queue once."""
    model = OperationSpec.parse(
        {"tasks": {"a": {"command": "true", "job_count": 400, "cpu_limit": 1}}}, "spec"
    )
    controller = LiveVanillaController("op", build_tasks("op", model))
    refreshes = []
    refresh = VanillaController._refresh
    monkeypatch.setattr(VanillaController, "_refresh", lambda self: refreshes.append(1) or refresh(self))
    with controller.reviving():
        for index in range(0, 400, 2):
            controller.mark_completed("a", index)
        for index in range(1, 400, 2):
            assert controller.reserve(NODES[index % 3], "a", index, f"j{index}", 1.0)
        assert not controller.reserve("n0", "a", 1, "again", 1.0)  # taken once
    assert len(refreshes) == 1
    assert controller.pending_allocation_count == 200  # the reserved jobs are demand
    assert controller.completed_job_count == 200
    assert [job.index for job in controller._tasks["a"].pending] == []


def test_a_task_reserved_whole_with_and_without_restart_reserves() -> None:
    """Every pending job of the operation reserved, one of them with a restart reserve above a new job's and one
    below: the minimum is over both kinds, as the walk's."""
    spec = {"tasks": {"a": {"command": "true", "job_count": 3, "cpu_limit": 1, "memory_limit": 2**30}}}
    model = OperationSpec.parse(spec, "spec")
    controllers = (
        LiveVanillaController("op", build_tasks("op", model)),
        WalkingController("op", build_tasks("op", model)),
    )
    for factors in ((1.5, None), (0.1, None), (1.5, 0.1)):
        states = []
        for controller in controllers:
            with controller.reviving():
                for index in range(3):
                    controller.reserve("n0", "a", index, f"j{index}", 1.0)
            reserve = controller._tasks["a"].spec.memory_reserve
            assert reserve is not None
            reserve._restarts.clear()
            for index, factor in enumerate(factors):
                if factor is not None:
                    reserve._restarts[("a", index)] = RestartReserve(factor, None, 1)
            controller._refresh()
            states.append(_state(controller))
            controller.release("n0")
        assert states[0] == states[1], factors


@settings(max_examples=60, deadline=None)
@given(
    extra=st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3), st.booleans()), max_size=12),
    revived=st.lists(
        st.tuples(st.sampled_from(["completed", "running"]), st.sampled_from(["a", "b"]), st.integers(0, 3)),
        max_size=12,
    ),
)
@example(extra=[("a", 1, False), ("a", 1, True)], revived=[("running", "a", 1)] * 3 + [("completed", "a", 1)])
def test_revival_of_a_queue_that_repeats_an_index_is_the_scans(
    extra: list[tuple[str, int, bool]], revived: list[tuple[str, str, int]]
) -> None:
    """A pending queue that holds an index more than once (a job put back, a part of a split job): revival takes
    each index's jobs in queue order and leaves the rest in order, as the scan per record does (`reviving`'s
    second index); a queue with one job per index is left as the scan leaves it too (the first test)."""
    controllers = _pair()
    for controller in controllers:
        for n, (task, index, front) in enumerate(extra):
            job = Job(task, index, fraction=1.0 / (n + 2))
            pending = controller._tasks[task].pending
            pending.appendleft(job) if front else pending.append(job)
        controller._refresh()
        with controller.reviving():
            for n, (state, task, index) in enumerate(revived):
                if state == "completed":
                    controller.mark_completed(task, index)
                else:
                    controller.reserve(f"n{n}", task, index, f"j-{task}-{index}-{n}", float(n))

    def jobs(controller: LiveVanillaController) -> Any:
        pending = {
            task: [(j.index, j.fraction) for j in state.pending] for task, state in controller._tasks.items()
        }
        reserved = {
            (node, key): (job.index, job.fraction)
            for node, held in controller._reserved.items()
            for key, (job, _) in held.items()
        }
        return pending, reserved, controller.completed_job_count

    assert _state(controllers[0]) == _state(controllers[1])
    assert jobs(controllers[0]) == jobs(controllers[1])
