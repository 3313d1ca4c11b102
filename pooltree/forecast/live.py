"""The live scheduler's state copied into a `ClusterState` (the only place the forecast reads the live service).

`take_state` copies only what the forecast needs: pool tree definitions (the runtime's immutable models), online
nodes, unfinished operations in registration order with their tasks, running jobs (node, start time), completed
run times, starvation clocks and runtime pool, weight and limits. Its cost grows with the operations and their
jobs, never with a simulated hour; the simulation itself runs elsewhere (`pooltree.forecast.worker`). The
scheduler is read through the attributes named in `LiveSchedulerView`, so this module does not import the server.

The copy is made in short holds of the scheduler's lock (``COPY_HOLD``, 2 ms; the first takes the trees, nodes,
integral volumes and the operations' order, each next one as many operations as fit), and lets the lock go
between them as long as it held it: heartbeats parked behind the lock wait at most one hold. A copy in one hold
took 8-70 ms of CPU at 300 nodes and 150 operations (up to 250 ms of wall time on a loaded machine), and every
heartbeat that came meanwhile waited for all of it (`bench/forecast_live.py` attributes slow heartbeats to the
refresh's phases: those overlapping the copy had a p50 of 60-400 ms). Each operation is copied
whole within one hold, so it is consistent with itself; two operations may be copied a few milliseconds apart
(a job that moved between them between two holds shows in both or neither: the fork refuses a placement that does
not fit, `stats["placed_jobs_refused"]`). An operation finished in between is left out.

`SubmissionHistory` keeps the operations submitted (what the arrival model draws from), across copies and between
them through the scheduler's state listener. `DurationHistory` keeps completed run times per pool across copies
(finished operations leave the scheduler's memory, their pool's history stays): a window by start time per pool
(`pooltree.forecast.window`), each job counted once. A task's own run times are the same window over its jobs.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from pooltree.forecast.fork import integral_of
from pooltree.forecast.state import (
    ClusterState,
    NodeState,
    OperationState,
    RunningJob,
    Submission,
    SubmittedTask,
    TaskState,
    TreePlace,
)
from pooltree.forecast.window import StartWindow, start_window
from pooltree.resources import vector

KEPT_DURATIONS = 256
"""Completed run times kept per task and per pool (a window by start time, `pooltree.forecast.window`)."""
SEEN_JOBS = 200_000
"""Job ids remembered so that a completed job enters its pool's history once."""
FORECAST_STATES = ("pending", "running")
KEPT_SUBMISSIONS = 20_000
"""Submissions remembered (the newest)."""
COPY_HOLD = 0.002
"""Seconds one hold of the scheduler's lock may last while a copy is taken (at least one operation per hold)."""
COPY_PAUSE = 0.0005
"""Seconds a copy lets the lock go between two holds at least (else as long as the last hold lasted)."""
SUBMISSION_WINDOW = 7 * 86400.0
"""Seconds of submissions a copy carries at most (the arrival model's own window is at most this long)."""


class LiveSchedulerView(Protocol):
    """What `take_state` reads of ``pooltree.server.live.LiveScheduler``."""

    lock: Any
    registry: Any
    cores: Mapping[str, Any]
    operations: Mapping[str, Any]
    nodes: Mapping[str, Any]
    heartbeat_period: float
    update_period: float


@dataclass
class CopyCost:
    """Where a copy's time went: each hold of the scheduler's lock as (taken, released) on the wall clock
    (``time.time``), and the seconds spent waiting for it."""

    holds: list[tuple[float, float]] = field(default_factory=list)
    waited: float = 0.0

    @property
    def held(self) -> float:
        return sum(end - begin for begin, end in self.holds)

    @property
    def longest_hold(self) -> float:
        return max((end - begin for begin, end in self.holds), default=0.0)


class DurationHistory:
    """Completed job run times per pool, across copies (see the module docstring)."""

    def __init__(self, kept: int = KEPT_DURATIONS) -> None:
        self.kept = kept
        self.pools: dict[str, StartWindow] = {}
        self._seen: OrderedDict[str, None] = OrderedDict()

    def add(self, pool: str, job_id: str, start_time: float, run_time: float) -> None:
        if job_id in self._seen:
            return
        self._seen[job_id] = None
        if len(self._seen) > SEEN_JOBS:
            self._seen.popitem(last=False)
        self.pools.setdefault(pool, StartWindow(self.kept)).add(start_time, run_time)

    def snapshot(self) -> dict[str, tuple[float, ...]]:
        return {pool: window.run_times() for pool, window in self.pools.items()}

    def since(self) -> dict[str, float]:
        """Pool → the start time its window begins at."""
        return {pool: window.since for pool, window in self.pools.items()}


class SubmissionHistory:
    """Operations this scheduler saw submitted, newest last, each once: what future submissions are drawn from
    (`pooltree.forecast.arrivals`). Fed by every copy (the operations it finds) and by the scheduler's state
    listener (an operation that starts and finishes between two copies is seen when its state changes); it
    begins at ``since`` (the service's start: a revived operation submitted earlier is kept but is outside the
    window the rates are measured over)."""

    def __init__(self, since: float, kept: int = KEPT_SUBMISSIONS, window: float = SUBMISSION_WINDOW) -> None:
        self.since = since
        self.window = window
        self.submissions: deque[Submission] = deque(maxlen=kept)
        self._seen: OrderedDict[str, None] = OrderedDict()

    def add(self, op: Any, scheduler: LiveSchedulerView) -> None:
        """Remember ``op`` (a live operation) if it is new (call under the scheduler's lock)."""
        if op.id in self._seen or not op.trees:
            return
        self._seen[op.id] = None
        if len(self._seen) > self.submissions.maxlen * 2:  # type: ignore[operator]
            self._seen.popitem(last=False)
        tree = op.trees[0]
        core = scheduler.cores.get(tree)
        self.submissions.append(
            Submission(
                op.start_time,
                tree,
                op.pools.get(tree, ""),
                op.user,
                op.type,
                tuple(
                    SubmittedTask(name, _task_resources(op, core, name, task, []), task.job_count)
                    for name, task in op.model.tasks.items()
                ),
            )
        )

    def window_of(self, submissions: list[Submission], now: float) -> tuple[Submission, ...]:
        """Of ``submissions`` (a copy of ``submissions`` taken under the scheduler's lock), those of the last
        ``window`` seconds, oldest first."""
        begin = now - self.window
        return tuple(sorted((s for s in submissions if s.time >= begin), key=lambda s: s.time))


def _task_resources(op: Any, core: Any, name: str, task: Any, running: list[Any]) -> Any:
    """One job's resources: what the controller asks for a pending job, else a running job's allocation, else
    the spec's limits."""
    pending = op.controller.pending_task_resources().get(name)
    if pending is not None:
        return np.array(pending, dtype=float)
    for job in running:
        allocation = core.strategy.allocations.get(job.allocation_id) if core is not None else None
        if allocation is not None:
            return np.array(allocation.resources, dtype=float)
    return vector(user_slots=1, cpu=task.cpu_limit, gpu=task.gpu_limit, memory=task.memory_limit)


def _operation_state(
    scheduler: LiveSchedulerView, op: Any, history: DurationHistory
) -> OperationState | None:
    if not op.trees:
        return None
    tree = op.trees[0]
    pool = op.pools.get(tree, "")
    core = scheduler.cores.get(tree)
    by_task: dict[str, tuple[list[Any], list[tuple[float, float]]]] = {}
    first_job: float | None = None
    for job in op.jobs.values():
        if first_job is None or job.start_time < first_job:
            first_job = job.start_time
        running, durations = by_task.setdefault(job.task_name, ([], []))
        if job.state == "running":
            running.append(job)
        elif job.state == "completed" and job.finish_time is not None:
            run_time = max(job.finish_time - job.start_time, 0.0)
            durations.append((job.start_time, run_time))
            history.add(pool, job.id, job.start_time, run_time)
    tasks = []
    for name, task in op.model.tasks.items():
        running, durations = by_task.get(name, ([], []))
        kept, since = start_window(durations, KEPT_DURATIONS)
        interruptible = (task.interruption_signal or op.model.interruption_signal) is not None
        tasks.append(
            TaskState(
                name,
                _task_resources(op, core, name, task, running),
                max(task.job_count - len(durations) - len(running), 0),
                tuple(RunningJob(job.address, job.start_time) for job in running),
                len(durations),
                interruptible,
                task.gang_size,
                kept,
                since,
            )
        )
    per_tree = op.runtime_parameters.get("scheduling_options_per_pool_tree") or {}
    options = per_tree.get(tree) or {}
    others = tuple(
        TreePlace(
            name,
            op.pools.get(name, ""),
            (per_tree.get(name) or {}).get("weight"),
            (per_tree.get(name) or {}).get("resource_limits"),
        )
        for name in op.trees[1:]
    )
    return OperationState(
        op.id,
        op.user,
        op.type,
        op.spec,
        tree,
        pool,
        op.start_time,
        tuple(tasks),
        state=op.state,
        weight=options.get("weight"),
        resource_limits=options.get("resource_limits"),
        first_job_time=first_job,
        below_fair_share_since=_starving_since(scheduler, op, tree),
        suspended=op.suspended,
        revision=op.revision,
        other_trees=others,
    )


class OperationCopies:
    """Each operation's last copy and what it was copied at (`_copy_key`): an operation unchanged since is not
    copied again (its starvation clock, which moves without the operation changing, is read anew). Most of a
    large cluster's operations wait in queues and do not change between two refreshes."""

    def __init__(self) -> None:
        self.kept: dict[str, tuple[Hashable, OperationState]] = {}
        self.reused = 0
        """Operations the last copy took from here."""

    def copy(self, scheduler: LiveSchedulerView, op: Any, history: DurationHistory) -> OperationState | None:
        """``op`` copied (call under the scheduler's lock)."""
        key = _copy_key(op)
        kept = self.kept.get(op.id)
        if kept is None or kept[0] != key:
            found = _operation_state(scheduler, op, history)
            if found is not None:
                self.kept[op.id] = (key, found)
            return found
        found = kept[1]
        since = _starving_since(scheduler, op, found.tree)
        if since != found.below_fair_share_since:
            found = replace(found, below_fair_share_since=since)
            self.kept[op.id] = (key, found)
        self.reused += 1
        return found

    def keep_only(self, operation_ids: set[str]) -> None:
        for gone in [op_id for op_id in self.kept if op_id not in operation_ids]:
            del self.kept[gone]


def _copy_key(op: Any) -> Hashable:
    """What an operation's copy depends on: its change mark (``LiveOperation.change_mark``: the revision, moved
    by every change of its state, jobs and parameters, and its counts) and its trees."""
    return op.change_mark(), tuple(op.trees)


def _starving_since(scheduler: LiveSchedulerView, op: Any, tree: str) -> float | None:
    core = scheduler.cores.get(tree)
    starvation = core.strategy.starvation.get(op.id) if core is not None else None
    return None if starvation is None else starvation.below_fair_share_since


def take_state(
    scheduler: LiveSchedulerView,
    history: DurationHistory,
    now: float,
    submissions: SubmissionHistory | None = None,
    cost: CopyCost | None = None,
    hold: float = COPY_HOLD,
    copies: OperationCopies | None = None,
) -> ClusterState:
    """The live cluster at ``now`` (call without holding the scheduler's lock: it takes it, in short holds, see the
    module docstring); ``submissions``: the submission history the copy adds its operations to and carries (None:
    no arrivals are drawn); ``cost``: where the lock's holds are noted; ``hold``: seconds one hold may last (at
    least one operation is copied per hold); ``copies``: the last copies of operations, reused where unchanged
    (None: every operation copied anew). Copies that share ``history`` or ``copies`` must not run at once."""
    cost = CopyCost() if cost is None else cost
    copies = OperationCopies() if copies is None else copies
    copies.reused = 0
    with _holding(scheduler, cost):
        registry = scheduler.registry
        definitions = {name: tree.definition for name, tree in registry.trees.items()}
        default_tree = registry.default_tree
        nodes = tuple(
            NodeState(node.address, np.array(node.resource_limits, dtype=float), frozenset(node.tags))
            for node in scheduler.nodes.values()
        )
        order = sorted(scheduler.operations.values(), key=lambda op: (op.start_time, op.id))
        integral = {
            name: found for name, core in scheduler.cores.items() if (found := integral_of(core)) is not None
        }
    operations: list[OperationState] = []
    index = 0
    while index < len(order):
        _pause(cost)
        with _holding(scheduler, cost):
            deadline = time.perf_counter() + hold
            while index < len(order):
                op = order[index]
                index += 1
                if scheduler.operations.get(op.id) is not op:
                    continue  # finished and forgotten since the first hold
                if submissions is not None:
                    submissions.add(op, scheduler)
                if op.state in FORECAST_STATES and (found := copies.copy(scheduler, op, history)) is not None:
                    operations.append(found)
                if time.perf_counter() >= deadline:
                    break
    copies.keep_only({op.id for op in operations})
    submitted: list[Submission] = []
    if submissions is not None:
        _pause(cost)
        with _holding(scheduler, cost):  # the state listener appends under the lock
            submitted = list(submissions.submissions)
    return ClusterState(
        now,
        definitions,
        default_tree,
        nodes,
        tuple(operations),
        fair_share_update_period=scheduler.update_period,
        heartbeat_period=scheduler.heartbeat_period,
        pool_durations=history.snapshot(),
        pool_durations_since=history.since(),
        integral=integral,
        submissions=() if submissions is None else submissions.window_of(submitted, now),
        submissions_since=None if submissions is None else submissions.since,
    )


@contextlib.contextmanager
def _holding(scheduler: LiveSchedulerView, cost: CopyCost) -> Iterator[None]:
    """One hold of the scheduler's lock, noted in ``cost``."""
    asked = time.time()
    with scheduler.lock:
        taken = time.time()
        try:
            yield
        finally:
            cost.waited += taken - asked
            cost.holds.append((taken, time.time()))


def _pause(cost: CopyCost) -> None:
    """Between two holds: as long as the last one lasted (at least ``COPY_PAUSE``), so that the heartbeats and
    commands that waited for the lock run first (they are parked until it is released; the copy would otherwise
    take it again before their thread got the interpreter)."""
    if cost.holds:
        begin, end = cost.holds[-1]
        time.sleep(max(end - begin, COPY_PAUSE))


def submitted_operation(
    operation_id: str,
    user: str,
    operation_type: str,
    spec: Mapping[str, Any],
    model: Any,
    controller: Any,
    pools: Mapping[str, str],
    now: float,
) -> OperationState:
    """A start that has passed every check but was not made (a dry run), as the operation it would be now: in its
    trees and pools (``pools``: tree → pool, in the start's order), all jobs pending, submitted last."""
    tree = next(iter(pools))
    per_tree = spec.get("scheduling_options_per_pool_tree")

    def limits_in(name: str) -> dict[str, float] | None:
        options = per_tree.get(name) if isinstance(per_tree, Mapping) else None
        limits = options.get("resource_limits") if isinstance(options, Mapping) else None
        return dict(limits) if isinstance(limits, Mapping) else None

    per_job = controller.pending_task_resources()
    tasks = tuple(
        TaskState(
            name,
            np.array(per_job[name], dtype=float),
            task.job_count,
            interruptible=(task.interruption_signal or model.interruption_signal) is not None,
            gang_size=task.gang_size,
        )
        for name, task in model.tasks.items()
    )
    return OperationState(
        operation_id,
        user,
        operation_type,
        dict(spec),
        tree,
        pools[tree],
        now,
        tasks,
        state="pending",
        weight=model.weight_for_tree(tree),
        resource_limits=limits_in(tree),
        other_trees=tuple(
            TreePlace(name, pool, model.weight_for_tree(name), limits_in(name))
            for name, pool in list(pools.items())[1:]
        ),
    )


def tree_limitation(trees: Sequence[str], found: Any) -> dict[str, Any] | None:
    """What the forecast ``found`` of an operation in ``trees`` leaves out, as the attribute's ``limitation``
    (None: nothing).

    The simulator schedules an operation of several pool trees in each of them, as the live service does. Past
    the simulated part (``found.simulated`` of ``found.horizon``: the CPU budget ran out) the capacity hand-over
    (`pooltree.forecast.tail`) carries the runs; it starts such an operation's new jobs in its first tree only
    (its jobs already running elsewhere hold their trees' capacity until they end), so past that point it may
    start and finish earlier than forecast."""
    if len(trees) < 2 or found is None or found.simulated is None or found.simulated >= found.horizon:
        return None
    first, others = trees[0], list(trees[1:])
    return {
        "reason": "multiple_pool_trees_past_simulated_horizon",
        "forecast_pool_tree": first,
        "pool_trees_not_forecast": others,
        "simulated_horizon": found.simulated,
        "message": f"The operation runs in pool trees {', '.join(trees)}; the forecast schedules it in each for "
        f"the first {found.simulated:.0f} s of its {found.horizon:.0f} s horizon, and after that in {first} only "
        f"(the capacity hand-over): its new jobs in {', '.join(others)} after that are not forecast, so it may "
        "start and finish earlier than forecast",
    }


def count_limit_holder(scheduler: LiveSchedulerView, tree: str, pool: str) -> dict[str, Any] | None:
    """The first pool on the path of ``pool`` whose running operations are at its ``max_running_operation_count``
    (a new operation there would wait in its queue), or None."""
    with scheduler.lock:
        pool_tree = scheduler.registry.trees.get(tree)
        element = None if pool_tree is None else pool_tree.pools.get(pool)
        while element is not None and not element.is_root:
            limit = element.max_running_operation_count
            if limit is not None and element.running_operation_count >= limit:
                return {
                    "reason": "max_running_operation_count",
                    "message": f'Pool "{element.name}" runs {element.running_operation_count} operations, its '
                    f"max_running_operation_count is {limit}: the operation would wait in its queue",
                    "pool": element.name,
                }
            element = element.parent
    return None
