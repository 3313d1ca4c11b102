"""The live scheduler's state: pool trees with one ``SchedulerCore`` each, operations, jobs, exec nodes.

``LiveScheduler`` is driven by the service (commands, node heartbeats, the periodic fair-share update and the node
timeout sweep); time is passed in as seconds. Operations register in ``PoolTrees`` (admission, count limits,
pending queues); their controller (``LiveVanillaController``) is attached to the ``SchedulerCore`` of every tree
they run in. Every state change is written through to the ``Store`` so a restarted scheduler revives operations,
and the jobs agents still run are re-attached (not restarted) on the agents' first heartbeats.
"""

from __future__ import annotations

import secrets
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pooltree.config import OperationSpec, VanillaTaskSpec, nodes_of_trees
from pooltree.controllers.memory import JobMemoryReserve, TaskMemoryOptions, TaskMemoryReserve
from pooltree.controllers.operations import Job, TaskSpec, VanillaController
from pooltree.errors import ConfigError, PooltreeError
from pooltree.node.job import ABORT_BY_SCHEDULER, yt_error
from pooltree.orchid import tree_view
from pooltree.resources import Vector, parse_duration, resources_to_dict, vector
from pooltree.server.heartbeats import FinishedJobReport, HeartbeatRequest
from pooltree.server.store import JobRecord, OperationFilter, OperationRecord, Store
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.model import Allocation, ExecNode, FinishedAllocation, NodeHeartbeat
from pooltree.tree import PoolTrees
from pooltree.tree.lifecycle import OperationState

NO_SUCH_OPERATION = 1915
NO_SUCH_JOB = 1916
OPERATION_FAILED = 1
DEFAULT_HEARTBEAT_PERIOD = 1.0
DEFAULT_FAIR_SHARE_UPDATE_PERIOD = 1.0
LOST_AFTER_MISSED_HEARTBEATS = 2
MAX_STALE_TREE_ROUNDS = 16
"""Bound on publishes per call when activations cascade; what is left waits for the periodic update."""
ACTIVE_STATES = ("starting", "pending", "running", "completing", "aborting", "failing")


def new_guid() -> str:
    """A YTsaurus-looking id: four hex groups."""
    return "-".join(f"{secrets.randbits(32):x}" for _ in range(4))


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
        super().__init__(operation_id, tasks, interruption_signal=interruption_signal)
        self.revived_allocations: dict[str, str] = {}
        """allocation id → job id of re-attached jobs (the agent already runs them)."""

    def _refresh(self) -> None:
        super()._refresh()
        had_pending = self._pending_count > 0
        for jobs in self._reserved.values():
            for job, _ in jobs.values():
                resources = self._allocation_resources(self._tasks[job.task], job)
                self._pending_count += 1
                self._needed = self._needed + resources
                self._min_needed = (
                    np.minimum(self._min_needed, resources) if had_pending else resources.copy()
                )
                had_pending = True

    def _take_pending(self, task: str, index: int) -> Job | None:
        state = self._tasks.get(task)
        if state is None:
            return None
        for job in state.pending:
            if job.index == index:
                state.pending.remove(job)
                return job
        return None

    def mark_completed(self, task: str, index: int) -> bool:
        """A job that completed in an earlier scheduler run: count it, never run it again."""
        job = self._take_pending(task, index)
        if job is None:
            return False
        state = self._tasks[task]
        state.completed += 1
        self.completed_job_count += 1
        self._refresh()
        return True

    def reserve(self, node_address: str, task: str, index: int, job_id: str) -> bool:
        """A job the store says runs on ``node_address``: hold it for re-attachment by that node."""
        job = self._take_pending(task, index)
        if job is None:
            return False
        self._reserved.setdefault(node_address, {})[(task, index)] = (job, job_id)
        self._refresh()
        return True

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
            self._tasks[job.task].pending.appendleft(job)
            released.append(job_id)
        if not jobs:
            self._reserved.pop(node_address, None)
        self._refresh()
        return released

    def _adopt(self, job: Job, node_address: str, now: float) -> Allocation:
        state = self._tasks[job.task]
        resources = self._allocation_resources(state, job)
        if state.spec.memory_reserve is not None:
            state.spec.memory_reserve.start_job((job.task, job.index))
        state.running += 1
        self._next_allocation += 1
        allocation = Allocation(
            f"{self.operation_id}/{self._next_allocation}",
            self.operation_id,
            resources,
            task=job.task,
            payload=job,
            interruptible=state.spec.interruptible or self.interruption_signal is not None,
            interruption_signal=self.interruption_signal,
            node_address=node_address,
            start_time=now,
        )
        self._running[allocation.id] = job
        return allocation

    def adopt_finished(self, node_address: str, job_id: str, now: float) -> Allocation | None:
        """A reserved job that the node reports finished: an allocation for ``on_allocation_finished``."""
        for key, (job, reserved_id) in list(self._reserved.get(node_address, {}).items()):
            if reserved_id == job_id:
                del self._reserved[node_address][key]
                allocation = self._adopt(job, node_address, now)
                self._refresh()
                return allocation
        return None

    def schedule_allocation(
        self, node: ExecNode, available_resources: Vector, now: float
    ) -> Allocation | None:
        reserved = self._reserved.get(node.address)
        if reserved:
            key, (job, job_id) = next(iter(reserved.items()))
            del reserved[key]
            if not reserved:
                del self._reserved[node.address]
            allocation = self._adopt(job, node.address, now)
            self.revived_allocations[allocation.id] = job_id
            self._refresh()
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
        return sum(len(jobs) for jobs in self._reserved.values())


@dataclass
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

    def record(self) -> JobRecord:
        document = {
            "task_name": self.task_name,
            "job_index": self.job_index,
            "tree": self.tree,
            "error": self.error,
            "exit_code": self.exit_code,
            "abort_reason": self.abort_reason,
            "interruption_reason": self.interruption_reason,
            "statistics": self.statistics,
            "stderr": self.stderr,
            "stderr_size": self.stderr_size,
        }
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
        doc = record.document
        return cls(
            id=record.id,
            operation_id=record.operation_id,
            task_name=doc.get("task_name", "main"),
            job_index=int(doc.get("job_index", 0)),
            address=record.address,
            tree=doc.get("tree", ""),
            start_time=record.start_time,
            state=record.state,
            finish_time=record.finish_time,
            error=doc.get("error"),
            exit_code=doc.get("exit_code"),
            abort_reason=doc.get("abort_reason"),
            interruption_reason=doc.get("interruption_reason"),
            statistics=dict(doc.get("statistics") or {}),
            stderr=doc.get("stderr") or "",
            stderr_size=int(doc.get("stderr_size") or 0),
        )


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
    aborted_jobs: int = 0
    lost_jobs: int = 0
    revision: int = 0
    """Bumped on every change the attribute map shows (state, jobs, parameters), so readers can cache it."""

    @property
    def is_final(self) -> bool:
        return self.state in ("completed", "failed", "aborted")


@dataclass
class NodeState:
    """An exec node as the service tracks it between heartbeats."""

    address: str
    last_seen: float
    resource_limits: Vector
    tags: frozenset[str] = frozenset()
    trees: list[str] = field(default_factory=list)
    aborts: list[dict[str, str]] = field(default_factory=list)
    preempts: list[list[Any]] = field(default_factory=list)
    memory_meter: str | None = None


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
            TaskSpec(name, task.job_count, resources, interruptible=interruptible, memory_reserve=reserve)
        )
    return tasks


def _runtime_parameters(registry: PoolTrees, operation_id: str, trees: list[str]) -> dict[str, Any]:
    per_tree: dict[str, Any] = {}
    for name in trees:
        tree_op = registry.trees[name].operation(operation_id)
        entry: dict[str, Any] = {"pool": tree_op.pool.name}
        if tree_op.weight is not None:
            entry["weight"] = float(tree_op.weight)
        limits = resources_to_dict(tree_op.resource_limits, drop_infinite=True)
        if limits:
            entry["resource_limits"] = limits
        per_tree[name] = entry
    return per_tree


class LiveScheduler:
    """All scheduler state behind one lock; every public method is safe to call from any thread."""

    def __init__(
        self,
        store: Store,
        *,
        node_heartbeat_timeout: float = 60.0,
        heartbeat_period: float = DEFAULT_HEARTBEAT_PERIOD,
    ) -> None:
        self.store = store
        self.node_heartbeat_timeout = node_heartbeat_timeout
        self.heartbeat_period = heartbeat_period
        self.lock = threading.RLock()
        self.registry = PoolTrees({})
        self.cores: dict[str, SchedulerCore] = {}
        self.operations: dict[str, LiveOperation] = {}
        self.jobs: dict[str, LiveJob] = {}
        self.allocation_jobs: dict[str, str] = {}
        self.nodes: dict[str, NodeState] = {}
        self.expected_nodes: dict[str, float] = {}
        self.views: dict[str, dict[str, Any]] = {}
        self.strategy_views: dict[str, dict[str, dict[str, Any]]] = {}
        self.preemptions: Counter[tuple[str, str]] = Counter()
        self.last_update: dict[str, float] = {}
        self._stale_trees: set[str] = set()
        """Trees with newly activated operations, published before the next heartbeat is scheduled."""
        self._updating = False
        self._job_writes: dict[tuple[str, str], JobRecord] | None = None
        self.durations: dict[str, tuple[int, float, float]] = {}
        """work → (count, total seconds, longest), measured by the service around heartbeats and updates."""
        self.listeners: list[Callable[[str, str], None]] = []

    # ------------------------------------------------------------------ pool trees

    def apply_pool_trees(self, definitions: Mapping[str, Any], default_tree: str | None, now: float) -> None:
        """Apply the last good pool trees document (from Cypress) to the runtime."""
        with self.lock:
            activated = self.registry.apply_config(definitions, default_tree, now)
            for name, tree in self.registry.trees.items():
                core = self.cores.get(name)
                if core is None or core.pool_tree is not tree:
                    self.cores[name] = SchedulerCore(tree)
                else:
                    core.config = type(core.config).from_options(tree.config, f"pool_trees.{name}.config")
            for name in list(self.cores):
                if name not in self.registry.trees:
                    del self.cores[name]
                    self.views.pop(name, None)
            self._on_activated(activated, now)
            self._refresh_stale_trees(now)

    def fair_share_update_period(self, tree: str) -> float:
        """``fair_share_update_period`` of the tree config (YTsaurus milliseconds or a unit string), 1 s default."""
        config = self.registry.trees[tree].config
        value = getattr(config, "fair_share_update_period", None)
        if value is None:
            value = (getattr(config, "model_extra", None) or {}).get("fair_share_update_period")
        if value is None:
            return DEFAULT_FAIR_SHARE_UPDATE_PERIOD
        try:
            return max(parse_duration(value, f"pool_trees.{tree}.config.fair_share_update_period"), 0.05)
        except ConfigError:
            return DEFAULT_FAIR_SHARE_UPDATE_PERIOD

    # ------------------------------------------------------------------ persistence

    def record_duration(self, work: str, seconds: float) -> None:
        """Account one heartbeat / fair-share update that took ``seconds`` (the service measures)."""
        count, total, longest = self.durations.get(work, (0, 0.0, 0.0))
        self.durations[work] = (count + 1, total + seconds, max(longest, seconds))

    def _put_job(self, record: JobRecord) -> None:
        """Write a job through to the store; inside a heartbeat the writes go out together before it answers."""
        if self._job_writes is None:
            self.store.put_job(record)
        else:
            self._job_writes[(record.operation_id, record.id)] = record

    def _touch(self, operation_id: str) -> None:
        op = self.operations.get(operation_id)
        if op is not None:
            op.revision += 1

    def _save_operation(self, op: LiveOperation) -> None:
        op.revision += 1
        document = {
            "state_events": op.events,
            "error": op.error,
            "suspended": op.suspended,
            "trees": op.trees,
            "pools": op.pools,
            "progress": self.progress(op),
            "aborted_jobs": op.aborted_jobs,
            "lost_jobs": op.lost_jobs,
            "failed_job_count": op.controller.failed_job_count,
            "unrecognized_spec": op.model.unrecognized_spec(),
            "alerts": self.alerts(op),
        }
        pool = next(iter(op.pools.values()), None)
        self.store.put_operation(
            OperationRecord(
                op.id,
                op.type,
                op.state,
                op.user,
                pool,
                op.start_time,
                op.finish_time,
                spec=op.spec,
                runtime_parameters=op.runtime_parameters,
                document=document,
            )
        )

    def _set_state(self, op: LiveOperation, state: str, now: float) -> None:
        if op.state == state:
            return
        op.state = state
        op.events.append({"state": state, "time": now})
        if state in ("completed", "failed", "aborted"):
            op.finish_time = now
        self._save_operation(op)
        for listener in self.listeners:
            listener(op.id, state)

    def _sync_state(self, op: LiveOperation, now: float) -> None:
        registered = self.registry.operations.get(op.id)
        if registered is not None:
            op.suspended = registered.suspended
            self._set_state(op, registered.state.value, now)

    def _on_activated(self, operation_ids: list[str], now: float) -> None:
        for operation_id in operation_ids:
            op = self.operations.get(operation_id)
            if op is not None:
                self._sync_state(op, now)
                self._stale_trees.update(op.trees)

    def _refresh_stale_trees(self, now: float) -> None:
        """Publish the trees where operations were activated (another one finished, a limit was raised) now
        instead of at the next periodic update: the strategy only schedules operations of a published tree, so
        otherwise the freed capacity idles for up to a fair-share period plus a node heartbeat period."""
        if self._updating:
            return
        for _ in range(MAX_STALE_TREE_ROUNDS):
            if not self._stale_trees:
                return
            tree = self._stale_trees.pop()
            if tree in self.cores:
                self._update_tree(tree, now)

    # ------------------------------------------------------------------ operations

    def start_operation(
        self,
        operation_type: str,
        spec: Any,
        user: str,
        now: float,
        *,
        operation_id: str | None = None,
    ) -> LiveOperation:
        """Validate the spec, admit the operation in its trees and attach its controller."""
        if operation_type != "vanilla":
            raise PooltreeError(
                f'Operation type "{operation_type}" is not supported; this scheduler runs vanilla operations',
                attributes={"operation_type": operation_type},
            )
        if not isinstance(spec, Mapping):
            raise ConfigError("spec", f"expected a map, got {type(spec).__name__}")
        model = OperationSpec.parse(dict(spec), "spec")
        operation_id = operation_id or new_guid()
        tasks = build_tasks(operation_id, model)
        with self.lock:
            controller = LiveVanillaController(
                operation_id, tasks, interruption_signal=model.interruption_signal
            )
            registered = self.registry.register_operation(
                operation_id, model, user=user, operation_type=operation_type, now=now
            )
            op = LiveOperation(
                operation_id,
                user,
                operation_type,
                dict(spec),
                model,
                controller,
                start_time=now,
                events=[{"state": "starting", "time": now}],
                trees=list(registered.trees),
            )
            self._attach(op)
            self.operations[operation_id] = op
            op.runtime_parameters = {
                "scheduling_options_per_pool_tree": _runtime_parameters(self.registry, op.id, op.trees)
            }
            op.pools = {
                name: opts["pool"]
                for name, opts in op.runtime_parameters["scheduling_options_per_pool_tree"].items()
            }
            self._save_operation(op)
            self._sync_state(op, now)
            for name in op.trees:
                self._update_tree(name, now)
            return op

    def _attach(self, op: LiveOperation) -> None:
        for name in op.trees:
            core = self.cores[name]
            core.controllers[op.id] = op.controller
            core.strategy.register_operation(op.id, op.controller)

    def _detach(self, op: LiveOperation) -> list[Allocation]:
        running: list[Allocation] = []
        for name in op.trees:
            core = self.cores.get(name)
            if core is None or op.id not in core.controllers:
                continue
            running.extend(core.strategy.unregister_operation(op.id))
            del core.controllers[op.id]
        return running

    def operation(self, operation_id: str) -> LiveOperation:
        op = self.operations.get(operation_id)
        if op is None:
            raise no_such_operation(operation_id)
        return op

    def finish_operation(
        self, operation_id: str, final: str, now: float, *, error: dict[str, Any] | None = None
    ) -> None:
        """Complete, abort or fail an operation: its running jobs are aborted on their nodes."""
        with self.lock:
            op = self.operation(operation_id)
            if op.is_final:
                raise PooltreeError(
                    f"Operation {operation_id} has already finished ({op.state})",
                    attributes={"operation_id": operation_id, "state": op.state},
                )
            reason = (
                "operation_" + {"completed": "completed", "aborted": "aborted", "failed": "failed"}[final]
            )
            for allocation in self._detach(op):
                self._abort_on_node(allocation, reason, now)
            for node in list(op.controller._reserved):
                for job_id in op.controller.release(node):
                    job = self.jobs.get(job_id)
                    if job is not None:
                        self._abort_on_node_by_job(job, reason, now)
            op.error = error
            activated = self.registry.finish_operation(operation_id, OperationState(final), now)
            intermediate = {"completed": "completing", "aborted": "aborting", "failed": "failing"}[final]
            op.events.append({"state": intermediate, "time": now})
            self._set_state(op, final, now)
            self._on_activated(activated, now)
            # a finished operation is served from the store from now on
            del self.operations[operation_id]
            self._refresh_stale_trees(now)

    def _abort_on_node(self, allocation: Allocation, reason: str, now: float) -> None:
        job_id = self.allocation_jobs.pop(allocation.id, None)
        job = self.jobs.get(job_id) if job_id else None
        if job is not None:
            self._abort_on_node_by_job(job, reason, now)

    def _abort_on_node_by_job(self, job: LiveJob, reason: str, now: float) -> None:
        self._touch(job.operation_id)
        node = self.nodes.get(job.address)
        if node is not None:
            node.aborts.append({"job_id": job.id, "reason": reason})
        self.jobs.pop(job.id, None)
        if job.state == "running":
            job.state = "aborted"
            job.finish_time = now
            job.abort_reason = reason
            job.error = yt_error(ABORT_BY_SCHEDULER, "Job aborted by scheduler", {"abort_reason": reason})
            self._put_job(job.record())

    def suspend_operation(self, operation_id: str, now: float, *, abort_running_jobs: bool = False) -> None:
        with self.lock:
            op = self.operation(operation_id)
            self.registry.suspend_operation(operation_id)
            op.suspended = True
            if abort_running_jobs:
                for job in list(op.jobs.values()):
                    if job.state == "running" and job.allocation_id is not None:
                        node = self.nodes.get(job.address)
                        if node is not None:
                            node.aborts.append({"job_id": job.id, "reason": "operation_suspended"})
            self._save_operation(op)

    def resume_operation(self, operation_id: str, now: float) -> None:
        with self.lock:
            op = self.operation(operation_id)
            self.registry.resume_operation(operation_id)
            op.suspended = False
            self._save_operation(op)

    def update_operation_parameters(self, operation_id: str, parameters: Any, now: float) -> None:
        """Pool, weight and resource limits per tree; validated in every tree first, the last good kept."""
        with self.lock:
            op = self.operation(operation_id)
            if op.is_final:
                raise PooltreeError(
                    f"Operation {operation_id} has already finished ({op.state})",
                    attributes={"operation_id": operation_id},
                )
            if not isinstance(parameters, Mapping):
                raise ConfigError("parameters", f"expected a map, got {type(parameters).__name__}")
            activated = self.registry.update_operation_parameters(operation_id, parameters, now)
            per_tree = _runtime_parameters(self.registry, op.id, op.trees)
            op.runtime_parameters = {
                **{k: v for k, v in op.runtime_parameters.items() if k != "scheduling_options_per_pool_tree"},
                **{k: parameters[k] for k in ("owners", "acl", "annotations") if k in parameters},
                "scheduling_options_per_pool_tree": per_tree,
            }
            op.pools = {name: opts["pool"] for name, opts in per_tree.items()}
            self._on_activated(activated, now)
            self._sync_state(op, now)
            self._save_operation(op)
            self._refresh_stale_trees(now)

    def _check_completion(self, op: LiveOperation, now: float) -> None:
        if op.is_final:
            return
        limit = op.model.max_failed_job_count
        failed = op.controller.failed_job_count
        if failed > 0 and failed >= limit:
            last = next(
                (j for j in reversed(list(op.jobs.values())) if j.state == "failed" and j.error is not None),
                None,
            )
            inner = [last.error] if last is not None and last.error is not None else []
            error = yt_error(
                OPERATION_FAILED,
                "Failed jobs limit exceeded",
                {"max_failed_job_count": limit, "failed_job_count": failed, "operation_id": op.id},
                inner,
            )
            self.finish_operation(op.id, "failed", now, error=error)
        elif op.controller.is_completed and op.state == "running":
            self.finish_operation(op.id, "completed", now)

    # ------------------------------------------------------------------ fair share

    def update_fair_share(self, tree: str, now: float) -> None:
        """The periodic update of one tree: finish completed operations, recompute shares, refresh the views."""
        with self.lock:
            if tree not in self.cores:
                return
            for op in list(self.operations.values()):
                if tree in op.trees:
                    self._check_completion(op, now)
            self._update_tree(tree, now)

    def _update_tree(self, tree: str, now: float) -> None:
        self._stale_trees.discard(tree)
        updating, self._updating = self._updating, True
        try:
            self._publish_tree(tree, now)
        finally:
            self._updating = updating

    def _publish_tree(self, tree: str, now: float) -> None:
        core = self.cores[tree]
        for operation_id, controller in list(core.controllers.items()):
            op = self.operations.get(operation_id)
            if op is not None and not op.is_final and getattr(controller, "is_completed", False):
                self.finish_operation(operation_id, "completed", now)
        result = core.update_fair_share(now)
        self.last_update[tree] = now
        view = tree_view(core.pool_tree, result, core.total_resources)
        strategy: dict[str, dict[str, Any]] = {}
        for section in ("pools", "operations"):
            for element_id, entry in view[section].items():
                try:
                    extra = core.strategy.element_view(element_id)
                except PooltreeError:
                    continue
                if section == "operations":
                    controller = core.controllers.get(element_id)
                    if controller is not None:
                        extra["progress"] = controller.progress()
                entry.update(extra)
                strategy[element_id] = extra
        self.views[tree] = view
        self.strategy_views[tree] = strategy
        self._drain(core)

    def _drain(self, core: SchedulerCore) -> None:
        core.drain_events()

    # ------------------------------------------------------------------ heartbeats

    def _trees_of_node(self, address: str, tags: frozenset[str]) -> list[str]:
        filters = {name: tree.config.tag_filter for name, tree in self.registry.trees.items()}
        sets = nodes_of_trees(filters, {address: tags})
        return [name for name, addresses in sets.items() if address in addresses]

    def process_heartbeat(self, heartbeat: HeartbeatRequest, now: float) -> dict[str, Any]:
        """One node heartbeat: store finished jobs, re-attach revived ones, schedule, preempt; the response map."""
        with self.lock:
            self._job_writes = {}
            try:
                return self._process_heartbeat(heartbeat, now)
            finally:
                writes, self._job_writes = self._job_writes, None
                self.store.put_jobs(list(writes.values()))

    def _process_heartbeat(self, heartbeat: HeartbeatRequest, now: float) -> dict[str, Any]:
        """The body of ``process_heartbeat`` (lock held, job writes collected)."""
        node = self.nodes.get(heartbeat.address)
        if node is None:
            node = NodeState(heartbeat.address, now, heartbeat.resource_limits)
            self.nodes[heartbeat.address] = node
        node.last_seen = now
        node.resource_limits = heartbeat.resource_limits
        node.tags = heartbeat.tags
        node.memory_meter = heartbeat.memory_meter
        self.expected_nodes.pop(heartbeat.address, None)
        node.trees = self._trees_of_node(heartbeat.address, heartbeat.tags)
        acknowledge: list[str] = []
        touched: set[str] = set()
        for report in heartbeat.finished:
            self._on_finished_report(node, report, now, touched)
            acknowledge.append(report.job_id)
        running_ids = {job.job_id for job in heartbeat.running}
        # Reservations (revived jobs) this node did not confirm go back to pending.
        for op in self.operations.values():
            if heartbeat.address in op.controller._reserved:
                for job_id in op.controller.release(heartbeat.address, keep=running_ids):
                    job = self.jobs.get(job_id)
                    if job is not None and job.state == "running":
                        self._mark_lost(job, now)
        # Running jobs the scheduler does not know are aborted; known ones that vanished are lost.
        for job_id in running_ids:
            job = self.jobs.get(job_id)
            if job is None or job.state != "running" or job.address != heartbeat.address:
                node.aborts.append({"job_id": job_id, "reason": "unknown_job"})
            else:
                job.missed_heartbeats = 0
        for job in list(self.jobs.values()):
            if job.address == heartbeat.address and job.state == "running" and job.id not in running_ids:
                if job.id in acknowledge:
                    continue
                job.missed_heartbeats += 1
                if job.missed_heartbeats > LOST_AFTER_MISSED_HEARTBEATS:
                    self._lose_allocation(job, now)
        # Completion first: a finished operation frees its pool's running slot, and the operation activated
        # in its place is published and scheduled in this same heartbeat.
        for operation_id in touched:
            op = self.operations.get(operation_id)
            if op is not None:
                self._check_completion(op, now)
        self._refresh_stale_trees(now)
        start: list[dict[str, Any]] = []
        for tree in node.trees:
            core = self.cores[tree]
            result = core.process_heartbeat(
                NodeHeartbeat(heartbeat.address, heartbeat.resource_limits, heartbeat.tags), now
            )
            for allocation in result.allocations_to_start:
                spec = self._on_started(tree, allocation, node, now)
                if spec is not None:
                    start.append(spec)
            for record in result.allocations_to_preempt:
                job_id = self.allocation_jobs.get(record.allocation_id)
                self.preemptions[(tree, record.reason.value)] += 1
                if job_id is None:
                    continue
                target = self.nodes.get(record.node_address, node)
                if record.interruptible and record.timeout > 0:
                    target.preempts.append([job_id, record.reason.value, float(record.timeout)])
                else:
                    target.aborts.append({"job_id": job_id, "reason": record.reason.value})
            self._drain(core)
        response = {
            "start": start,
            "preempt": node.preempts,
            "abort": node.aborts,
            "acknowledge": acknowledge,
            "heartbeat_period": self.heartbeat_period,
        }
        node.preempts = []
        node.aborts = []
        return response

    def _job_spec(self, op: LiveOperation, job: LiveJob, allocation: Allocation) -> dict[str, Any]:
        task = op.model.tasks[job.task_name]
        environment = dict(task.environment)
        environment.update(
            {
                "YT_OPERATION_ID": op.id,
                "YT_JOB_ID": job.id,
                "YT_JOB_INDEX": str(job.job_index),
                "YT_TASK_NAME": job.task_name,
            }
        )
        signal = task.interruption_signal or op.model.interruption_signal
        spec: dict[str, Any] = {
            "job_id": job.id,
            "operation_id": op.id,
            "task_name": job.task_name,
            "job_index": job.job_index,
            "command": task.command,
            "environment": environment,
            "memory_limit": float(task.memory_limit),
            "resources": resources_to_dict(allocation.resources),
        }
        if signal is not None:
            spec["interruption_signal"] = signal
        reserve = op.controller.running_memory_reserve(job.task_name, job.job_index)
        if reserve is not None:
            spec["memory_reserve"] = min(reserve.user_job_memory_reserve, float(task.memory_limit))
            spec["job_proxy_memory_reserve"] = reserve.job_proxy_memory_reserve
            spec["job_proxy_estimated_memory"] = reserve.job_proxy_estimate
        return spec

    def _on_started(
        self, tree: str, allocation: Allocation, node: NodeState, now: float
    ) -> dict[str, Any] | None:
        op = self.operations.get(allocation.operation_id)
        if op is None:
            return None
        op.revision += 1
        revived = op.controller.revived_allocations.pop(allocation.id, None)
        if revived is not None and revived in self.jobs:
            job = self.jobs[revived]
            job.allocation_id = allocation.id
            job.tree = tree
            job.missed_heartbeats = 0
            self.allocation_jobs[allocation.id] = job.id
            return None
        payload = allocation.payload
        job = LiveJob(
            id=new_guid(),
            operation_id=op.id,
            task_name=allocation.task or "main",
            job_index=payload.index if isinstance(payload, Job) else 0,
            address=node.address,
            tree=tree,
            start_time=now,
            allocation_id=allocation.id,
        )
        self.jobs[job.id] = job
        op.jobs[job.id] = job
        self.allocation_jobs[allocation.id] = job.id
        self._put_job(job.record())
        return self._job_spec(op, job, allocation)

    def _on_finished_report(
        self, node: NodeState, report: FinishedJobReport, now: float, touched: set[str]
    ) -> None:
        job = self.jobs.get(report.job_id)
        op = self.operations.get(report.operation_id)
        self._touch(report.operation_id)
        if job is not None and job.operation_id != report.operation_id:
            self._touch(job.operation_id)
        if job is None and op is not None:
            reserved = op.controller.reserved_job_ids(node.address)
            if report.job_id in reserved:
                task, index = reserved[report.job_id]
                job = LiveJob(report.job_id, op.id, task, index, node.address, "", report.start_time)
                self.jobs[job.id] = job
                op.jobs[job.id] = job
        if job is None:
            return
        if job.state != "running":
            return
        self.jobs.pop(job.id, None)
        job.state = report.state
        job.finish_time = report.finish_time or now
        job.error = report.error
        job.exit_code = report.exit_code
        job.abort_reason = report.abort_reason
        job.interruption_reason = report.interruption_reason
        job.statistics = report.statistics
        job.stderr = report.stderr
        job.stderr_size = report.stderr_size
        self._put_job(job.record())
        if op is None:
            return
        touched.add(op.id)
        if report.state == "aborted":
            op.aborted_jobs += 1
        finished = FinishedAllocation(
            job.allocation_id or job.id,
            report.state,
            abort_reason=report.abort_reason,
            user_job_max_memory=report.statistics.get("user_job/max_memory"),
            job_proxy_max_memory=report.statistics.get("job_proxy/max_memory"),
        )
        if job.allocation_id is not None:
            self.allocation_jobs.pop(job.allocation_id, None)
            core = self.cores.get(job.tree)
            if core is not None and core.on_allocation_finished(finished, now) is not None:
                return
            # preempted or detached allocations: the strategy already forgot them
            return
        allocation = op.controller.adopt_finished(node.address, job.id, now)
        if allocation is not None:
            finished.allocation_id = allocation.id
            op.controller.on_allocation_finished(allocation, finished, now)

    def _mark_lost(self, job: LiveJob, now: float) -> None:
        self._touch(job.operation_id)
        self.jobs.pop(job.id, None)
        job.state = "aborted"
        job.finish_time = now
        job.abort_reason = "node_offline"
        job.error = yt_error(ABORT_BY_SCHEDULER, "Job aborted by scheduler", {"abort_reason": "node_offline"})
        self._put_job(job.record())
        op = self.operations.get(job.operation_id)
        if op is not None:
            op.lost_jobs += 1
            op.aborted_jobs += 1

    def _lose_allocation(self, job: LiveJob, now: float) -> None:
        """A job its node stopped reporting: abort its allocation (the controller restarts the job)."""
        self._mark_lost(job, now)
        if job.allocation_id is not None:
            self.allocation_jobs.pop(job.allocation_id, None)
            core = self.cores.get(job.tree)
            if core is not None:
                core.on_allocation_finished(
                    FinishedAllocation(job.allocation_id, "aborted", abort_reason="node_offline"), now
                )

    def sweep_nodes(self, now: float) -> list[str]:
        """Nodes silent for ``node_heartbeat_timeout``: their allocations are aborted (``node_offline``)."""
        with self.lock:
            gone = [a for a, n in self.nodes.items() if now - n.last_seen > self.node_heartbeat_timeout]
            for address in gone:
                for core in self.cores.values():
                    for allocation in core.remove_node(address, now):
                        job_id = self.allocation_jobs.pop(allocation.id, None)
                        job = self.jobs.get(job_id) if job_id else None
                        if job is not None and job.state == "running":
                            self._mark_lost(job, now)
                    self._drain(core)
                del self.nodes[address]
            expired = [a for a, t in self.expected_nodes.items() if now - t > self.node_heartbeat_timeout]
            for address in expired:
                del self.expected_nodes[address]
                for op in self.operations.values():
                    for job_id in op.controller.release(address):
                        job = self.jobs.get(job_id)
                        if job is not None and job.state == "running":
                            self._mark_lost(job, now)
            return gone + expired

    # ------------------------------------------------------------------ revival

    def revive(self, now: float) -> list[str]:
        """Re-register operations the store holds in non-final states; running jobs wait for their nodes."""
        revived: list[str] = []
        with self.lock:
            records: list[OperationRecord] = []
            for state in ACTIVE_STATES:
                records.extend(self.store.list_operations(OperationFilter(state=state, limit=1_000_000)))
            records.sort(key=lambda r: (r.start_time, r.id))
            for record in records:
                try:
                    self._revive_one(record, now)
                    revived.append(record.id)
                except PooltreeError as error:
                    self._fail_record(record, error, now)
        return revived

    def _fail_record(self, record: OperationRecord, error: PooltreeError, now: float) -> None:
        record.state = "failed"
        record.finish_time = now
        record.document = {
            **record.document,
            "error": yt_error(OPERATION_FAILED, f"Operation could not be revived: {error.message}"),
        }
        self.store.put_operation(record)

    def _revive_one(self, record: OperationRecord, now: float) -> None:
        model = OperationSpec.parse(dict(record.spec), "spec")
        tasks = build_tasks(record.id, model)
        controller = LiveVanillaController(record.id, tasks, interruption_signal=model.interruption_signal)
        doc = record.document
        # register with the runtime parameters the operation had (pool, weight, limits per tree)
        spec_for_trees = model
        per_tree = (record.runtime_parameters or {}).get("scheduling_options_per_pool_tree") or {}
        if per_tree:
            merged = dict(record.spec)
            options = dict(merged.get("scheduling_options_per_pool_tree") or {})
            for tree, entry in per_tree.items():
                options[tree] = {**dict(options.get(tree) or {}), **entry}
            merged["scheduling_options_per_pool_tree"] = options
            merged.setdefault("pool_trees", list(per_tree))
            spec_for_trees = OperationSpec.parse(merged, "spec")
        registered = self.registry.register_operation(
            record.id, spec_for_trees, user=record.user, operation_type=record.type, now=record.start_time
        )
        op = LiveOperation(
            record.id,
            record.user,
            record.type,
            dict(record.spec),
            model,
            controller,
            start_time=record.start_time,
            state=record.state,
            runtime_parameters=dict(record.runtime_parameters),
            events=list(doc.get("state_events") or []),
            trees=list(registered.trees),
            pools=dict(doc.get("pools") or {}),
            aborted_jobs=int(doc.get("aborted_jobs") or 0),
            lost_jobs=int(doc.get("lost_jobs") or 0),
        )
        controller.failed_job_count = int(doc.get("failed_job_count") or 0)
        for job_record in self.store.list_jobs(record.id):
            job = LiveJob.from_record(job_record)
            op.jobs[job.id] = job
            if job.state == "completed":
                controller.mark_completed(job.task_name, job.job_index)
            elif job.state == "running":
                if controller.reserve(job.address, job.task_name, job.job_index, job.id):
                    self.jobs[job.id] = job
                    self.expected_nodes.setdefault(job.address, now)
                else:
                    self._mark_lost(job, now)
        self._attach(op)
        self.operations[op.id] = op
        op.events.append({"state": "reviving", "time": now})
        if bool(doc.get("suspended")):
            self.registry.suspend_operation(op.id)
            op.suspended = True
        op.state = ""
        self._sync_state(op, now)

    # ------------------------------------------------------------------ views

    def alerts(self, op: LiveOperation) -> dict[str, Any]:
        registered = self.registry.operations.get(op.id)
        return {key: dict(value) for key, value in registered.alerts.items()} if registered else {}

    def unrecognized_spec(self, op: LiveOperation) -> dict[str, Any]:
        return op.model.unrecognized_spec()

    def progress(self, op: LiveOperation) -> dict[str, Any]:
        """Job counts as ``brief_progress.jobs`` needs them (running, completed, pending, failed, aborted, lost)."""
        controller = op.controller
        running = sum(1 for j in op.jobs.values() if j.state == "running")
        pending = controller.pending_allocation_count if not op.is_final else 0
        if op.is_final:
            running = 0
        completed = controller.completed_job_count
        return {
            "running": running,
            "completed": completed,
            "pending": max(pending - controller.reserved_count, 0),
            "failed": controller.failed_job_count,
            "aborted": op.aborted_jobs,
            "lost": op.lost_jobs,
            "total": running + completed + max(pending - controller.reserved_count, 0),
        }
