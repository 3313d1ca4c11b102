"""Operation controllers: vanilla and map-like operations behind the interface the strategy calls.

The strategy asks a controller for one allocation that fits what a node offers
(``schedule_allocation(node, available_resources, now)``) and reports back when the allocation ends
(``on_allocation_finished``). Controllers own the job bookkeeping:

* **vanilla**: tasks of ``job_count`` long-running jobs; a job that was aborted or preempted is restarted
  (returns to pending); the operation completes when every job completed on its own.
* **map-like**: a pool of pending jobs over input; an interrupted job that completes early hands the unprocessed
  part of its input back as a new pending job; an aborted or failed job returns to pending whole.

An allocation's memory is the task's memory unless the task carries a
:class:`~pooltree.controllers.memory.TaskMemoryReserve`, whose reserve then defines the memory demand.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np

from pooltree.controllers.memory import RESOURCE_OVERDRAFT, TaskMemoryReserve
from pooltree.controllers.speculative import (
    DROPPED,
    LOST,
    SPECULATIVE_RUN_LOST,
    SPECULATIVE_RUN_WON,
    SpeculativeJobs,
)
from pooltree.errors import ConfigError, PooltreeError, join_path
from pooltree.resources import MEMORY, RESOURCE_COUNT, Vector, parse_resources
from pooltree.strategy.model import Allocation, ExecNode, FinishedAllocation
from pooltree.strategy.shares import fits_floats


@dataclass
class TaskSpec:
    """One task (job type) of an operation: how many jobs and what each job's allocation needs."""

    name: str
    job_count: int
    resources: Vector
    interruptible: bool = False
    memory_reserve: TaskMemoryReserve | None = None
    duration: Any = None
    gang_size: int | None = None
    """A vanilla task with YTsaurus ``gang_options``: how many of its jobs hold a gang rank (``gang_options.size``,
    else ``job_count``); ``None``: not a gang task. Losing a ranked job restarts the whole operation's jobs."""
    restart_completed: bool = False
    """A vanilla task's ``restart_completed_jobs``: a completed job is started again (counted lost)."""

    def __post_init__(self) -> None:
        self.resources = np.asarray(self.resources, dtype=float)
        if (
            self.resources.shape != (RESOURCE_COUNT,)
            or np.any(self.resources < 0)
            or np.any(~np.isfinite(self.resources))
        ):
            raise ConfigError(f"tasks.{self.name}.resources", "must be 5 finite non-negative amounts")
        if isinstance(self.job_count, bool) or not isinstance(self.job_count, int) or self.job_count < 0:
            raise ConfigError(
                f"tasks.{self.name}.job_count", f"must be a non-negative integer, got {self.job_count!r}"
            )
        if self.gang_size is not None and (
            isinstance(self.gang_size, bool)
            or not isinstance(self.gang_size, int)
            or not 1 <= self.gang_size <= max(self.job_count, 1)
        ):
            raise ConfigError(
                f"tasks.{self.name}.gang_options.size",
                f"must be an integer from 1 to job_count ({self.job_count}), got {self.gang_size!r}",
            )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], path: str = "tasks[0]") -> TaskSpec:
        """Parse ``{name, job_count, resources: {...}, interruptible, duration}`` (PRODUCT.md §4 workload tasks)."""
        if not isinstance(data, Mapping):
            raise ConfigError(path, f"expected a map, got {type(data).__name__}")
        name = data.get("name", "main")
        if not isinstance(name, str) or not name:
            raise ConfigError(join_path(path, "name"), "must be a non-empty string")
        job_count = data.get("job_count", 1)
        if isinstance(job_count, bool) or not isinstance(job_count, int) or job_count < 0:
            raise ConfigError(
                join_path(path, "job_count"), f"must be a non-negative integer, got {job_count!r}"
            )
        interruptible = data.get("interruptible", False)
        if not isinstance(interruptible, bool):
            raise ConfigError(join_path(path, "interruptible"), "must be a boolean")
        resources = parse_resources(data.get("resources"), join_path(path, "resources"))
        gang_size = gang_size_of(data.get("gang_options"), job_count, join_path(path, "gang_options"))
        restart_completed = data.get("restart_completed_jobs", False)
        if not isinstance(restart_completed, bool):
            raise ConfigError(join_path(path, "restart_completed_jobs"), "must be a boolean")
        return cls(
            name,
            job_count,
            resources,
            interruptible=interruptible,
            duration=data.get("duration"),
            gang_size=gang_size,
            restart_completed=restart_completed,
        )


def gang_size_of(gang_options: Any, job_count: int, path: str) -> int | None:
    """The number of ranked jobs of a task with YTsaurus ``gang_options`` (``size``, else ``job_count``), or
    ``None`` when the task has none."""
    if gang_options is None:
        return None
    if not isinstance(gang_options, Mapping):
        raise ConfigError(path, f"expected a map (size), got {type(gang_options).__name__}")
    size = gang_options.get("size")
    if size is None:
        return job_count
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= job_count:
        raise ConfigError(
            join_path(path, "size"), f"must be an integer from 1 to job_count ({job_count}), got {size!r}"
        )
    return size


@dataclass
class Job:
    """One unit of work of a task; ``fraction`` is the share of the original job's input it covers."""

    task: str
    index: int
    fraction: float = 1.0
    attempt: int = 0
    incarnation: int = 0
    """The operation incarnation the job was started in (gang operations)."""
    speculative: bool = False
    """A speculative copy of a running job of the same index (`pooltree.controllers.speculative`)."""


@dataclass
class _TaskState:
    spec: TaskSpec
    pending: deque[Job] = field(default_factory=deque)
    running: int = 0
    completed: int = 0


class OperationControllerBase:
    """Shared bookkeeping: pending jobs per task, allocation ids, counters by outcome."""

    kind = "base"
    takes_float_lists = True
    """``schedule_allocation`` reads ``available_resources`` as floats, from a list as from an array."""

    def __init__(
        self, operation_id: str, tasks: Sequence[TaskSpec], *, interruption_signal: str | None = None
    ):
        if not tasks:
            raise ConfigError(f"operations.{operation_id}.tasks", "an operation needs at least one task")
        names = [task.name for task in tasks]
        if len(set(names)) != len(names):
            raise ConfigError(f"operations.{operation_id}.tasks", "task names must be unique")
        self.operation_id = operation_id
        self.interruption_signal = interruption_signal
        self._tasks: dict[str, _TaskState] = {}
        for task in tasks:
            state = _TaskState(task)
            state.pending.extend(map(Job, repeat(task.name, task.job_count), range(task.job_count)))
            self._tasks[task.name] = state
        self._next_allocation = 0
        self._running: dict[str, Job] = {}
        self.completed_job_count = 0
        self.failed_job_count = 0
        self.aborted_job_count_by_reason: Counter[str] = Counter()
        self.interrupted_job_count = 0
        self.lost_job_count = 0  # completed jobs started again (restart_completed_jobs): YTsaurus's lost jobs
        self.preempted_job_count = 0
        self.incarnation = 0
        """Incremented by every gang incarnation switch (YTsaurus ``operation_incarnation``)."""
        self._needed_cache: Vector | None = None
        self.is_gang = False
        """Whether the jobs run as a gang (`VanillaController` with a task's ``gang_options``)."""
        self.pending_revision = 0
        """Moves whenever the pending work (pending count, needed and min needed resources) is set anew
        (`_refresh`): equal revisions, equal values. ``SchedulerCore`` reads it instead of comparing vectors."""
        self.pending_watchers: list[tuple[set[str], str]] = []
        """``(into, key)`` pairs: whenever the pending work is set anew, ``key`` is added to ``into`` (a change
        notification: ``SchedulerCore`` and ``TreeScheduler`` visit only the operations whose pending work moved
        instead of polling every one; see ``pooltree.strategy.watch``)."""
        self._min_key: list[float | bool | None] | None = None
        """What ``_base_min_needed`` was made from: per task, None (no pending job), True (pending, no memory
        reserve) or the memory a new job of it demands (pending, with a reserve)."""
        self._base_min_needed: Vector = np.zeros(RESOURCE_COUNT)
        self.speculation: SpeculativeJobs | None = None
        """Speculative copies of slow jobs (``job_speculation_timeout``), when the spec asks for them
        (`pooltree.controllers.speculative.speculation_from_spec`); None: the operation never speculates."""
        self._refresh()
        self.initial_min_needed_resources: Vector = self._min_needed.copy()
        """YTsaurus's aggregated initial min needed allocation resources: the componentwise minimum of one job's
        allocation over the tasks, as the operation starts; never changed after (the per-job vector of discretized
        fair share, ``pooltree/fairshare/discretized.py``)."""

    # -- what the strategy reads

    @property
    def pending_allocation_count(self) -> int:
        return self._pending_count

    @property
    def needed_resources(self) -> Vector:
        return self._needed

    @property
    def min_needed_resources(self) -> Vector:
        return self._min_needed

    def pending_task_resources(self) -> dict[str, Vector]:
        """Per task with pending jobs: the resources one of its jobs needs (for "can any node ever fit it")."""
        return {name: self._per_job(state) for name, state in self._tasks.items() if state.pending}

    def pending_task_counts(self) -> dict[str, int]:
        """Per task with pending jobs: how many wait."""
        return {name: len(state.pending) for name, state in self._tasks.items() if state.pending}

    @property
    def running_allocation_count(self) -> int:
        return len(self._running)

    @property
    def is_completed(self) -> bool:
        return self._pending_count == 0 and not self._running and self._all_done()

    def _all_done(self) -> bool:
        return True

    def take_incarnation_switch(self) -> bool:
        """Whether the last finished allocation switched the operation's incarnation: never, but for a gang
        (`VanillaController`)."""
        return False

    def restart_job(self, allocation: Allocation, now: float) -> Allocation | None:
        """Not asked: only a gang switches incarnation (`VanillaController.restart_job`)."""
        return None

    def _allocation_resources(self, state: _TaskState, job: Job) -> Vector:
        resources = state.spec.resources.copy()
        reserve = state.spec.memory_reserve
        if reserve is not None:
            resources[MEMORY] = reserve.memory_demand((job.task, job.index))
        return resources

    def _per_job(self, state: _TaskState) -> Vector:
        per_job = state.spec.resources
        if state.spec.memory_reserve is not None:
            per_job = per_job.copy()
            per_job[MEMORY] = state.spec.memory_reserve.memory_demand()
        return per_job

    def _refresh(self) -> None:
        """Set pending count, needed and min needed resources (called whenever pending jobs change).

        Called once per started allocation, so it does the least it can: the count exactly; ``_needed`` lazily
        (computed on first read, see the property); ``_min_needed`` again only when what it is made of moved:
        per task, whether it has pending jobs and, for a task with a memory reserve, the memory a new job of it
        demands (a sample, a warm start). Subclasses may adjust all three afterwards.
        """
        self.pending_revision += 1
        for into, key in self.pending_watchers:
            into.add(key)
        count = 0
        speculation = self.speculation
        # per task: None (no pending job), True (pending, no reserve) or a new job's memory demand (pending)
        key: list[float | bool | None] = []
        for state in self._tasks.values():
            pending = len(state.pending)
            if speculation is not None:
                pending += speculation.pending_count(state.spec.name)  # requested copies are demand too
            if pending:
                count += pending
                reserve = state.spec.memory_reserve
                key.append(True if reserve is None else reserve.memory_demand())
            else:
                key.append(None)
        self._pending_count = count
        self._needed_cache = None
        if key != self._min_key:
            min_needed: Vector | None = None
            for state, pending in zip(self._tasks.values(), key, strict=True):
                if pending is not None:
                    per_job = self._per_job(state)
                    min_needed = per_job.copy() if min_needed is None else np.minimum(min_needed, per_job)
            self._base_min_needed = min_needed if min_needed is not None else np.zeros(RESOURCE_COUNT)
            self._min_key = key
        self._min_needed = self._base_min_needed

    @property
    def _needed(self) -> Vector:
        """Total resources of all pending jobs (summed on demand: only fair-share updates read it)."""
        if self._needed_cache is None:
            needed = np.zeros(RESOURCE_COUNT)
            speculation = self.speculation
            for state in self._tasks.values():
                count = len(state.pending)
                if speculation is not None:
                    count += speculation.pending_count(state.spec.name)
                if count:
                    needed += self._per_job(state) * count
            self._needed_cache = needed
        return self._needed_cache

    @_needed.setter
    def _needed(self, value: Vector) -> None:
        self._needed_cache = value

    # -- the strategy's calls

    def schedule_allocation(
        self, node: ExecNode, available_resources: Vector, now: float
    ) -> Allocation | None:
        """Take the first pending job (tasks in declaration order) whose allocation fits ``available_resources``
        (a vector, or a list of floats: `takes_float_lists`; only read)."""
        if type(available_resources) is list:
            available = available_resources
        elif isinstance(available_resources, np.ndarray):
            available = available_resources.tolist()
        else:
            available = [float(x) for x in available_resources]
        speculation = self.speculation
        for state in self._tasks.values():
            copy = False
            if state.pending:
                job = state.pending[0]
            elif speculation is not None and (job := speculation.candidate(state.spec.name)) is not None:
                copy = True  # YTsaurus: a task starts a speculative copy only with no regular job pending
            else:
                continue
            resources = self._allocation_resources(state, job)
            amounts = resources.tolist()
            if not fits_floats(amounts, available):
                continue
            if copy:
                job = Job(job.task, job.index, job.fraction, job.attempt, job.incarnation, speculative=True)
            else:
                state.pending.popleft()
                job.incarnation = self.incarnation
            return self._run_job(
                state,
                job,
                resources,
                interruptible=state.spec.interruptible or self.interruption_signal is not None,
                interruption_signal=self.interruption_signal,
                node_address=node.address,
                now=now,
                amounts=tuple(amounts),
            )
        return None

    def _take_running(self, allocation: Allocation) -> Job:
        """The running job of ``allocation``, no longer running (an error naming both when it does not run)."""
        job = self._running.pop(allocation.id, None)
        if job is None:
            raise PooltreeError(
                f"operation {self.operation_id}: allocation {allocation.id} is not running",
                attributes={"operation_id": self.operation_id, "allocation_id": allocation.id},
            )
        return job

    @property
    def can_take_back(self) -> bool:
        """Whether `take_back` undoes a `schedule_allocation` exactly: no speculative copies (they keep per-start
        state of their own)."""
        return self.speculation is None

    def has_reservations(self, node_address: str) -> bool:
        """Whether revived jobs are held for this node (`pooltree.server.live.model.LiveVanillaController` holds
        them); none here."""
        return False

    def take_back(self, allocation: Allocation) -> None:
        """Undo the `schedule_allocation` that made ``allocation`` (never started on a node, never finished): its
        job pending again at the front of its task, counts as before, the allocation number given again when it
        was the last one made. Allocations taken back last-made first leave the controller as it was before
        them (node shards' claims granted ahead, `pooltree/shards/remote.py`). Only where `can_take_back`."""
        if not self.can_take_back:
            raise PooltreeError(
                f"operation {self.operation_id}: allocations cannot be taken back (speculative jobs)",
                attributes={"operation_id": self.operation_id, "allocation_id": allocation.id},
            )
        job = self._take_running(allocation)
        state = self._tasks[job.task]
        state.running -= 1
        if state.spec.memory_reserve is not None:
            state.spec.memory_reserve.cancel_start((job.task, job.index))
        state.pending.appendleft(job)
        if allocation.id == f"{self.operation_id}/{self._next_allocation}":
            self._next_allocation -= 1
        self._refresh()

    def _run_job(
        self,
        state: _TaskState,
        job: Job,
        resources: Vector,
        *,
        interruptible: bool,
        interruption_signal: Any,
        node_address: str | None,
        now: float,
        amounts: tuple[float, ...] | None = None,
    ) -> Allocation:
        """Account ``job`` as running in a new allocation of ``resources`` (a first start or a restart in place);
        ``amounts``: the floats of ``resources`` where the caller made them (`Allocation`'s ``amounts``)."""
        state.running += 1
        if state.spec.memory_reserve is not None:
            state.spec.memory_reserve.start_job((job.task, job.index))
        self._next_allocation += 1
        allocation = Allocation(
            f"{self.operation_id}/{self._next_allocation}",
            self.operation_id,
            resources,
            task=job.task,
            payload=job,
            interruptible=interruptible,
            interruption_signal=interruption_signal,
            node_address=node_address,
            start_time=now,
            amounts=amounts,
        )
        self._running[allocation.id] = job
        if self.speculation is not None:
            self.speculation.on_started(allocation, job, now, speculative=job.speculative)
        self._refresh()
        return allocation

    def on_allocation_finished(
        self, allocation: Allocation, finished: FinishedAllocation, now: float
    ) -> None:
        """Account the outcome and return work to pending as the operation type requires."""
        job = self._take_running(allocation)
        state = self._tasks[job.task]
        state.running -= 1
        outcome = self.speculation.on_finished(allocation, finished) if self.speculation is not None else None
        if outcome == LOST:  # its competitor completed the job: an abort, whatever the node reported
            self.aborted_job_count_by_reason[
                SPECULATIVE_RUN_LOST if job.speculative else SPECULATIVE_RUN_WON
            ] += 1
            self._refresh()
            return
        if allocation.preemption is not None:
            self.preempted_job_count += 1
        self._feed_memory(state, job, finished)
        if outcome == DROPPED:  # its competitor still runs the job: counted here, not run again
            self._count_unsuccessful(allocation, finished)
            self._refresh()
            return
        if finished.state == "completed":
            self._on_completed(state, job, allocation, finished)
        else:
            self._count_unsuccessful(allocation, finished)
            self._requeue(state, job)
        self._refresh()

    def _count_unsuccessful(self, allocation: Allocation, finished: FinishedAllocation) -> None:
        """Count a job that failed, was aborted or (completed while preempted) was interrupted."""
        if finished.state == "failed":
            self.failed_job_count += 1
        elif finished.state == "completed":
            self.interrupted_job_count += 1
        else:
            reason = (
                allocation.preemption.reason.value
                if allocation.preemption is not None
                else (finished.abort_reason or "other")
            )
            self.aborted_job_count_by_reason[reason] += 1

    def launch_speculative_jobs(self, now: float) -> bool:
        """Request speculative copies of the jobs that ran past their ``job_speculation_timeout`` (as far as the
        per-task cap allows); returns whether the pending jobs grew."""
        if self.speculation is None or not self.speculation.speculate(now):
            return False
        self._refresh()
        return True

    def _feed_memory(self, state: _TaskState, job: Job, finished: FinishedAllocation) -> None:
        reserve = state.spec.memory_reserve
        if reserve is None:
            return
        cookie = (job.task, job.index)
        if finished.state == "completed":
            reserve.on_job_completed(
                finished.user_job_max_memory, finished.job_proxy_max_memory, cookie=cookie
            )
        elif finished.state == "failed":
            reserve.on_job_failed(cookie)
        elif finished.abort_reason == RESOURCE_OVERDRAFT and finished.user_job_max_memory is not None:
            reserve.on_job_aborted_resource_overdraft(
                cookie=cookie,
                user_job_max_memory=finished.user_job_max_memory,
                job_proxy_max_memory=finished.job_proxy_max_memory,
            )
        else:
            reason = (
                finished.abort_reason if finished.abort_reason not in (None, RESOURCE_OVERDRAFT) else "other"
            )
            reserve.on_job_aborted(cookie, reason)

    def _requeue(self, state: _TaskState, job: Job) -> None:
        state.pending.append(Job(job.task, job.index, job.fraction, job.attempt + 1))

    def _on_completed(
        self, state: _TaskState, job: Job, allocation: Allocation, finished: FinishedAllocation
    ) -> None:
        state.completed += 1
        self.completed_job_count += 1

    def progress(self) -> dict[str, Any]:
        """Counters for reports (PRODUCT.md §4 per-operation summary)."""
        return {
            "type": self.kind,
            "pending_job_count": self._pending_count,
            "running_job_count": len(self._running),
            "completed_job_count": self.completed_job_count,
            "failed_job_count": self.failed_job_count,
            "interrupted_job_count": self.interrupted_job_count,
            **({"lost_job_count": self.lost_job_count} if self.lost_job_count else {}),
            "preempted_job_count": self.preempted_job_count,
            "aborted_job_count_by_reason": dict(self.aborted_job_count_by_reason),
            **(
                {"speculative_job_counter": self.speculation.progress()}
                if self.speculation is not None
                else {}
            ),
        }


class VanillaController(OperationControllerBase):
    """Vanilla operation: long-running jobs, restarted when aborted or preempted; done when all jobs completed.

    With a task that sets ``gang_options`` it is YTsaurus's gang controller: a ranked job (index below the task's
    ``gang_size``) of the current incarnation that fails, is aborted or is interrupted switches the operation to
    a new incarnation (``take_incarnation_switch`` tells the strategy, which calls ``restart_job`` for every
    running job); every completed job runs again.
    """

    kind = "vanilla"

    def __init__(
        self, operation_id: str, tasks: Sequence[TaskSpec], *, interruption_signal: str | None = None
    ):
        super().__init__(operation_id, tasks, interruption_signal=interruption_signal)
        self.is_gang = any(task.gang_size is not None for task in tasks)
        self.incarnation_switch_count = 0
        self._switch_requested = False

    def on_allocation_finished(
        self, allocation: Allocation, finished: FinishedAllocation, now: float
    ) -> None:
        job = self._running.get(allocation.id) if self.is_gang else None
        super().on_allocation_finished(allocation, finished, now)
        if job is None or job.incarnation != self.incarnation:
            return
        gang_size = self._tasks[job.task].spec.gang_size
        if gang_size is None or job.index >= gang_size:
            return  # a job without a gang rank does not switch the incarnation
        interrupted = finished.state == "completed" and allocation.preemption is not None
        if finished.state in ("failed", "aborted") or interrupted:
            self._switch_incarnation()

    def _switch_incarnation(self) -> None:
        """YTsaurus ``SwitchToNewOperationIncarnation``: a new incarnation; every task's completed jobs are lost
        and run again (``LostAll``); the running ones are restarted by the strategy through ``restart_job``."""
        self.incarnation += 1
        self.incarnation_switch_count += 1
        self._switch_requested = True
        for name, state in self._tasks.items():
            present = {job.index for job in state.pending}
            present.update(job.index for job in self._running.values() if job.task == name)
            present.update(job.index for job in self._held_jobs() if job.task == name)
            for index in range(state.spec.job_count):
                if index not in present:
                    state.pending.append(Job(name, index, 1.0, 1, self.incarnation))
            state.completed = 0
        self._refresh()

    def progress(self) -> dict[str, Any]:
        found = super().progress()
        if self.is_gang:  # YTsaurus's controller orchid: operation_incarnation
            found["operation_incarnation"] = self.incarnation
            found["incarnation_switch_count"] = self.incarnation_switch_count
        return found

    def _held_jobs(self) -> list[Job]:
        """Jobs neither pending nor running that are not done either (a subclass's reservations)."""
        return []

    def take_incarnation_switch(self) -> bool:
        """Whether the last finished allocation switched the operation's incarnation (and forget it)."""
        requested, self._switch_requested = self._switch_requested, False
        return requested

    def restart_job(self, allocation: Allocation, now: float) -> Allocation | None:
        """Abort the allocation's job (``operation_incarnation_changed``) and start it again in the same
        allocation: a new allocation object on the same node whose job fits the old allocation's resources;
        ``None`` (the job waits as pending) when it no longer fits."""
        job = self._running.pop(allocation.id, None)
        if job is None:
            return None
        state = self._tasks[job.task]
        state.running -= 1
        reason = "operation_incarnation_changed"
        self.aborted_job_count_by_reason[reason] += 1
        self._feed_memory(state, job, FinishedAllocation(allocation.id, "aborted", abort_reason=reason))
        again = Job(job.task, job.index, job.fraction, job.attempt + 1, self.incarnation)
        resources = self._allocation_resources(state, again)
        if not fits_floats(resources.tolist(), allocation.resources.tolist()):
            state.pending.append(again)
            self._refresh()
            return None
        return self._run_job(
            state,
            again,
            resources,
            interruptible=allocation.interruptible,
            interruption_signal=allocation.interruption_signal,
            node_address=allocation.node_address,
            now=now,
        )

    def _on_completed(
        self, state: _TaskState, job: Job, allocation: Allocation, finished: FinishedAllocation
    ) -> None:
        if allocation.preemption is not None:
            # a job that finished because the scheduler asked it to (interruption, graceful preemption)
            # did not finish its work: the service instance is started again when resources allow
            self.interrupted_job_count += 1
            self._requeue(state, job)
            return
        if state.spec.restart_completed:  # restart_completed_jobs: YTsaurus counts the completion lost
            self.lost_job_count += 1
            self._requeue(state, job)
            return
        super()._on_completed(state, job, allocation, finished)


class MapController(OperationControllerBase):
    """Map-like operation: interrupted jobs hand their unprocessed input back as a new pending job."""

    kind = "map"

    def _on_completed(
        self, state: _TaskState, job: Job, allocation: Allocation, finished: FinishedAllocation
    ) -> None:
        processed = finished.processed_fraction
        if allocation.preemption is not None and processed is not None:
            if not 0.0 <= processed <= 1.0 or math.isnan(processed):
                raise PooltreeError(
                    f"allocation {allocation.id}: processed_fraction must be within [0, 1], got {processed!r}"
                )
            self.interrupted_job_count += 1
            remaining = job.fraction * (1.0 - processed)
            if remaining > 1e-12:
                state.pending.append(Job(job.task, job.index, remaining, job.attempt + 1))
                self.completed_job_count += 1
                return
        super()._on_completed(state, job, allocation, finished)

    @property
    def processed_fraction_pending(self) -> float:
        """Total input (in original-job units) still waiting to run."""
        return sum(job.fraction for state in self._tasks.values() for job in state.pending)


def make_controller(
    operation_id: str,
    operation_type: str,
    tasks: Sequence[TaskSpec | Mapping[str, Any]],
    *,
    interruption_signal: str | None = None,
) -> OperationControllerBase:
    """Controller for an operation type: ``vanilla`` or a map-like type (``map``, ``reduce``, ``map_reduce``, ...)."""
    parsed = [
        task
        if isinstance(task, TaskSpec)
        else TaskSpec.from_mapping(task, f"operations.{operation_id}.tasks[{i}]")
        for i, task in enumerate(tasks)
    ]
    if operation_type == "vanilla":
        return VanillaController(operation_id, parsed, interruption_signal=interruption_signal)
    if operation_type in (
        "map",
        "reduce",
        "map_reduce",
        "merge",
        "sort",
        "erase",
        "join_reduce",
        "remote_copy",
    ):
        return MapController(operation_id, parsed, interruption_signal=interruption_signal)
    raise ConfigError(f"operations.{operation_id}.type", f"unknown operation type {operation_type!r}")
