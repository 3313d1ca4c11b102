"""The live scheduler's records: operations, jobs, nodes, and the vanilla controller that re-attaches jobs.

Constants and small helpers shared by the scheduler's parts (``scheduler.py``, ``jobs.py``, ``revival.py``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pooltree.config import OperationSpec, VanillaTaskSpec
from pooltree.controllers.memory import JobMemoryReserve, TaskMemoryOptions, TaskMemoryReserve
from pooltree.controllers.operations import Job, TaskSpec, VanillaController
from pooltree.controllers.speculative import speculation_from_spec
from pooltree.errors import ConfigError, PooltreeError
from pooltree.resources import Vector, resources_to_dict, vector
from pooltree.server.store import JobRecord
from pooltree.strategy.model import Allocation, ExecNode
from pooltree.tree import ParametersUpdate, PoolTrees

NO_SUCH_OPERATION = 1915
NO_SUCH_JOB = 1916
OPERATION_FAILED = 1
DEFAULT_HEARTBEAT_PERIOD = 1.0
DEFAULT_FAIR_SHARE_UPDATE_PERIOD = 1.0
"""YTsaurus's ``fair_share_update_period`` (strategy config): 1000 ms by default, 10 ms to 60 s."""
MIN_FAIR_SHARE_UPDATE_PERIOD = 0.01
MAX_FAIR_SHARE_UPDATE_PERIOD = 60.0
LOST_AFTER_MISSED_HEARTBEATS = 2
MAX_STALE_TREE_ROUNDS = 16
"""Bound on publishes per call when activations cascade; what is left waits for the periodic update."""
ACTIVE_STATES = ("starting", "pending", "running", "completing", "aborting", "failing")


def check_update_period(value: float, name: str) -> float:
    """``fair_share_update_period`` in seconds, within YTsaurus's range (10 ms to 60 s)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not MIN_FAIR_SHARE_UPDATE_PERIOD <= value <= MAX_FAIR_SHARE_UPDATE_PERIOD
    ):
        raise ConfigError(
            name,
            f"must be seconds between {MIN_FAIR_SHARE_UPDATE_PERIOD} and {MAX_FAIR_SHARE_UPDATE_PERIOD}, "
            f"got {value!r}",
        )
    return float(value)


GUIDS_PER_READ = 256
"""Ids made from one read of the system's generator (a system call per id was a sizable part of a start)."""
_GUIDS: list[str] = []
"""Ids not yet given out, each from 128 random bits of the system's generator, made a read at a time (a forked
child drops them)."""
os.register_at_fork(after_in_child=_GUIDS.clear)
_GUID_GROUPS = struct.Struct(">IIII")
"""An id's 128 bits as its four groups of 32 (big-endian: the first group is the bits' highest)."""


def new_guid() -> str:
    """A YTsaurus-looking id: four hex groups of 32 random bits each (no leading zeros), from the system's
    generator. The ids of ``GUIDS_PER_READ`` are read and written out at once (``list.pop`` gives each to one
    caller, whatever the thread): a start takes a ready id instead of shifting, masking and formatting 128 bits
    (~1 us of it)."""
    try:
        return _GUIDS.pop()
    except IndexError:
        raw = secrets.token_bytes(16 * GUIDS_PER_READ)
        _GUIDS.extend(map("%x-%x-%x-%x".__mod__, _GUID_GROUPS.iter_unpack(raw)))
        return _GUIDS.pop()


def no_such_operation(operation_id: str) -> PooltreeError:
    """The YT error for an unknown operation id (code 1915, ``attributes.operation_id``)."""
    return PooltreeError(
        f"No such operation {operation_id}", code=NO_SUCH_OPERATION, attributes={"operation_id": operation_id}
    )


class LiveVanillaController(VanillaController):
    """Vanilla controller that can re-attach jobs an agent kept running across a scheduler restart.

    A revived running job is *reserved* for its node: it counts as demand but only that node's next
    ``schedule_allocation`` call takes it (so the strategy charges its usage again, with no second copy started
    elsewhere). ``release(node)`` returns reservations the node did not confirm to the pending queue.
    """

    def __init__(self, operation_id: str, tasks: list[TaskSpec], *, interruption_signal: str | None = None):
        self._reserved: dict[str, dict[tuple[str, int], tuple[Job, str]]] = {}
        self._reserved_by_task: dict[str, int] = {}
        """task → how many of its jobs are reserved (the counts `_refresh` adds without walking the jobs)."""
        self._revival_index: dict[str, dict[int, Job]] | None = None
        """While `reviving`: per task, its first pending job of each index, so each revived record takes its job
        without a scan of the queue; None otherwise. Built from the queue backwards, so (with no job's index
        repeated) its order is the queue's reversed, and what a revival leaves in it is the queue that remains."""
        self._revival_more: dict[str, dict[int, list[Job]]] = {}
        """While `reviving`: per task whose queue repeats an index, the later pending jobs of each repeated index
        (in queue order): taken in turn after the first."""
        self._revival_taken: set[int] = set()
        """While `reviving`: ids of the jobs taken out of a queue that repeats an index, removed at its end."""
        super().__init__(operation_id, tasks, interruption_signal=interruption_signal)
        self.revived_allocations: dict[str, str] = {}
        """allocation id → job id of re-attached jobs (the agent already runs them)."""
        self._reserved_start: dict[str, float] = {}
        """job id → when a reserved job really started: its allocation keeps that start time, so the operation's
        allocations stay in start order and the latest started stays the first preempted (as on YTsaurus)."""

    def _refresh(self) -> None:
        """The base's counts, then the reserved jobs as demand: each counts as pending, its resources are in
        ``_min_needed`` and (summed when read, as the pending jobs' are) in ``_needed``.

        Without walking the reserved jobs (a restarted scheduler holds every running job reserved until its node
        confirms it, and each confirmation or release refreshes: a walk made each of them cost the operation's
        reserved jobs, and a restart at 10,000 nodes answered ~10% of the heartbeats): a reserved job's resources
        are its task's (`_per_job`: the memory reserve's demand for a new job) unless its reserve keeps a restart
        reserve for it (`TaskMemoryReserve.restart_cookies`), so the minimum is taken over each task's vector
        and those jobs' own, the same values a walk takes."""
        super()._refresh()
        if not self._reserved:
            return
        had_pending = self._pending_count > 0
        minimum = self._min_needed if had_pending else None
        count = 0
        for task, reserved in self._reserved_by_task.items():
            if not reserved:
                continue
            count += reserved
            for resources in self._reserved_vectors(task, reserved):
                minimum = resources.copy() if minimum is None else np.minimum(minimum, resources)
        self._pending_count += count
        if minimum is not None:
            self._min_needed = minimum

    def _reserved_vectors(self, task: str, reserved: int) -> list[Vector]:
        """The distinct resources of ``task``'s ``reserved`` reserved jobs (`_allocation_resources` of each)."""
        state = self._tasks[task]
        reserve = state.spec.memory_reserve
        cookies = reserve.restart_cookies() if reserve is not None else ()
        if not cookies:
            return [self._per_job(state)]
        own = [
            self._allocation_resources(state, job)
            for jobs in self._reserved.values()
            for (job_task, index), (job, _) in jobs.items()
            if job_task == task and (job_task, index) in cookies
        ]
        return own if len(own) == reserved else [self._per_job(state), *own]

    @property
    def _needed(self) -> Vector:
        """The base's pending jobs' resources, then each reserved job's added, in the reservations' order."""
        if self._needed_cache is None:
            needed = super()._needed
            for jobs in self._reserved.values():
                for job, _ in jobs.values():
                    needed = needed + self._allocation_resources(self._tasks[job.task], job)
            self._needed_cache = needed
        return self._needed_cache

    @_needed.setter
    def _needed(self, value: Vector) -> None:
        self._needed_cache = value

    def _count_reserved(self, task: str, change: int) -> None:
        self._reserved_by_task[task] = self._reserved_by_task.get(task, 0) + change

    @contextlib.contextmanager
    def reviving(self) -> Iterator[None]:
        """Revival's marks (`mark_completed`, `reserve`) in one pass: each takes its job from an index of the
        pending queues instead of scanning them, the queues are set once at the end, in their order, and the
        counts are refreshed once (a restarted scheduler's revival scanned and refreshed per job record:
        quadratic in an operation's jobs).

        The index is one map per task, index → first pending job, made from the queue backwards; a queue with no
        repeated index (a revived controller's: one job per index) is then, at the end, what is left in its map,
        reversed, with no walk of the jobs in Python; a queue that repeats an index keeps its later jobs in
        ``_revival_more`` and is filtered by the taken jobs' ids."""
        index: dict[str, dict[int, Job]] = {}
        more: dict[str, dict[int, list[Job]]] = {}
        for name, state in self._tasks.items():
            by_index = {job.index: job for job in reversed(state.pending)}
            if len(by_index) != len(state.pending):
                repeated: dict[int, list[Job]] = {}
                for job in state.pending:
                    if by_index[job.index] is not job:
                        repeated.setdefault(job.index, []).append(job)
                more[name] = repeated
            index[name] = by_index
        self._revival_index, self._revival_more, self._revival_taken = index, more, set()
        try:
            yield
        finally:
            taken = self._revival_taken
            self._revival_index, self._revival_more, self._revival_taken = None, {}, set()
            for name, state in self._tasks.items():
                if name not in more:
                    if len(index[name]) != len(state.pending):
                        state.pending.clear()
                        state.pending.extend(reversed(index[name].values()))
                elif any(id(job) in taken for job in state.pending):
                    kept = [job for job in state.pending if id(job) not in taken]
                    state.pending.clear()
                    state.pending.extend(kept)
            self._refresh()

    def _held_jobs(self) -> list[Job]:
        """Reserved (revived) jobs are not lost by a gang incarnation switch: their nodes still run them."""
        return [job for jobs in self._reserved.values() for job, _ in jobs.values()]

    def _take_pending(self, task: str, index: int) -> Job | None:
        state = self._tasks.get(task)
        if state is None:
            return None
        if self._revival_index is not None:
            # `reviving`: the first pending job of that index, as the scan below finds it
            job = self._revival_index[task].pop(index, None)
            if job is None:
                return None
            repeated = self._revival_more.get(task)
            if repeated is not None:
                self._revival_taken.add(id(job))
                later = repeated.get(index)
                if later:
                    self._revival_index[task][index] = later.pop(0)
            return job
        for job in state.pending:
            if job.index == index:
                state.pending.remove(job)
                return job
        return None

    def mark_completed(self, task: str, index: int) -> bool:
        """A job that completed in an earlier scheduler run: count it, never run it again (unless its task
        restarts completed jobs: then it runs again, as it would have)."""
        if self._tasks[task].spec.restart_completed:
            return False
        job = self._take_pending(task, index)
        if job is None:
            return False
        state = self._tasks[task]
        state.completed += 1
        self.completed_job_count += 1
        if self._revival_index is None:
            self._refresh()
        return True

    def reserve(
        self, node_address: str, task: str, index: int, job_id: str, start_time: float | None = None
    ) -> bool:
        """A job the store says runs on ``node_address`` since ``start_time``: hold it for re-attachment by that
        node."""
        job = self._take_pending(task, index)
        if job is None:
            return False
        self._reserved.setdefault(node_address, {})[(task, index)] = (job, job_id)
        self._count_reserved(task, 1)
        if start_time is not None:
            self._reserved_start[job_id] = start_time
        if self._revival_index is None:
            self._refresh()
        return True

    def reserved_nodes(self) -> list[str]:
        """The nodes this operation holds revived jobs for."""
        return list(self._reserved)

    def has_reservations(self, node_address: str) -> bool:
        return node_address in self._reserved

    def reserved_job_ids(self, node_address: str) -> dict[str, tuple[str, int]]:
        return {job_id: key for key, (_, job_id) in self._reserved.get(node_address, {}).items()}

    def release(self, node_address: str, keep: set[str] | frozenset[str] = frozenset()) -> list[str]:
        """Return reserved jobs of a node (except ``keep`` job ids) to pending; returns their job ids."""
        jobs = self._reserved.get(node_address, {})
        released = []
        for key, (job, job_id) in list(jobs.items()):
            if job_id in keep:
                continue
            del jobs[key]
            self._count_reserved(job.task, -1)
            self._tasks[job.task].pending.appendleft(job)
            self._reserved_start.pop(job_id, None)
            released.append(job_id)
        if not jobs:
            self._reserved.pop(node_address, None)
        self._refresh()
        return released

    def _adopt(self, job: Job, node_address: str, started: float) -> Allocation:
        """A reserved job as running, since ``started``, in a new allocation on ``node_address`` (counts
        refreshed)."""
        state = self._tasks[job.task]
        return self._run_job(
            state,
            job,
            self._allocation_resources(state, job),
            interruptible=state.spec.interruptible or self.interruption_signal is not None,
            interruption_signal=self.interruption_signal,
            node_address=node_address,
            now=started,
        )

    def adopt_finished(self, node_address: str, job_id: str, now: float) -> Allocation | None:
        """A reserved job that the node reports finished: an allocation for ``on_allocation_finished``."""
        for key, (job, reserved_id) in list(self._reserved.get(node_address, {}).items()):
            if reserved_id == job_id:
                del self._reserved[node_address][key]
                self._count_reserved(job.task, -1)
                return self._adopt(job, node_address, now)
        return None

    def schedule_allocation(
        self, node: ExecNode, available_resources: Vector, now: float
    ) -> Allocation | None:
        reserved = self._reserved.get(node.address)
        if reserved:
            key, (job, job_id) = next(iter(reserved.items()))
            del reserved[key]
            self._count_reserved(job.task, -1)
            if not reserved:
                del self._reserved[node.address]
            # its allocation keeps the job's real start (start order, the job_speculation_timeout clock)
            allocation = self._adopt(job, node.address, min(now, self._reserved_start.pop(job_id, now)))
            allocation.revived = True
            self.revived_allocations[allocation.id] = job_id
            return allocation
        return super().schedule_allocation(node, available_resources, now)

    def running_memory_reserve(self, task: str, index: int) -> JobMemoryReserve | None:
        """The memory reserve a running job of ``task`` / ``index`` was started with."""
        state = self._tasks.get(task)
        if state is None or state.spec.memory_reserve is None:
            return None
        return state.spec.memory_reserve.running_reserve((task, index))

    @property
    def reserved_count(self) -> int:
        # read per listed operation (``change_mark``): summed without a generator
        return sum(map(len, self._reserved.values()))


@dataclass(slots=True)
class LiveJob:
    """One job: an allocation of an operation on a node, and what the node reported about it."""

    id: str
    operation_id: str
    task_name: str
    job_index: int
    address: str
    tree: str
    start_time: float
    allocation_id: str | None = None
    state: str = "running"
    finish_time: float | None = None
    error: dict[str, Any] | None = None
    exit_code: int | None = None
    abort_reason: str | None = None
    interruption_reason: str | None = None
    statistics: dict[str, Any] = field(default_factory=dict)
    stderr: str = ""
    stderr_size: int = 0
    missed_heartbeats: int = 0
    interruption_info: dict[str, Any] | None = None
    """Set when the scheduler preempts the job (YTsaurus's ``interruption_info``: ``interruption_reason``,
    ``interruption_timeout``, ``preemption_reason``, ``preempted_for``)."""
    gpu_devices: tuple[int, ...] = ()
    """Host indices of the GPUs its node gave it, as the node reports them (``node/gpu.py``)."""
    job_competition_id: str | None = None
    """A speculative copy: the id of the job it competes with (YTsaurus's ``job_competition_id``, the original's
    id; other jobs have their own id, see ``competition_id``)."""
    has_competitors: bool = False
    """A speculative copy of it ran, or it is one (YTsaurus's ``has_competitors``)."""

    @property
    def competition_id(self) -> str:
        return self.job_competition_id or self.id

    def record(self) -> JobRecord:
        """The store's record of the job. Its document holds the task, index and tree, and only those other fields
        that differ from their defaults (``from_record`` reads a missing field as its default, as it reads every
        field of the rows older builds wrote). A running job's body is ~50 bytes instead of ~265; a job's row is
        written at its start and at its end, inside the heartbeat's commit, and smaller rows dirty fewer pages of
        SQLite's journal and are cheaper to build (``tests/server/test_job_records.py``)."""
        document: dict[str, Any] = {
            "task_name": self.task_name,
            "job_index": self.job_index,
            "tree": self.tree,
        }
        if self.error is not None:
            document["error"] = self.error
        if self.exit_code is not None:
            document["exit_code"] = self.exit_code
        if self.abort_reason is not None:
            document["abort_reason"] = self.abort_reason
        if self.interruption_reason is not None:
            document["interruption_reason"] = self.interruption_reason
        if self.statistics:
            document["statistics"] = self.statistics
        if self.stderr:
            document["stderr"] = self.stderr
        if self.stderr_size:
            document["stderr_size"] = self.stderr_size
        if self.interruption_info is not None:
            document["interruption_info"] = self.interruption_info
        if self.gpu_devices:
            document["gpu_devices"] = list(self.gpu_devices)
        if self.job_competition_id is not None:
            document["job_competition_id"] = self.job_competition_id
        if self.has_competitors:
            document["has_competitors"] = True
        return JobRecord(
            self.operation_id,
            self.id,
            self.state,
            self.address,
            self.start_time,
            self.finish_time,
            None,
            document,
        )

    @classmethod
    def from_record(cls, record: JobRecord) -> LiveJob:
        """The job a record was made from (``record``): the fields its document holds, read by
        ``_RECORD_FIELDS``, the rest their defaults (a missing field reads as its default, as every field of the
        rows older builds wrote does). Only the keys the document has are read (a running job's three, not the
        seventeen: a restarted scheduler reads every job record)."""
        doc = record.document
        job = cls(
            id=record.id,
            operation_id=record.operation_id,
            task_name=doc.get("task_name", "main"),
            job_index=int(doc.get("job_index", 0)),
            address=record.address,
            tree=doc.get("tree", ""),
            start_time=record.start_time,
            state=record.state,
            finish_time=record.finish_time,
        )
        for key, value in doc.items():
            read = _RECORD_FIELDS.get(key)
            if read is not None:
                setattr(job, key, read(value))
        return job

    def exec_attributes(self) -> dict[str, Any] | None:
        """YTsaurus's ``exec_attributes`` of a job as far as pooltree knows them: the GPU devices it was given
        (``gpu_devices``: ``device_number``, ``device_name``); None for a job without GPUs."""
        if not self.gpu_devices:
            return None
        return {
            "gpu_devices": [
                {"device_number": index, "device_name": f"/dev/nvidia{index}"} for index in self.gpu_devices
            ]
        }


def _as_is(value: Any) -> Any:
    return value


_RECORD_FIELDS: dict[str, Callable[[Any], Any]] = {
    "error": _as_is,
    "exit_code": _as_is,
    "abort_reason": _as_is,
    "interruption_reason": _as_is,
    "statistics": lambda value: dict(value or {}),
    "stderr": lambda value: value or "",
    "stderr_size": lambda value: int(value or 0),
    "interruption_info": _as_is,
    "gpu_devices": lambda value: tuple(value or ()),
    "job_competition_id": _as_is,
    "has_competitors": bool,
}
"""The optional fields of a job's record document (``LiveJob.record`` writes them when not their defaults) and how
``LiveJob.from_record`` reads each; a null reads as the default."""


@dataclass
class LiveOperation:
    """An operation of this scheduler: the raw spec, the validated model, its controller and its jobs."""

    id: str
    user: str
    type: str
    spec: dict[str, Any]
    model: OperationSpec
    controller: LiveVanillaController
    start_time: float
    state: str = "starting"
    finish_time: float | None = None
    suspended: bool = False
    runtime_parameters: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    trees: list[str] = field(default_factory=list)
    pools: dict[str, str] = field(default_factory=dict)
    jobs: dict[str, LiveJob] = field(default_factory=dict)
    """Its jobs by id (running and finished); added with ``add_job``, a running one ended with ``end_job``."""
    running_job_count: int = 0
    """Jobs of ``jobs`` in state ``running``, kept by ``add_job`` and ``end_job`` (what ``brief_progress`` shows,
    read per listed operation: counting ``jobs`` walked every job the operation ever ran)."""
    aborted_jobs: int = 0
    lost_jobs: int = 0
    revision: int = 0
    """Bumped on every change the attribute map shows (state, jobs, parameters), so readers can cache it."""
    job_spec_templates: dict[tuple[str, str], tuple[Any, bool, dict[str, Any], tuple[float, ...]]] = field(
        default_factory=dict
    )
    """(task, tree) → (the tree's config, the job network setting, the first job's spec): ``live/job_specs.py``."""
    spec_alerts: dict[str, dict[str, Any]] | None = None
    """The alerts the spec alone raises (unsupported, unrecognized options), made at the first read of the
    operation's alerts (``SchedulerAlerts.operation_alerts``): the spec never changes, and a pending operation's
    attribute map is built again at every start into its pool (its place in the queue)."""
    unrecognized: dict[str, Any] | None = None
    """``model.unrecognized_spec()``, made at its first read (``LiveScheduler.unrecognized_spec``)."""

    @property
    def is_final(self) -> bool:
        return self.state in ("completed", "failed", "aborted")

    def change_mark(self) -> tuple[Any, ...]:
        """What moves whenever the operation's state, jobs or parameters change: its revision and, in case a change
        does not move it, its event, job and allocation counts (readers key what they derived from it on this: the
        attribute map's fingerprint, the forecast's copy)."""
        controller = self.controller
        return (
            self.revision,
            self.state,
            self.suspended,
            len(self.events),
            len(self.jobs),
            self.aborted_jobs,
            self.lost_jobs,
            controller.pending_allocation_count,
            controller.completed_job_count,
            controller.failed_job_count,
            controller.reserved_count,
        )

    def add_job(self, job: LiveJob) -> None:
        """Put ``job`` in ``jobs`` (in place of one of the same id), keeping ``running_job_count``."""
        replaced = self.jobs.get(job.id)
        if replaced is not None and replaced.state == "running":
            self.running_job_count -= 1
        self.jobs[job.id] = job
        if job.state == "running":
            self.running_job_count += 1

    def end_job(self, job: LiveJob, state: str) -> None:
        """``job`` (one of ``jobs``) leaves the running state for ``state``."""
        if job.state == "running" and state != "running" and self.jobs.get(job.id) is job:
            self.running_job_count -= 1
        job.state = state


@dataclass
class NodeState:
    """An exec node as the service tracks it between heartbeats."""

    address: str
    last_seen: float
    resource_limits: Vector
    tags: frozenset[str] = frozenset()
    trees: list[str] = field(default_factory=list)
    """Replaced when the node's trees change, never changed in place (the read snapshot keeps it)."""
    aborts: list[dict[str, str]] = field(default_factory=list)
    preempts: list[list[Any]] = field(default_factory=list)
    memory_meter: str | None = None
    alerts: list[dict[str, Any]] = field(default_factory=list)
    """The node's own alerts from its last heartbeat (a reduced job isolation, ...)."""


def live_controller(operation_id: str, model: OperationSpec, tasks: list[TaskSpec]) -> LiveVanillaController:
    """The controller of a live operation: its tasks, the spec's interruption signal and speculative jobs
    (``job_speculation_timeout``, `pooltree.controllers.speculative`)."""
    controller = LiveVanillaController(operation_id, tasks, interruption_signal=model.interruption_signal)
    controller.speculation = speculation_from_spec(model, tasks)
    return controller


def task_memory_reserve(name: str, task: VanillaTaskSpec, model: OperationSpec) -> TaskMemoryReserve:
    """The task's memory reserve from its digests (memory-digest.md): a vanilla job has no tables, so its job
    proxy estimate is the base one."""
    lower, default = task.memory_digest_parameters(model)
    digest = model.job_proxy_memory_digest
    job_proxy = {
        key: value
        for key, value in (
            ("lower_bound", digest.lower_bound),
            ("upper_bound", digest.upper_bound),
            ("default_value", digest.default_value),
            ("relative_precision", digest.relative_precision),
        )
        if value is not None
    }
    options: dict[str, Any] = {
        "memory_limit": task.memory_limit,
        "user_job_memory_digest_default_value": default,
        "user_job_memory_digest_lower_bound": lower,
        "job_proxy_memory_digest": job_proxy,
        "input_table_count": 0,
        "output_table_count": 0,
    }
    if task.tmpfs_total_size > 0:
        options["tmpfs_size"] = task.tmpfs_total_size
    return TaskMemoryReserve(TaskMemoryOptions.from_spec(options, path=f"spec.tasks.{name}"))


def build_tasks(operation_id: str, model: OperationSpec) -> list[TaskSpec]:
    """Controller tasks from a vanilla spec: each job's allocation is 1 slot, its cpu/gpu and its memory
    reserve (the digest-driven share of ``memory_limit`` plus the job proxy's)."""
    if not model.tasks:
        raise ConfigError("spec.tasks", "a vanilla operation needs at least one task")
    tasks = []
    for name, task in model.tasks.items():
        resources = vector(user_slots=1, cpu=task.cpu_limit, gpu=task.gpu_limit, memory=task.memory_limit)
        interruptible = (task.interruption_signal or model.interruption_signal) is not None
        reserve = task_memory_reserve(name, task, model)
        tasks.append(
            TaskSpec(
                name,
                task.job_count,
                resources,
                interruptible=interruptible,
                memory_reserve=reserve,
                gang_size=task.gang_size,
                restart_completed=task.restart_completed_jobs,
            )
        )
    return tasks


def _runtime_parameters(
    registry: PoolTrees,
    operation_id: str,
    trees: list[str],
    updates: Mapping[str, ParametersUpdate] | None = None,
) -> dict[str, Any]:
    """``scheduling_options_per_pool_tree`` of an operation as registered, or as it will be once the prepared
    ``updates`` (``PoolTrees.prepare_operation_parameters``) are applied: the store commits that before the
    runtime changes."""
    per_tree: dict[str, Any] = {}
    for name in trees:
        tree_op = registry.trees[name].operation(operation_id)
        pool, weight, limits_vector = tree_op.pool.name, tree_op.weight, tree_op.resource_limits
        update = None if updates is None else updates.get(name)
        if update is not None:
            weight, limits_vector = update.weight, update.resource_limits
            if update.placement is not None:
                target = update.placement.pool
                pool = target.name if target is not None else update.placement.pool_name
        entry: dict[str, Any] = {"pool": pool}
        if weight is not None:
            entry["weight"] = float(weight)
        limits = resources_to_dict(limits_vector, drop_infinite=True)
        if limits:
            entry["resource_limits"] = limits
        per_tree[name] = entry
    return per_tree
