"""The live scheduler's state: pool trees with one ``SchedulerCore`` each, operations, jobs, exec nodes.

``LiveScheduler`` is driven by the service (commands, node heartbeats, the periodic fair-share update and the node
timeout sweep); time is passed in as seconds. Operations register in ``PoolTrees`` (admission, count limits,
pending queues); their controller (``LiveVanillaController``) is attached to the ``SchedulerCore`` of every tree
they run in. Every state change is written through to the ``Store`` so a restarted scheduler revives operations,
and the jobs agents still run are re-attached (not restarted) on the agents' first heartbeats.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pooltree.alerts import (
    OPERATION_STARVING,
    AlertSettings,
    SchedulerAlerts,
    default_tree_missing,
    nodes_in_several_trees,
)
from pooltree.config import OperationSpec
from pooltree.errors import ConfigError, PooltreeError
from pooltree.node.job import ABORT_BY_SCHEDULER, yt_error
from pooltree.node.wire import HeartbeatRequest
from pooltree.orchid import tree_view, unpublished_operation_view
from pooltree.server.live.commit import GroupCommit
from pooltree.server.live.counts import OperationCounts
from pooltree.server.live.generation import StateGeneration
from pooltree.server.live.index import Reservations, RunningJobs
from pooltree.server.live.jobs import LiveJobs
from pooltree.server.live.lock import SchedulingLock
from pooltree.server.live.model import (
    DEFAULT_FAIR_SHARE_UPDATE_PERIOD,
    DEFAULT_HEARTBEAT_PERIOD,
    MAX_STALE_TREE_ROUNDS,
    OPERATION_FAILED,
    LiveJob,
    LiveOperation,
    LiveVanillaController,
    NodeState,
    _runtime_parameters,
    build_tasks,
    check_update_period,
    live_controller,
    new_guid,
    no_such_operation,
)
from pooltree.server.live.orphans import leave_removed_trees
from pooltree.server.live.revival import LiveRevival
from pooltree.server.live.tentative import LiveTentative
from pooltree.server.live.throttle import HeartbeatThrottle, ThrottleSettings
from pooltree.server.store import JobRecord, Mutation, OperationFilter, OperationRecord, Store
from pooltree.strategy.build_static import operation_aggressive_preemption_allowed
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.model import Allocation
from pooltree.strategy.single_tree import restrict_to_single_tree
from pooltree.strategy.tentative import asks_for_tentative_trees, with_tentative_trees
from pooltree.tree import PoolTrees
from pooltree.tree.lifecycle import OperationState

EVENT_LOG_SIZE = 2_000
"""Events kept in memory for the orchid's ``event_log`` and the web UI (oldest dropped first)."""
FINAL_STATES = ("completed", "failed", "aborted")
ALL_OPERATIONS = 1 << 62


class LiveScheduler:
    """All scheduler state behind one lock; every public method is safe to call from any thread."""

    def __init__(
        self,
        store: Store,
        *,
        node_heartbeat_timeout: float = 60.0,
        heartbeat_period: float = DEFAULT_HEARTBEAT_PERIOD,
        fair_share_update_period: float = DEFAULT_FAIR_SHARE_UPDATE_PERIOD,
        alert_settings: AlertSettings | None = None,
        throttle_settings: ThrottleSettings | None = None,
    ) -> None:
        self.store = store
        self.node_heartbeat_timeout = node_heartbeat_timeout
        self.heartbeat_period = heartbeat_period
        self.update_period = check_update_period(fair_share_update_period, "fair_share_update_period")
        self.lock = SchedulingLock()
        """Everything below is read and changed under it (``lock.py``: an ``RLock`` that wakes the event loop's
        heartbeats waiting for it)."""
        self._start_mutation: Mutation | None = None
        """The mutation id of the start being committed (saved with the operation's first record)."""
        self.config_lock: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        """Taken before ``lock`` by starts: the service sets Cypress's lock, so a pool tree removal checked
        against the running operations cannot interleave with a start into that tree."""
        self.registry = PoolTrees({})
        self.cores: dict[str, SchedulerCore] = {}
        self.connection_time: float | None = None
        """When this scheduler connected (revived at start): trees' ``node_reconnection_timeout`` counts from it."""
        self.operations: dict[str, LiveOperation] = {}
        self._node_trees: dict[frozenset[str], list[str]] = {}
        """Node tags → the trees whose ``node_tag_filter`` they match (cleared when pool trees change)."""
        self.jobs = RunningJobs()
        """Running jobs by id and by node."""
        self.reservations = Reservations()
        """The operations holding revived jobs per node."""
        self.heartbeat_throttle = HeartbeatThrottle(throttle_settings)
        """Heartbeats in flight; throttles them past YTsaurus's concurrent heartbeat limits (``throttle.py``)."""
        self.commits = GroupCommit(store.put_jobs)
        """Job records of heartbeats, stored in batches outside the lock (``commit.py``)."""
        self.allocation_jobs: dict[str, str] = {}
        self.nodes: dict[str, NodeState] = {}
        self.expected_nodes: dict[str, float] = {}
        self.views = TreeViews(self)
        """Orchid views of the last published update per tree, built when first read after it (lock held)."""
        self.strategy_views = StrategyViews(self)
        self.preemptions: Counter[tuple[str, str]] = Counter()
        self.last_update: dict[str, float] = {}
        self.fair_share_updates: Counter[str] = Counter()
        self.published_updates = 0
        """Fair-share updates published so far, every tree (readers of published views key on it)."""
        """Full fair-share updates run per tree (the periodic ones and those events asked for)."""
        self.generation = StateGeneration()
        """Moves with every change that can give a node's heartbeat work (``generation.py``; node shards)."""
        self._stale_trees: set[str] = set()
        """Trees with operations that can run now: published before the next heartbeat is scheduled and by the
        service's loop without waiting for the period."""
        self._dirty: set[str] = set()
        """Trees whose fair-share inputs changed since their last update: published at the next period."""
        self._updating = False
        self._job_writes: dict[tuple[str, str], JobRecord] | None = None
        self.durations: dict[str, tuple[int, float, float]] = {}
        self._durations_lock = threading.Lock()
        """work → (count, total seconds, longest), measured by the service around heartbeats and updates."""
        self.listeners: list[Callable[[str, str], None]] = []
        self.job_files: Callable[[str, str], list[dict[str, Any]]] | None = None
        self.isolate_job_network = False
        """Jobs get a network namespace of their own (``network: isolated`` in the job spec): set when the scheduler
        runs without authentication, where any job reaching it would be root (nodes that cannot isolate refuse)."""
        """operation id, task → the ``files`` of a job spec (set by the service; files.FileService.job_files)."""
        self.alert_center = SchedulerAlerts(self, alert_settings)
        self.pool_trees_error: dict[str, Any] | None = None
        """The ``update_pools`` alert while the last pool trees change was refused (``apply_pool_trees``)."""
        self.event_log: deque[dict[str, Any]] = deque(maxlen=EVENT_LOG_SIZE)
        self.event_count = 0
        """Events ever appended to ``event_log`` (readers find the new ones by it)."""
        """The latest scheduler events (operations started/finished, allocations started/finished/preempted)."""
        self.update_listeners: list[Callable[[str, float], None]] = []
        """Called with (tree, now) after every fair-share update of a tree (the web UI's history samples)."""
        self.now = 0.0
        """The latest time a command, heartbeat or update brought (alerts read at other times use it)."""
        self.counts = OperationCounts()
        self.default_tentative_pool_trees: tuple[str, ...] = ()
        """The scheduler's ``default_tentative_pool_trees`` (spec ``use_default_tentative_pool_trees``)."""
        self.tentative = LiveTentative(self)
        self.heartbeats = LiveJobs(self)
        """Node heartbeats and jobs (``jobs.py``)."""
        self.revival = LiveRevival(self)
        """Revival after a restart (``revival.py``)."""
        """Operations running in tentative pool trees (`tentative.py`)."""
        """Operations per state/user/pools/type for ``list_operations`` counters (every stored operation)."""
        self.counts.load(
            store.list_operations(OperationFilter(limit=ALL_OPERATIONS)), final_states=FINAL_STATES
        )

    def process_heartbeat(
        self, heartbeat: HeartbeatRequest, now: float, *, throttled: bool = False
    ) -> dict[str, Any]:
        """One node heartbeat: its answer, once its job records are stored (``jobs.py``)."""
        return self.heartbeats.process_heartbeat(heartbeat, now, throttled=throttled)

    def try_process_heartbeat(
        self, heartbeat: HeartbeatRequest, now: float, *, throttled: bool = False
    ) -> tuple[dict[str, Any], int] | None:
        """``process_heartbeat`` without waiting for the lock or the store (``jobs.py``)."""
        return self.heartbeats.try_process_heartbeat(heartbeat, now, throttled=throttled)

    @property
    def publishing(self) -> bool:
        """Whether a heartbeat would publish a stale tree first (``jobs.py``)."""
        return self.heartbeats.publishing

    def sweep_nodes(self, now: float) -> list[str]:
        """Nodes silent for ``node_heartbeat_timeout`` lose their allocations (``jobs.py``)."""
        return self.heartbeats.sweep_nodes(now)

    def revive(self, now: float) -> list[str]:
        """Re-register operations the store holds in non-final states (``revival.py``); their ids."""
        self.generation.bump()
        return self.revival.revive(now)

    def connect(self, now: float) -> None:
        """This scheduler connects (starts or takes over) at ``now``: for each tree's ``node_reconnection_timeout``
        from then on, scheduling tag filters are not capped by their nodes' resources (`strategy/reconnection.py`)."""
        self.connection_time = now
        for core in self.cores.values():
            core.connection_time = now

    # ------------------------------------------------------------------ pool trees

    def apply_pool_trees(
        self,
        definitions: Mapping[str, Any],
        default_tree: str | None,
        now: float,
        *,
        single_tree_default: bool = True,
    ) -> None:
        """Apply the last good pool trees document (from Cypress) to the runtime.

        As YTsaurus's scheduler does, a ``default_tree`` that names no tree refuses the whole update: the trees
        stay as they were, operations without ``pool_trees`` are refused (no default tree), and the
        ``update_pools`` alert says why until ``@default_tree`` is fixed or removed. With ``default_tree`` None
        the only tree is the default when ``single_tree_default`` (callers without a Cypress); the service passes
        False: on YTsaurus only ``@default_tree`` makes a default tree, even when there is one tree.
        """
        with self.lock:
            self.generation.bump()
            if default_tree is not None and default_tree not in definitions:
                self.pool_trees_error = default_tree_missing(default_tree, definitions)
                self.registry.default_tree = None
                return
            filters = {name: definition.config.tag_filter for name, definition in definitions.items()}
            current = {name: tree.config.tag_filter for name, tree in self.registry.trees.items()}
            if {n: f.text for n, f in filters.items()} != {n: f.text for n, f in current.items()}:
                # YTsaurus checks the known nodes only when trees or their filters change
                overlap = nodes_in_several_trees(filters, {a: node.tags for a, node in self.nodes.items()})
                if overlap is not None:
                    self.pool_trees_error = overlap
                    return
            self.pool_trees_error = None
            removed = [name for name in self.registry.trees if name not in definitions]
            if removed:  # as YTsaurus: operations leave removed trees, those left without one are aborted
                leave_removed_trees(self, removed, now)
            self.registry.default_tree = default_tree  # apply_config keeps the old default when given None
            activated = self.registry.apply_config(definitions, default_tree, now)
            if not single_tree_default:
                self.registry.default_tree = default_tree  # apply_config makes a single tree the default
            self._node_trees.clear()
            for name, tree in self.registry.trees.items():
                core = self.cores.get(name)
                if core is None or core.pool_tree is not tree:
                    self.cores[name] = SchedulerCore(tree)
                    self.cores[name].connection_time = self.connection_time
                    self.cores[name].strategy.clock = time.monotonic  # schedule_allocations_timeout
                else:
                    core.config = type(core.config).from_options(tree.config, f"pool_trees.{name}.config")
            for name in list(self.cores):
                if name not in self.registry.trees:
                    del self.cores[name]
                    self.views.forget(name)
            self._dirty.update(self.cores)
            self._on_activated(activated, now)
            self._refresh_stale_trees(now)

    def set_user_default_parent_pools(self, mapping: Mapping[str, str], now: float) -> None:
        """Apply ``//sys/scheduler/user_to_default_pool`` (from Cypress): the pools under which each user's
        ephemeral pools are created in trees with ``use_user_default_parent_pool_map``; existing ones move."""
        with self.lock:
            self.generation.bump()
            activated = self.registry.set_user_default_parent_pools(mapping, now)
            self._dirty.update(self.cores)
            self._on_activated(activated, now)
            self._refresh_stale_trees(now)

    def fair_share_update_period(self, tree: str) -> float:
        """The period of ``tree``'s fair-share update: the scheduler's ``fair_share_update_period`` (YTsaurus has
        it in the strategy config, one value for every tree, not in a tree's config)."""
        return self.update_period

    # ------------------------------------------------------------------ persistence

    def record_duration(self, work: str, seconds: float) -> None:
        """Account one heartbeat / fair-share update that took ``seconds`` (the service measures; its own small
        lock, not the scheduling one)."""
        with self._durations_lock:
            count, total, longest = self.durations.get(work, (0, 0.0, 0.0))
            self.durations[work] = (count + 1, total + seconds, max(longest, seconds))

    def _put_job(self, record: JobRecord) -> None:
        """Write a job through to the store; inside a heartbeat the writes are collected and go to the group
        commit when it ends (stored before it answers); outside one, after what is queued, before returning."""
        self.generation.bump()
        if self._job_writes is None:
            self.commits.wait(self.commits.submit([record]))
        else:
            self._job_writes[(record.operation_id, record.id)] = record

    def _touch(self, operation_id: str) -> None:
        self.generation.bump()
        op = self.operations.get(operation_id)
        if op is not None:
            op.revision += 1

    def _save_operation(self, op: LiveOperation, *, mutation: Mutation | None = None) -> None:
        op.revision += 1
        self._commit_operation(op, mutation=mutation)

    def _commit_operation(self, op: LiveOperation, *, mutation: Mutation | None = None) -> None:
        """Write ``op`` as it is (or a planned copy of it: ``_planned``) to the store, then move the counters.

        Commands that change an operation commit its new record first and change the runtime only after the
        commit succeeded; a failed commit raises and leaves memory as it was."""
        self.generation.bump()
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
            "alerts": self._stored_alerts(op),
        }
        pool = next(iter(op.pools.values()), None)
        record = OperationRecord(
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
        # job rows collected in this heartbeat go in the same commit: a completed operation never has a job that
        # the store still calls running (a kill right after the operation's commit would leave it so forever);
        # those other heartbeats queued for the group commit are stored first, so none lands after it
        self.commits.flush()
        jobs = list(self._job_writes.values()) if self._job_writes else []
        self.store.put_operation(record, mutation=mutation or self._start_mutation, jobs=jobs)
        if jobs and self._job_writes is not None:
            self._job_writes.clear()
        self.counts.put(record, final=op.is_final)

    def _stored_alerts(self, op: LiveOperation) -> dict[str, Any]:
        """The alerts saved with ``op``; a finishing one (committed before it leaves the trees) keeps only those
        of its spec: the admission alerts (pending, ...) and starvation belong to an operation in a tree."""
        alerts = self.alerts(op)
        if op.is_final:
            registered = self.registry.operations.get(op.id)
            dropped = {OPERATION_STARVING, *(registered.alerts if registered is not None else ())}
            alerts = {key: value for key, value in alerts.items() if key not in dropped}
        return alerts

    @staticmethod
    def _planned(op: LiveOperation, **changes: Any) -> LiveOperation:
        """A shallow copy of ``op`` with ``changes``: what the store commits before the runtime changes."""
        planned = copy.copy(op)
        for name, value in changes.items():
            setattr(planned, name, value)
        return planned

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

    @staticmethod
    def _parse_start(operation_type: str, spec: Any) -> OperationSpec:
        """The type and spec checks of a start (before admission)."""
        if operation_type != "vanilla":
            raise PooltreeError(
                f'Operation type "{operation_type}" is not supported: pooltree is a scheduler that runs vanilla '
                "operations (yt vanilla, run_operation with a VanillaSpecBuilder); map, reduce, sort, merge and "
                "other data-processing operations and table I/O are not available",
                attributes={"operation_type": operation_type},
            )
        if not isinstance(spec, Mapping):
            raise ConfigError("spec", f"expected a map, got {type(spec).__name__}")
        return OperationSpec.parse(dict(spec), "spec")

    def check_start(
        self, operation_type: str, spec: Any, user: str, operation_id: str
    ) -> tuple[OperationSpec, LiveVanillaController, dict[str, str]]:
        """Every check of :meth:`start_operation` (type, spec, tasks, admission in every tree), nothing stored or
        changed: the parsed spec, a controller that is attached nowhere, and tree → pool (a dry run)."""
        model = self._parse_start(operation_type, spec)
        tasks = build_tasks(operation_id, model)
        controller = live_controller(operation_id, model, tasks)
        with self.config_lock, self.lock:
            pools = self.registry.check_operation(operation_id, model, user=user)
        return model, controller, pools

    def start_operation(
        self,
        operation_type: str,
        spec: Any,
        user: str,
        now: float,
        *,
        operation_id: str | None = None,
        mutation_id: str | None = None,
    ) -> LiveOperation:
        """Validate the spec, admit the operation in its trees, commit it to the store, attach its controller.

        A failed commit rolls the runtime back (nothing of the operation is left to run later) and raises.
        ``mutation_id`` is saved with the operation in one commit, answered ``{"operation_id": ...}`` on a retry.
        """
        model = self._parse_start(operation_type, spec)
        operation_id = operation_id or new_guid()
        tasks = build_tasks(operation_id, model)
        with self.config_lock, self.lock:
            controller = live_controller(operation_id, model, tasks)
            # spec schedule_in_single_tree: one of its trees is chosen now, the others are erased
            in_trees, erased = restrict_to_single_tree(
                self.registry,
                self.cores,
                operation_id,
                model,
                user=user,
                operation_type=operation_type,
                new_demand=controller.needed_resources,
            )
            # spec tentative_pool_trees: more trees the operation runs in on trial (live/tentative.py)
            tentative = (
                self.tentative.trees_for_start(spec, operation_type) if asks_for_tentative_trees(spec) else []
            )
            in_trees = with_tentative_trees(
                in_trees, in_trees.pool_trees_or(self.registry.default_tree), tentative
            )
            registered = self.registry.register_operation(
                operation_id, in_trees, user=user, operation_type=operation_type, now=now
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
            if erased:
                op.runtime_parameters["erased_trees"] = erased
            self.tentative.attach(op, [t for t in tentative if t in op.trees])
            op.pools = {
                name: opts["pool"]
                for name, opts in op.runtime_parameters["scheduling_options_per_pool_tree"].items()
            }
            # validated and admitted; now committed (with the mutation id, in the same transaction), and rolled
            # back from the runtime if the commit fails: a refused start leaves nothing that could run later
            self._start_mutation = (
                Mutation(mutation_id, {"operation_id": operation_id}, now) if mutation_id else None
            )
            try:
                saved = op.revision
                self._sync_state(
                    op, now
                )  # saves the operation in its state after admission (pending or running)
                if op.revision == saved:
                    self._save_operation(op)
            except BaseException:
                self._roll_back_start(op, now)
                raise
            finally:
                self._start_mutation = None
            # No fair-share update per start (its cost grows with the operations in the tree): an operation that
            # can run now is published before the next heartbeat schedules and by the service loop at once. A
            # pending one changes no share (no usage, no demand): no update for it; views show it with zero
            # shares until an update includes it.
            if registered.state is OperationState.RUNNING:
                self._stale_trees.update(op.trees)
            for name in op.trees:
                self.views.forget(name)  # placements and pool counters changed; rebuilt when read
            return op

    def _roll_back_start(self, op: LiveOperation, now: float) -> None:
        """Undo a start whose commit failed: the operation leaves the cores, the trees and the scheduler."""
        self._detach(op)
        self.operations.pop(op.id, None)
        if op.id in self.registry.operations:
            activated = self.registry.unregister_operation(op.id, now)
            # if the store fails again the leader steps down and revives from the store
            with contextlib.suppress(PooltreeError):
                self._on_activated(activated, now)

    def _attach(self, op: LiveOperation) -> None:
        for name in op.trees:
            self.cores[name].attach_controller(op.id, op.controller)

    def _detach(self, op: LiveOperation) -> list[Allocation]:
        running: list[Allocation] = []
        self.tentative.forget(op.id)
        for name in op.trees:
            core = self.cores.get(name)
            if core is None or op.id not in core.controllers:
                continue
            running.extend(core.detach_controller(op.id))
        return running

    def operation(self, operation_id: str) -> LiveOperation:
        op = self.operations.get(operation_id)
        if op is None:
            raise no_such_operation(operation_id)
        return op

    def finish_operation(
        self, operation_id: str, final: str, now: float, *, error: dict[str, Any] | None = None
    ) -> None:
        """Complete, abort or fail an operation: committed to the store first, then its running jobs are
        aborted on their nodes and it leaves the trees (a failed commit raises and changes nothing)."""
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
            intermediate = {"completed": "completing", "aborted": "aborting", "failed": "failing"}[final]
            events = [*op.events, {"state": intermediate, "time": now}, {"state": final, "time": now}]
            self._commit_operation(
                self._planned(op, state=final, events=events, finish_time=now, error=error),
            )
            # committed: act
            for allocation in self._detach(op):
                self._abort_on_node(allocation, reason, now)
            for node in op.controller.reserved_nodes():
                for job_id in op.controller.release(node):
                    job = self.jobs.get(job_id)
                    if job is not None:
                        self._abort_on_node_by_job(job, reason, now)
            activated = self.registry.finish_operation(operation_id, OperationState(final), now)
            op.error, op.events, op.finish_time, op.state = error, events, now, final
            op.revision += 1
            for listener in self.listeners:
                listener(op.id, final)
            self._dirty.update(op.trees)
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
            self._commit_suspended(op, True)
            self._dirty.update(op.trees)
            if abort_running_jobs:
                for job in list(op.jobs.values()):
                    if job.state == "running" and job.allocation_id is not None:
                        node = self.nodes.get(job.address)
                        if node is not None:
                            node.aborts.append({"job_id": job.id, "reason": "operation_suspended"})

    def resume_operation(self, operation_id: str, now: float) -> None:
        with self.lock:
            op = self.operation(operation_id)
            self._commit_suspended(op, False)
            self._dirty.update(op.trees)

    def _commit_suspended(self, op: LiveOperation, suspended: bool) -> None:
        """Commit the suspension (or resumption) to the store, then suspend or resume in the runtime; a failed
        commit raises and leaves the runtime as it was."""
        if op.is_final:
            raise PooltreeError(
                f"Operation {op.id} has already finished ({op.state})",
                attributes={"operation_id": op.id, "state": op.state},
            )
        self._commit_operation(self._planned(op, suspended=suspended))
        if suspended:
            self.registry.suspend_operation(op.id)
        else:
            self.registry.resume_operation(op.id)
        op.suspended = suspended
        op.revision += 1

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
            # validated in every tree, committed, and only then applied (a failed commit changes nothing)
            updates = self.registry.prepare_operation_parameters(operation_id, parameters)
            per_tree = _runtime_parameters(self.registry, op.id, op.trees, updates)
            runtime_parameters = {
                **{k: v for k, v in op.runtime_parameters.items() if k != "scheduling_options_per_pool_tree"},
                **{k: parameters[k] for k in ("owners", "acl", "annotations") if k in parameters},
                "scheduling_options_per_pool_tree": per_tree,
            }
            pools = {name: opts["pool"] for name, opts in per_tree.items()}
            self._commit_operation(self._planned(op, runtime_parameters=runtime_parameters, pools=pools))
            activated = self.registry.commit_operation_parameters(operation_id, updates, now)
            op.runtime_parameters, op.pools = runtime_parameters, pools
            op.revision += 1
            self._dirty.update(op.trees)
            # what follows from the change (this or other operations now running) is written as it happens,
            # as every activation is; a restart recomputes it from the committed parameters anyway
            self._on_activated(activated, now)
            self._sync_state(op, now)
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
        """The periodic update of one tree: finish completed operations, recompute shares, publish."""
        with self.lock:
            if tree not in self.cores:
                return
            self.now = max(self.now, now)
            for op in list(self.operations.values()):
                if tree in op.trees:
                    self._check_completion(op, now)
            # time_limit / job_time_limit (the core's rule): jobs past their limit are stopped at their nodes'
            # next heartbeats, operations past theirs fail.
            for operation_id, error in self.cores[tree].enforce_time_limits(now):
                op = self.operations.get(operation_id)
                if op is not None and not op.is_final:
                    self.finish_operation(operation_id, "failed", now, error=error)
            self.cores[tree].launch_speculative_jobs(now)  # copies of jobs past job_speculation_timeout
            self._update_tree(tree, now)
            for operation_id, error in self.alert_center.operations_to_fail(now, tree):
                if operation_id in self.operations:
                    self.finish_operation(operation_id, "failed", now, error=error)

    def needs_update(self, tree: str, now: float, period: float) -> bool:
        """Whether ``tree`` is due an update: at once when operations wait to run (stale); at its period when
        its inputs changed (dirty), when operations run in it (usage, demand and starvation move with time) or
        when a pool has integral guarantees (volumes accumulate with time). A tree holding only pending
        operations and no change would recompute the same shares, so it is left alone."""
        if tree in self._stale_trees:
            return True
        last = self.last_update.get(tree)
        if last is None:
            return True
        if now - last < period:
            return False
        if tree in self._dirty:
            return True
        pool_tree = self.registry.trees.get(tree)
        if pool_tree is None:
            return False
        root = pool_tree.root
        if root.running_operation_count or root.lightweight_running_operation_count:
            return True
        return any(
            pool.config is not None and pool.config.integral_guarantees.guarantee_type != "none"
            for pool in pool_tree.pools.values()
        )

    def mark_dirty(self, tree: str) -> None:
        """Inputs of ``tree`` changed outside the operation commands (nodes): publish at the next period."""
        self._dirty.add(tree)

    def _update_tree(self, tree: str, now: float) -> None:
        self._stale_trees.discard(tree)
        self._dirty.discard(tree)
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
        core.update_fair_share(now)
        self.fair_share_updates[tree] += 1
        self.published_updates += 1
        self.last_update[tree] = now
        self.views.forget(tree)
        self._drain(core)
        self.generation.updated(tree, core)
        for listener in self.update_listeners:
            listener(tree, now)

    def operation_shares(self, tree: str, operation_id: str) -> dict[str, Any] | None:
        """One operation's shares and starvation in the last published update of ``tree``; zero shares for a
        pending operation started since (what the next update would show); None for a running one not yet
        published."""
        core = self.cores.get(tree)
        result = core.last_result if core is not None else None
        if result is None:
            return None
        if operation_id not in result.elements:
            tree_op = core.pool_tree.operations.get(operation_id)
            if tree_op is None or tree_op.running:
                return None
            return {
                "fair_share_ratio": 0.0,
                "usage_ratio": 0.0,
                "demand_ratio": 0.0,
                "starvation_status": "non_starving",
            }
        element = result.elements[operation_id]
        view: dict[str, Any] = {
            "fair_share_ratio": float(max(element.fair_share, default=0.0)),
            "usage_ratio": float(max(element.usage_share, default=0.0)),
            "demand_ratio": float(max(element.demand_share, default=0.0)),
            "weight": float(element.weight),
        }
        try:
            view["starvation_status"] = core.strategy.element_view(operation_id)["starvation_status"]
        except (PooltreeError, KeyError):
            view["starvation_status"] = "non_starving"
        return view

    def _drain(self, core: SchedulerCore) -> None:
        """Keep the core's events in the bounded event log (orchid ``scheduler/event_log``); a preempted
        allocation's event names its job and, YTsaurus style, ``preempted_for`` (operation, allocation, job)."""
        for event in core.drain_events():
            allocation_id = event.get("allocation_id")
            if allocation_id is not None:
                job_id = self.allocation_jobs.get(allocation_id)
                if job_id is not None:
                    event["job_id"] = job_id
            if event.get("event") == "allocation_preempted" and event.get("preemptor_operation_id"):
                preemptor = event.get("preemptor_allocation_id")
                event["preempted_for"] = {
                    "operation_id": event["preemptor_operation_id"],
                    "allocation_id": preemptor,
                    "job_id": self.allocation_jobs.get(preemptor or ""),
                }
            self.event_log.append(event)
            self.event_count += 1

    # ------------------------------------------------------------------ views

    def alerts(self, op: LiveOperation, now: float | None = None) -> dict[str, Any]:
        """The operation's ``alerts`` attribute (see ``pooltree.server.alerts``)."""
        return self.alert_center.operation_alerts(op, self.now if now is None else now)

    def scheduler_alerts(self) -> list[dict[str, Any]]:
        """``//sys/scheduler/@alerts``: every scheduler-level alert holding now."""
        return self.alert_center.scheduler_alerts()

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


class TreeViews(Mapping[str, dict[str, Any]]):
    """``tree → orchid view`` of the last published fair-share update, built on first read and kept until the
    next update of that tree. Building a view costs per element of the tree (shares, placement, strategy
    fields), far more than the update at thousands of pending operations, so it is paid only when read (the
    orchid, ``/metrics``). Read with the scheduler's lock held."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self.scheduler = scheduler
        self._built: dict[str, dict[str, Any]] = {}

    def forget(self, tree: str) -> None:
        self._built.pop(tree, None)

    def _published(self) -> list[str]:
        return [name for name, core in self.scheduler.cores.items() if core.last_result is not None]

    def __getitem__(self, tree: str) -> dict[str, Any]:
        view = self._built.get(tree)
        if view is not None:
            return view
        core = self.scheduler.cores.get(tree)
        if core is None or core.last_result is None:
            raise KeyError(tree)
        view = tree_view(core.pool_tree, core.last_result, core.total_resources)
        missing = [i for i in core.pool_tree.operations if i not in core.last_result.elements]
        if missing:
            positions = core.pool_tree.pending_positions()
            for operation_id in missing:
                view["operations"][operation_id] = unpublished_operation_view(
                    core.pool_tree, operation_id, positions.get(operation_id)
                )
        for section in ("pools", "operations"):
            for element_id, entry in view[section].items():
                try:
                    extra = core.strategy.element_view(element_id)
                except PooltreeError:
                    continue
                if section == "operations":
                    for old_name, name in _ORCHID_JOB_NAMES:  # YTsaurus's operation orchid still says "job"
                        if name in extra:
                            extra[old_name] = extra[name]
                    registered = core.pool_tree.operations.get(element_id)
                    if registered is not None:
                        extra["aggressive_preemption_allowed"] = operation_aggressive_preemption_allowed(
                            core.pool_tree, registered.spec
                        )
                    controller = core.controllers.get(element_id)
                    if controller is not None:
                        extra["progress"] = controller.progress()
                entry.update(extra)
        if core.strategy.segments.enabled:
            view["scheduling_segments"] = core.segments_view()
        if core.strategy.gpu_policy.config.planning:
            view["gpu_assignment_plan"] = core.gpu_policy_view()
        self._built[tree] = view
        return view

    def __iter__(self) -> Iterator[str]:
        return iter(self._published())

    def __len__(self) -> int:
        return len(self._published())


_ORCHID_JOB_NAMES = (
    ("preemptible_job_count", "preemptible_allocation_count"),
    ("aggressively_preemptible_job_count", "aggressively_preemptible_allocation_count"),
)


class StrategyViews(Mapping[str, "ElementStrategyViews"]):
    """``tree → element id → strategy fields`` (starvation, satisfaction, ...) of the published tree, each read
    from the strategy when looked up (one element costs one element)."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self.scheduler = scheduler

    def __getitem__(self, tree: str) -> ElementStrategyViews:
        core = self.scheduler.cores.get(tree)
        if core is None or core.last_result is None:
            raise KeyError(tree)
        return ElementStrategyViews(core)

    def __iter__(self) -> Iterator[str]:
        return iter(name for name, core in self.scheduler.cores.items() if core.last_result is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class ElementStrategyViews(Mapping[str, dict[str, Any]]):
    """The strategy fields of the elements of one published tree, read when looked up."""

    def __init__(self, core: SchedulerCore) -> None:
        self.core = core

    def __getitem__(self, element_id: str) -> dict[str, Any]:
        result = self.core.last_result
        if result is None or element_id not in result.elements:
            raise KeyError(element_id)
        try:
            return self.core.strategy.element_view(element_id)
        except PooltreeError:
            raise KeyError(element_id) from None

    def __iter__(self) -> Iterator[str]:
        result = self.core.last_result
        return iter(result.elements if result is not None else ())

    def __len__(self) -> int:
        result = self.core.last_result
        return len(result.elements) if result is not None else 0
