"""The live scheduler's state: pool trees with one ``SchedulerCore`` each, operations, jobs, exec nodes.

``LiveScheduler`` is driven by the service (commands, node heartbeats, the periodic fair-share update and the node
timeout sweep); time is passed in as seconds. Operations register in ``PoolTrees`` (admission, count limits,
pending queues); their controller (``LiveVanillaController``) is attached to the ``SchedulerCore`` of every tree
they run in. Every state change is written through to the ``Store`` so a restarted scheduler revives operations,
and the jobs agents still run are re-attached (not restarted) on the agents' first heartbeats.

The state lives here; the work is done by parts composed into it, each over the state under the lock:
``pool_trees`` (``pool_trees.py``), ``commands`` (operation commands, ``commands.py``), ``persistence`` (store
writes, ``persistence.py``), ``updates`` (fair-share updates and the event log, ``updates.py``), ``heartbeats``
(``jobs.py``), ``revival`` (``revival.py``), ``tentative`` (``tentative.py``); ``views.py`` holds the read views.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any

from pooltree.alerts import AlertSettings
from pooltree.config import OperationSpec
from pooltree.node.wire import HeartbeatRequest
from pooltree.server.live.alerts import SchedulerAlerts
from pooltree.server.live.commands import OperationCommands
from pooltree.server.live.commit import GroupCommit, commit_interval
from pooltree.server.live.counts import OperationCounts
from pooltree.server.live.generation import StateGeneration
from pooltree.server.live.index import Reservations, RunningJobs
from pooltree.server.live.jobs import DeferredHeartbeat, LiveJobs, Then
from pooltree.server.live.lock import SchedulingLock
from pooltree.server.live.model import (
    DEFAULT_FAIR_SHARE_UPDATE_PERIOD,
    DEFAULT_HEARTBEAT_PERIOD,
    LiveOperation,
    LiveVanillaController,
    NodeState,
    check_update_period,
    no_such_operation,
)
from pooltree.server.live.persistence import LivePersistence
from pooltree.server.live.pool_trees import LivePoolTrees
from pooltree.server.live.revival import LiveRevival
from pooltree.server.live.snapshot import ReadPublisher
from pooltree.server.live.tentative import LiveTentative
from pooltree.server.live.throttle import HeartbeatThrottle, ThrottleSettings
from pooltree.server.live.updates import FairShareUpdates
from pooltree.server.live.views import StrategyViews, TreeViews, progress
from pooltree.server.store import OperationFilter, Store
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.model import HeartbeatResult, NodeHeartbeat
from pooltree.tree import PoolTrees

EVENT_LOG_SIZE = 2_000
"""Events kept in memory for the orchid's ``event_log`` and the web UI (oldest dropped first)."""
FINAL_STATES = ("completed", "failed", "aborted")
TreePass = Callable[[str, SchedulerCore, NodeHeartbeat, float], HeartbeatResult]
"""(tree, its core, the node's heartbeat, now) → what the strategy's stages decided (``LiveScheduler.tree_pass``)."""
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
        self.config_lock: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        """Taken before ``lock`` by starts: the service sets Cypress's lock, so a pool tree removal checked
        against the running operations cannot interleave with a start into that tree."""
        self.registry = PoolTrees({})
        self.cores: dict[str, SchedulerCore] = {}
        self.connection_time: float | None = None
        """When this scheduler connected (revived at start): trees' ``node_reconnection_timeout`` counts from it."""
        self.operations: dict[str, LiveOperation] = {}
        self.jobs = RunningJobs()
        """Running jobs by id and by node."""
        self.reservations = Reservations()
        """The operations holding revived jobs per node."""
        self.heartbeat_throttle = HeartbeatThrottle(throttle_settings)
        """Heartbeats in flight; throttles them past YTsaurus's concurrent heartbeat limits (``throttle.py``)."""
        self.commits = GroupCommit(
            store.put_jobs,
            store.put_operations,
            store.checkpoint_journal,
            interval=commit_interval(),
            after_due=store.checkpoint_due,
        )
        """Job records of heartbeats and starts' operation records, stored in batches outside the lock, the
        store's journal checkpointed after a batch's waiters were woken (``commit.py``)."""
        self.allocation_jobs: dict[str, str] = {}
        self.nodes: dict[str, NodeState] = {}
        self.expected_nodes: dict[str, float] = {}
        self.views = TreeViews(self)
        """Orchid views of the last published update per tree, built when first read after it (lock held)."""
        self.strategy_views = StrategyViews(self)
        self.preemptions: Counter[tuple[str, str]] = Counter()
        self.durations: dict[str, tuple[int, float, float]] = {}
        """work → (count, total seconds, longest), measured by the service around heartbeats and updates."""
        self._durations_lock = threading.Lock()
        self.listeners: list[Callable[[str, str], None]] = []
        self.job_files: Callable[[str, str], list[dict[str, Any]]] | None = None
        """operation id, task → the ``files`` of a job spec (set by the service; files.FileService.job_files)."""
        self.isolate_job_network = False
        """Jobs get a network namespace of their own (``network: isolated`` in the job spec): set when the scheduler
        runs without authentication, where any job reaching it would be root (nodes that cannot isolate refuse)."""
        self.alert_center = SchedulerAlerts(self, alert_settings)
        self.pool_trees_error: dict[str, Any] | None = None
        """The ``update_pools`` alert while the last pool trees change was refused (``apply_pool_trees``)."""
        self.event_log: deque[dict[str, Any]] = deque(maxlen=EVENT_LOG_SIZE)
        """The latest scheduler events (operations started/finished, allocations started/finished/preempted)."""
        self.event_count = 0
        """Events ever appended to ``event_log`` (readers find the new ones by it)."""
        self.update_listeners: list[Callable[[str, float], None]] = []
        """Called with (tree, now) after every fair-share update of a tree (the web UI's history samples)."""
        self.now = 0.0
        """The latest time a command, heartbeat or update brought (alerts read at other times use it)."""
        self.counts = OperationCounts()
        """Operations per state/user/pools/type for ``list_operations`` counters (every stored operation)."""
        self.generation = StateGeneration()
        """Moves with every change that can give a node's heartbeat work (``generation.py``; node shards)."""
        self.tree_pass: TreePass | None = None
        """Runs the strategy's stages of a node's heartbeat in one tree in place of ``core.process_heartbeat``:
        node shards that start allocations (``pooltree.shards.starts``); None: the core runs them."""
        self.default_tentative_pool_trees: tuple[str, ...] = ()
        """The scheduler's ``default_tentative_pool_trees`` (spec ``use_default_tentative_pool_trees``)."""
        self.pool_trees = LivePoolTrees(self)
        """Applying the pool trees document (``pool_trees.py``)."""
        self.persistence = LivePersistence(self)
        """Operation and job records written through to the store (``persistence.py``)."""
        self.commands = OperationCommands(self)
        """Start, finish, suspend, resume, parameters (``commands.py``)."""
        self.updates = FairShareUpdates(self)
        """Fair-share updates and publishing (``updates.py``)."""
        self.tentative = LiveTentative(self)
        """Operations running in tentative pool trees (``tentative.py``)."""
        self.heartbeats = LiveJobs(self)
        """Node heartbeats and jobs (``jobs.py``)."""
        self.revival = LiveRevival(self)
        """Revival after a restart (``revival.py``)."""
        self.snapshots = ReadPublisher(self)
        """The snapshot the orchid and the web pages read, published with the trees (``snapshot.py``)."""
        self.counts.load(
            store.list_operations(OperationFilter(limit=ALL_OPERATIONS)), final_states=FINAL_STATES
        )

    def process_heartbeat(
        self, heartbeat: HeartbeatRequest, now: float, *, throttled: bool = False
    ) -> dict[str, Any]:
        """One node heartbeat: its answer, once its job records are stored (``jobs.py``)."""
        return self.heartbeats.process_heartbeat(heartbeat, now, throttled=throttled)

    def process_heartbeat_unwaited(
        self, heartbeat: HeartbeatRequest, now: float, *, throttled: bool = False, then: Then | None = None
    ) -> tuple[dict[str, Any], int]:
        """``process_heartbeat`` without its wait for the store: (the answer, the group commit ticket the caller
        waits for before the answer leaves, ``jobs.py``); ``then`` called with the answer in its hold."""
        return self.heartbeats.process_heartbeat_unwaited(heartbeat, now, throttled=throttled, then=then)

    def try_process_heartbeat(
        self, heartbeat: HeartbeatRequest, now: float, *, throttled: bool = False
    ) -> tuple[dict[str, Any], int] | DeferredHeartbeat | None:
        """``process_heartbeat`` without waiting for the lock or the store; a ``DeferredHeartbeat`` to finish on a
        thread when its reports made a tree stale (``jobs.py``)."""
        return self.heartbeats.try_process_heartbeat(heartbeat, now, throttled=throttled)

    @property
    def publishing(self) -> bool:
        """Whether a heartbeat would publish a stale tree first (``jobs.py``)."""
        return self.heartbeats.publishing

    def stale_for_full_nodes(self) -> bool:
        """Whether the next heartbeat the leader processes does work a full node's would too: publish a stale
        tree, apply tentative bans (``StateGeneration.settle``: no full node's heartbeat answered meanwhile)."""
        return bool(self.updates.waiting or self.tentative.pending_bans)

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
        """Apply the last good pool trees document (from Cypress) to the runtime (``pool_trees.py``); the read
        snapshot is published after it, refused or not (``update_pools`` alert)."""
        with self.lock:
            try:
                self.pool_trees.apply_pool_trees(
                    definitions, default_tree, now, single_tree_default=single_tree_default
                )
            finally:
                self.snapshots.publish()

    def set_user_default_parent_pools(self, mapping: Mapping[str, str], now: float) -> None:
        """Apply ``//sys/scheduler/user_to_default_pool`` (from Cypress, ``pool_trees.py``); the read snapshot is
        published after it."""
        with self.lock:
            try:
                self.pool_trees.set_user_default_parent_pools(mapping, now)
            finally:
                self.snapshots.publish()

    def fair_share_update_period(self, tree: str) -> float:
        """The period of ``tree``'s fair-share update: the scheduler's ``fair_share_update_period`` (YTsaurus has
        it in the strategy config, one value for every tree, not in a tree's config)."""
        return self.update_period

    def record_duration(self, work: str, seconds: float) -> None:
        """Account one heartbeat / fair-share update that took ``seconds`` (the service measures; its own small
        lock, not the scheduling one)."""
        with self._durations_lock:
            count, total, longest = self.durations.get(work, (0, 0.0, 0.0))
            self.durations[work] = (count + 1, total + seconds, max(longest, seconds))

    # ------------------------------------------------------------------ operations (commands.py)

    def check_start(
        self, operation_type: str, spec: Any, user: str, operation_id: str
    ) -> tuple[OperationSpec, LiveVanillaController, dict[str, str]]:
        """Every check of :meth:`start_operation`, nothing stored or changed (a dry run)."""
        return self.commands.check_start(operation_type, spec, user, operation_id)

    def start_operation(
        self,
        operation_type: str,
        spec: Any,
        user: str,
        now: float,
        *,
        operation_id: str | None = None,
        mutation_id: str | None = None,
        retry: bool = True,
    ) -> LiveOperation:
        """Validate the spec, admit the operation in its trees, commit it to the store, attach its controller."""
        return self.commands.start_operation(
            operation_type, spec, user, now, operation_id=operation_id, mutation_id=mutation_id, retry=retry
        )

    def operation(self, operation_id: str) -> LiveOperation:
        op = self.operations.get(operation_id)
        if op is None:
            raise no_such_operation(operation_id)
        return op

    def finish_operation(
        self, operation_id: str, final: str, now: float, *, error: dict[str, Any] | None = None
    ) -> None:
        """Complete, abort or fail an operation: committed to the store first, then acted on."""
        self.commands.finish_operation(operation_id, final, now, error=error)

    def suspend_operation(self, operation_id: str, now: float, *, abort_running_jobs: bool = False) -> None:
        self.commands.suspend_operation(operation_id, now, abort_running_jobs=abort_running_jobs)

    def resume_operation(self, operation_id: str, now: float) -> None:
        self.commands.resume_operation(operation_id, now)

    def update_operation_parameters(self, operation_id: str, parameters: Any, now: float) -> None:
        """Pool, weight and resource limits per tree; validated in every tree first, the last good kept."""
        self.commands.update_operation_parameters(operation_id, parameters, now)

    # ------------------------------------------------------------------ fair share (updates.py)

    def update_fair_share(self, tree: str, now: float) -> None:
        """The periodic update of one tree: finish completed operations, recompute shares, publish."""
        self.updates.update_fair_share(tree, now)

    def needs_update(self, tree: str, now: float, period: float) -> bool:
        """Whether ``tree`` is due an update."""
        return self.updates.needs_update(tree, now, period)

    def mark_dirty(self, tree: str) -> None:
        """Inputs of ``tree`` changed outside the operation commands (nodes): publish at the next period."""
        self.updates.mark_dirty(tree)

    def operation_shares(self, tree: str, operation_id: str) -> dict[str, Any] | None:
        """One operation's shares and starvation in the last published update of ``tree``."""
        return self.updates.operation_shares(tree, operation_id)

    # ------------------------------------------------------------------ views

    def alerts(self, op: LiveOperation, now: float | None = None) -> dict[str, Any]:
        """The operation's ``alerts`` attribute (see ``pooltree.server.live.alerts``)."""
        return self.alert_center.operation_alerts(op, self.now if now is None else now)

    def scheduler_alerts(self) -> list[dict[str, Any]]:
        """``//sys/scheduler/@alerts``: every scheduler-level alert holding now."""
        return self.alert_center.scheduler_alerts()

    def unrecognized_spec(self, op: LiveOperation) -> dict[str, Any]:
        """The spec's unrecognized keys (``OperationSpec.unrecognized_spec``), found once per operation."""
        if op.unrecognized is None:
            op.unrecognized = op.model.unrecognized_spec()
        return copy.deepcopy(op.unrecognized) if op.unrecognized else {}

    def progress(self, op: LiveOperation) -> dict[str, Any]:
        """Job counts as ``brief_progress.jobs`` needs them (``views.py``)."""
        return progress(op)
