"""Cluster states taken from a running simulation: the back-test's "live cluster" (bench/forecast_backtest.py).

A `SimulationRecorder` is the simulation's event sink: it remembers when each operation's first job started and
the run times of completed jobs per (operation, task) and per pool, as the live service remembers them from its
nodes' reports. `state_of` reads one moment of the simulation (from a progress callback) into a
`ClusterState`, the same shape the live service's state has, so the forecast under test cannot see anything a
live forecast would not see: not the workload's true duration distributions, not future submissions.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from pooltree.forecast.fork import integral_of
from pooltree.forecast.state import (
    ClusterState,
    NodeState,
    OperationState,
    RunningJob,
    Submission,
    SubmittedTask,
    TaskState,
)
from pooltree.forecast.window import StartWindow
from pooltree.sim.engine import Simulation

KEPT_DURATIONS = 256
"""Completed run times kept per (operation, task) and per pool (a window by start, `pooltree.forecast.window`)."""
KEPT_SUBMISSIONS = 20_000
"""Submissions remembered (the newest): what a forecast draws future submissions from."""


class SimulationRecorder:
    """Event sink of a simulation: first job starts and completed job run times (see the module docstring)."""

    def __init__(self) -> None:
        self.simulation: Simulation | None = None
        self.first_start: dict[str, float] = {}
        self.completed: dict[tuple[str, str], int] = {}
        self.durations: dict[tuple[str, str], StartWindow] = {}
        self.pool_durations: dict[str, StartWindow] = {}
        self.submitted: dict[str, float] = {}
        self.submissions: deque[Submission] = deque(maxlen=KEPT_SUBMISSIONS)
        self._ops: dict[str, Any] = {}

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "allocation_started":
            self.first_start.setdefault(event["operation_id"], event["time"])
        elif kind == "operation_submitted":
            self.submitted[event["operation_id"]] = event["time"]
            self._submission(event)
        elif (
            kind == "allocation_finished"
            and event.get("state") == "completed"
            and event.get("reason") is None
        ):
            simulation = self.simulation
            job = simulation.jobs.get(event["allocation_id"]) if simulation is not None else None
            if job is None:
                return
            key = (event["operation_id"], job.task.name)
            self.completed[key] = self.completed.get(key, 0) + 1
            run_time = event["time"] - job.start
            self.durations.setdefault(key, StartWindow(KEPT_DURATIONS)).add(job.start, run_time)
            self.pool_durations.setdefault(job.op.pool, StartWindow(KEPT_DURATIONS)).add(job.start, run_time)

    def _submission(self, event: dict[str, Any]) -> None:
        simulation = self.simulation
        if simulation is None:
            return
        if not self._ops:
            self._ops = {op.spec.id: op for op in simulation.ops}
        op = self._ops.get(event["operation_id"])
        if op is None:
            return
        spec = op.spec
        self.submissions.append(
            Submission(
                event["time"],
                event["tree"],
                event["pool"],
                spec.user,
                spec.type,
                tuple(SubmittedTask(task.name, task.resources, task.job_count) for task in spec.tasks),
            )
        )


def state_of(simulation: Simulation, recorder: SimulationRecorder) -> ClusterState:
    """The simulation's cluster at its current time, as a live forecast would see it."""
    scenario = simulation.scenario
    running: dict[tuple[str, str], list[RunningJob]] = {}
    for job in sorted(simulation.jobs.values(), key=lambda job: job.serial):
        if job.allocation.preempted:
            continue
        running.setdefault((job.op.spec.id, job.task.name), []).append(
            RunningJob(job.node.address, job.start)
        )
    operations = []
    for op in simulation.ops:
        if op.state not in ("running", "pending"):
            continue
        tasks = []
        for task in op.spec.tasks:
            key = (op.spec.id, task.name)
            jobs = tuple(running.get(key, ()))
            completed = recorder.completed.get(key, 0)
            window = recorder.durations.get(key)
            tasks.append(
                TaskState(
                    task.name,
                    task.resources,
                    max(task.job_count - completed - len(jobs), 0),
                    jobs,
                    completed,
                    task.interruptible,
                    task.gang_size,
                    () if window is None else window.run_times(),
                    -math.inf if window is None else window.since,
                )
            )
        core = simulation.trees[op.tree].core
        starvation = core.strategy.starvation.get(op.spec.id)
        operations.append(
            OperationState(
                op.spec.id,
                op.spec.user,
                op.spec.type,
                op.spec.raw_spec,
                op.tree,
                op.pool,
                recorder.submitted.get(op.spec.id, op.spec.submit_time),
                tuple(tasks),
                state=op.state,
                first_job_time=recorder.first_start.get(op.spec.id),
                below_fair_share_since=None if starvation is None else starvation.below_fair_share_since,
            )
        )
    return ClusterState(
        simulation.now,
        scenario.snapshot.pool_trees,
        scenario.snapshot.default_pool_tree,
        tuple(NodeState(node.address, node.limits, node.tags) for node in simulation.nodes if node.alive),
        tuple(operations),
        fair_share_update_period=scenario.scheduler.fair_share_update_period,
        heartbeat_period=scenario.scheduler.node_heartbeat_period,
        pool_durations={pool: window.run_times() for pool, window in recorder.pool_durations.items()},
        pool_durations_since={pool: window.since for pool, window in recorder.pool_durations.items()},
        integral={
            name: found
            for name, tree in simulation.trees.items()
            if (found := integral_of(tree.core)) is not None
        },
        submissions=tuple(recorder.submissions),
        submissions_since=0.0,
    )
