"""The simulator's event engine: one `SchedulerCore` per pool tree driven on a simulated clock.

Events live in one heap ordered by ``(time, class, key, subkey)``; every key is a stable number (node index,
job serial, operation index), so ties resolve the same way in every run and the whole run is a deterministic
function of the scenario and the seed. Classes at equal times run in this order: node failures/restores, job
events (finish, memory peak, interruption done), operation arrivals and lifetime ends, fair-share updates, node
heartbeats (so a heartbeat sees everything that happened at its instant, as a real node reports it).

Randomness: each operation has its own ``random.Random("<seed>/<operation id>")`` (job durations and memory
peaks, drawn when a job starts); a node's heartbeat times are a pure function ``phase + k·period + jitter(k)``
of the seed, the node index and the beat number ``k`` (a hash, not a shared stream), so skipping a heartbeat
never shifts anyone's random numbers.

Exact heartbeat skipping: a heartbeat that `SchedulerCore.heartbeat_is_noop` proves empty is not processed
and the node goes to sleep (no events) until something it depends on changes: an allocation on it ends or it
fails/returns (its free resources), demand appears that may fit it (arrivals, re-queued jobs, activations),
or a fair-share update publishes starving operations or violated limits (then it wakes at the first beat whose
preemptive backoff has elapsed). The beats it slept through are replayed only for their one side effect (the
preemptive-scheduling timestamp), in O(1) per elapsed backoff. `tests/sim` checks that runs with and without
skipping write identical events and summaries.

Fair-share updates are skipped only when provably identical: nothing started, finished, registered or failed
since the previous update, no pool has integral guarantees (their volumes depend on time), and no element is
below its fair share (starvation timers depend on time).
"""

from __future__ import annotations

import heapq
import math
import random
import time as wall_clock
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pooltree.alerts import AlertSettings, unschedulable_task
from pooltree.config import TagFilter
from pooltree.config.support import unsupported_options
from pooltree.controllers.memory import (
    RESOURCE_OVERDRAFT,
    JobMemory,
    TaskMemoryOptions,
    TaskMemoryReserve,
    select_overdraft_victims,
)
from pooltree.controllers.operations import OperationControllerBase, TaskSpec, make_controller
from pooltree.errors import ConfigError, PooltreeError
from pooltree.resources import MEMORY, RESOURCE_COUNT, RESOURCES, Vector, format_size
from pooltree.sim.scenario import Scenario, SimOperation, SimTask, node_addresses
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.model import Allocation, FinishedAllocation, HeartbeatResult, NodeHeartbeat
from pooltree.tree import PoolTree

ROOT = "<Root>"
_RECORD_ARRAYS = frozenset({"fair_share", "usage_share", "demand_share", "below"})
"""Fair-share result arrays `_record` reads in bulk (else it reads ElementResults one by one)."""
NODE_EVENT, JOB_EVENT, OPERATION_EVENT, FAIR_SHARE_EVENT, HEARTBEAT_EVENT = range(5)
_JOB_PEAK, _JOB_END = 0, 1
_MASK64 = (1 << 64) - 1
MAX_PLOT_POINTS = 4000
VANILLA_MEMORY_PEAK_AFTER = 60.0
"""A long-running vanilla job reaches its memory peak this long after it starts (map jobs: half-way)."""

EventSink = Callable[[dict[str, Any]], None]
TimelineSink = Callable[[list[Any]], None]
ProgressCallback = Callable[[float, float, int, int], None]


def _mix(x: int) -> int:
    """splitmix64 finalizer: a fast, well-spread 64-bit hash."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


@dataclass(eq=False)
class _Node:
    index: int
    address: str
    limits: Vector
    tags: frozenset[str]
    tree: str
    phase: float
    salt: int
    alive: bool = True
    k_next: int = 0
    token: int = 0
    sleeping: bool = False
    has_timer: bool = False
    jobs: set[str] = field(default_factory=set)


@dataclass(eq=False)
class _Job:
    allocation: Allocation
    op: _Op
    node: _Node
    serial: int
    start: float
    duration: float | None
    task: SimTask
    user_peak: float = 0.0
    peak_total: float = 0.0
    memory_now: float = 0.0
    memory_limit_total: float = 0.0
    end: float | None = None
    end_finished: FinishedAllocation | None = None
    token: int = 0


@dataclass(eq=False)
class _Op:
    index: int
    spec: SimOperation
    tree: str
    rng: random.Random
    controller: OperationControllerBase | None = None
    reserves: dict[str, TaskMemoryReserve] = field(default_factory=dict)
    state: str = "submitted"
    start_time: float | None = None
    finish_time: float | None = None
    error: str | None = None
    jobs_total_duration: float = 0.0
    job_max_duration: float = 0.0
    preempted_job_time: float = 0.0
    preempted_job_count: int = 0
    wasted_job_time: float = 0.0
    pool: str = ""
    unfit_check_due: bool = False
    """A "can any node ever fit this" check is scheduled (the operation's job fit no online node)."""


@dataclass
class _TreeState:
    name: str
    core: SchedulerCore
    integral: bool
    changed: bool = True
    pending_ops: set[str] = field(default_factory=set)
    pending_min: Vector | None = None
    pending_dirty: bool = True
    idle_sleepers: set[int] = field(default_factory=set)
    pools: list[str] = field(default_factory=list)
    pool_set: set[str] = field(default_factory=set)
    series_interval: float = 1.0
    last_series: float | None = None
    last_sample: float | None = None
    matrix: np.ndarray | None = None
    """Per pool (in ``pools`` order): 1, fair share, usage, demand ratios, below-fair-share and starving flags."""
    acc: np.ndarray = field(default_factory=lambda: np.zeros((0, 6)))
    usage_integral: Vector = field(default_factory=lambda: np.zeros(RESOURCE_COUNT))
    total_integral: Vector = field(default_factory=lambda: np.zeros(RESOURCE_COUNT))
    preempted_by_pool: Counter[str] = field(default_factory=Counter)
    series: dict[str, list[tuple[float, float, float, float]]] = field(default_factory=dict)
    last_values: dict[str, tuple[float, float, float, str, str]] = field(default_factory=dict)
    last_root: tuple[Vector, Vector] | None = None


@dataclass
class SimulationResult:
    """Everything the report writers need: the summary document, operations.csv rows and plot series."""

    summary: dict[str, Any]
    operation_rows: list[dict[str, Any]]
    pool_series: dict[str, dict[str, list[tuple[float, float, float, float]]]]
    """tree → pool → [(time, fair_share_ratio, usage_ratio, demand_ratio)] (downsampled for plots)."""
    preemptions_by_reason: dict[str, int]
    stats: dict[str, Any]
    wasted_by_operation: dict[str, float] = field(default_factory=dict)
    """Operation id → run time of its jobs that were aborted or failed (for comparisons; not in summary.json)."""
    pool_parents: dict[str, str | None] = field(default_factory=dict)
    """Pool (summary key) → its parent's key at the end of the run (for comparisons; not in summary.json)."""


class Simulation:
    """One run of a scenario (create, then :meth:`run` once)."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        seed: int | None = None,
        until: float | None = None,
        event_sink: EventSink | None = None,
        timeline_sink: TimelineSink | None = None,
        progress: ProgressCallback | None = None,
        skip_idle_heartbeats: bool | None = None,
        skip_unchanged_fair_share_updates: bool | None = None,
    ):
        scenario.check_end(until)
        self.scenario = scenario
        self.seed = scenario.seed if seed is None else seed
        self.horizon = until if until is not None else scenario.horizon()
        settings = scenario.scheduler
        self.update_period = settings.fair_share_update_period
        self.period = settings.node_heartbeat_period
        self.jitter = settings.node_heartbeat_jitter
        self.skip_heartbeats = (
            settings.skip_idle_heartbeats if skip_idle_heartbeats is None else skip_idle_heartbeats
        )
        self.skip_updates = (
            settings.skip_unchanged_fair_share_updates
            if skip_unchanged_fair_share_updates is None
            else skip_unchanged_fair_share_updates
        )
        self.event_sink = event_sink
        self.timeline_sink = timeline_sink
        self.progress = progress
        self.timeline_period = scenario.report.timeline_period
        self.timeline_operations = scenario.report.timeline_operations
        self._last_timeline: float | None = None
        self.now = 0.0
        self.heap: list[tuple[float, int, int, int, Any]] = []
        self.jobs: dict[str, _Job] = {}
        self.job_serial = 0
        self.stats: Counter[str] = Counter()
        self.preemptions_by_reason: Counter[str] = Counter()
        self.wasted_job_time = 0.0
        self.active_ops = 0
        self.arrivals_left = len(scenario.operations)
        alert_settings = AlertSettings()
        self.unschedulable_timeout = alert_settings.unschedulable_operation_timeout
        self.safe_online_node_count = max(alert_settings.safe_online_node_count, 1)
        self._node_limits_cache: dict[tuple[str, str], list[Vector]] = {}
        self._online_counts: dict[str, int] = {}
        self._tag_filters: dict[str, TagFilter] = {}
        self._build()

    # ------------------------------------------------------------------ setup

    def _build(self) -> None:
        snapshot = self.scenario.snapshot
        self.trees: dict[str, _TreeState] = {}
        for name, definition in snapshot.pool_trees.items():
            tree = PoolTree(definition)
            core = SchedulerCore(tree, event_sink=self._core_event)
            integral = any(
                getattr(pool.config, "integral_guarantees", None) is not None
                and pool.config.integral_guarantees.has_integral_resources
                for pool in definition.pools.values()
            )
            state = _TreeState(name, core, integral)
            state.pools = [ROOT, *definition.pools]
            state.pool_set = set(state.pools)
            state.series_interval = self.update_period
            self.trees[name] = state
        group_tree: dict[str, str] = {}
        for tree_name, groups in snapshot.tree_nodes.items():
            for group in groups:
                group_tree[group] = tree_name
        self.nodes: list[_Node] = []
        self.node_by_address: dict[str, _Node] = {}
        group_of: dict[str, str] = {}
        for group in snapshot.cluster.nodes:
            if group.count == 1:
                group_of[group.address] = group.address
            else:
                width = len(str(group.count))
                for i in range(group.count):
                    group_of[f"{group.address}-{i:0{width}d}"] = group.address
        for address, limits, tags in node_addresses(snapshot):
            tree_name = group_tree.get(group_of[address])
            if tree_name is None:
                continue
            index = len(self.nodes)
            salt = _mix(self.seed * 1_000_003 + index)
            phase = self.period * ((salt >> 11) / float(1 << 53))
            node = _Node(index, address, limits, tags, tree_name, phase, salt)
            self.nodes.append(node)
            self.node_by_address[address] = node
            self.trees[tree_name].core.add_node(address, limits, tags)
        if not self.nodes:
            raise ConfigError("cluster.nodes", "no node belongs to any pool tree (check node_tag_filter)")
        self.ops: list[_Op] = []
        self.op_by_id: dict[str, _Op] = {}
        for index, spec in enumerate(self.scenario.operations):
            tree = spec.spec.pool_trees_or(snapshot.default_pool_tree)[0]
            op = _Op(index, spec, tree, random.Random(f"{self.seed}/{spec.id}"))
            self.ops.append(op)
            self.op_by_id[spec.id] = op
            self._push(spec.submit_time, OPERATION_EVENT, index, 0, ("arrive", op))
        for index, failure in enumerate(self.scenario.node_failures):
            self._push(failure.at, NODE_EVENT, index, 0, ("fail", failure))
            self._push(failure.at + failure.duration, NODE_EVENT, index, 1, ("restore", failure))
        self._push(0.0, FAIR_SHARE_EVENT, 0, 0, ("update", 0))
        for node in self.nodes:
            self._schedule_beat(node, 0)

    # ------------------------------------------------------------------ clock helpers

    def _push(self, when: float, cls: int, key: int, sub: int, payload: Any) -> None:
        heapq.heappush(self.heap, (when, cls, key, sub, payload))

    def beat_time(self, node: _Node, k: int) -> float:
        """Time of beat ``k`` of ``node``: phase + k·period + jitter, the jitter a hash of (seed, node, k)."""
        if self.jitter <= 0:
            return node.phase + k * self.period
        h = _mix(node.salt ^ (k * 0xD1B54A32D192ED03 & _MASK64))
        return node.phase + k * self.period + self.jitter * ((h >> 11) / float(1 << 53))

    def _first_beat_at_or_after(self, node: _Node, when: float) -> int:
        k = max(node.k_next, math.floor((when - node.phase - self.jitter) / self.period))
        while self.beat_time(node, k) < when:
            k += 1
        return k

    def _first_beat_after(self, node: _Node, when: float, start: int) -> int:
        k = max(start, math.floor((when - node.phase - self.jitter) / self.period))
        while self.beat_time(node, k) <= when:
            k += 1
        return k

    def _schedule_beat(self, node: _Node, k: int) -> None:
        node.token += 1
        self._push(self.beat_time(node, k), HEARTBEAT_EVENT, node.index, k, ("beat", node, node.token))

    # ------------------------------------------------------------------ events out

    def _emit(self, event: dict[str, Any]) -> None:
        if self.event_sink is not None:
            self.event_sink(event)

    def _core_event(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "operation_running":
            op = self.op_by_id.get(event["operation_id"])
            if op is not None and op.state == "pending":
                op.state = "running"
                op.start_time = event["time"]
                tree = self.trees[op.tree]
                assert op.controller is not None
                if op.controller.pending_allocation_count > 0:
                    self._add_pending(tree, op)
                    self._check_fit(op)
        elif kind == "allocation_preempted":
            self.preemptions_by_reason[event["reason"]] += 1
            op = self.op_by_id.get(event["operation_id"])
            if op is not None:
                tree = self.trees[op.tree]
                pools = tree.core.pool_tree.pools
                pool = pools.get(op.pool)
                while pool is not None and not pool.is_root:
                    tree.preempted_by_pool[pool.name] += 1
                    pool = pool.parent
        self._emit(event)

    # ------------------------------------------------------------------ pending demand (for exact skipping)

    def _add_pending(self, tree: _TreeState, op: _Op) -> None:
        tree.pending_ops.add(op.spec.id)
        tree.pending_dirty = True
        self._wake_idle(tree)

    def _pending_min(self, tree: _TreeState) -> Vector | None:
        if not tree.pending_ops:
            return None
        if tree.pending_dirty or tree.pending_min is None:
            minimum = np.full(RESOURCE_COUNT, np.inf)
            for op_id in tree.pending_ops:
                controller = self.op_by_id[op_id].controller
                assert controller is not None
                np.minimum(minimum, controller.min_needed_resources, out=minimum)
            tree.pending_min = minimum
            tree.pending_dirty = False
        return tree.pending_min

    def _refresh_pending(self, tree: _TreeState, op: _Op, demand_may_grow: bool) -> None:
        controller = op.controller
        if controller is None or op.state != "running":
            tree.pending_ops.discard(op.spec.id)
            return
        if controller.pending_allocation_count > 0:
            if op.spec.id not in tree.pending_ops or demand_may_grow:
                self._add_pending(tree, op)
        else:
            tree.pending_ops.discard(op.spec.id)

    # ------------------------------------------------------------------ sleeping nodes

    def _wake(self, node: _Node) -> None:
        if not node.sleeping or not node.alive:
            return
        node.sleeping = False
        node.has_timer = False
        self.trees[node.tree].idle_sleepers.discard(node.index)
        self._schedule_beat(node, self._first_beat_at_or_after(node, self.now))

    def _wake_idle(self, tree: _TreeState) -> None:
        if tree.idle_sleepers:
            for index in sorted(tree.idle_sleepers):
                self._wake(self.nodes[index])

    def _catch_up(self, node: _Node, core: SchedulerCore, until_k: int) -> None:
        """Replay the preemptive-backoff timestamp of the skipped beats ``k_next .. until_k - 1``."""
        exec_node = core.strategy.nodes.get(node.address)
        if exec_node is None:
            node.k_next = until_k
            return
        backoff = core.config.preemptive_scheduling_backoff
        k = node.k_next
        while k < until_k:
            last = exec_node.last_preemptive_scheduling_time
            j = k if last is None else self._first_beat_after(node, last + backoff, k)
            if j >= until_k:
                break
            core.skip_heartbeat(node.address, self.beat_time(node, j))
            self.stats["replayed_backoff_beats"] += 1
            k = j + 1
        node.k_next = until_k

    def _set_timer(self, node: _Node, core: SchedulerCore) -> None:
        """A sleeping node wakes at its first beat whose preemptive stages are due."""
        exec_node = core.strategy.nodes[node.address]
        backoff = core.config.preemptive_scheduling_backoff
        now_k = self._first_beat_at_or_after(node, self.now)
        self._catch_up(node, core, now_k)
        last = exec_node.last_preemptive_scheduling_time
        j = node.k_next if last is None else self._first_beat_after(node, last + backoff, node.k_next)
        node.has_timer = True
        self._schedule_beat(node, j)

    def _sleep(self, node: _Node, core: SchedulerCore) -> None:
        node.sleeping = True
        node.token += 1
        tree = self.trees[node.tree]
        if core.can_start_more(node.address):
            tree.idle_sleepers.add(node.index)
        if core.has_starving_operations():
            self._set_timer(node, core)
        else:
            node.has_timer = False

    # ------------------------------------------------------------------ main loop

    def run(self) -> SimulationResult:
        """Process events until every operation finished or the horizon; returns the collected results."""
        started = wall_clock.perf_counter()
        processed = 0
        end_time = 0.0
        heap = self.heap
        while heap:
            when, _cls, _key, sub, payload = heap[0]
            if when > self.horizon:
                end_time = self.horizon
                break
            heapq.heappop(heap)
            self.now = when
            kind = payload[0]
            if kind == "beat":
                _, node, token = payload
                if token == node.token and node.alive:
                    self._beat(node, sub)
            elif kind == "job":
                _, job_id, token, what = payload
                job = self.jobs.get(job_id)
                if job is not None and what == _JOB_PEAK:
                    self._memory_peak(job)
                elif job is not None and job.token == token:
                    assert job.end_finished is not None
                    self._finish_job(job, job.end_finished)
            elif kind == "update":
                self._fair_share_update(payload[1])
            elif kind == "arrive":
                self._arrive(payload[1])
            elif kind == "lifetime":
                self._lifetime_end(payload[1])
            elif kind == "unfit":
                self._unfit_timeout(payload[1])
            elif kind == "fail":
                self._node_failed(payload[1])
            elif kind == "restore":
                self._node_restored(payload[1])
            processed += 1
            end_time = when
            if self.arrivals_left == 0 and self.active_ops == 0:
                break
            if self.progress is not None and processed % 20000 == 0:
                self.progress(
                    self.now,
                    self.horizon,
                    len(self.ops) - self.arrivals_left - self.active_ops,
                    len(self.ops),
                )
        else:
            end_time = self.now
        self.stats["events"] = processed
        self._sample(end_time, final=True)
        wall = wall_clock.perf_counter() - started
        if self.progress is not None:
            self.progress(
                end_time, self.horizon, len(self.ops) - self.arrivals_left - self.active_ops, len(self.ops)
            )
        return self._result(end_time, wall)

    # ------------------------------------------------------------------ heartbeats

    def _beat(self, node: _Node, k: int) -> None:
        tree = self.trees[node.tree]
        core = tree.core
        if k > node.k_next:
            self._catch_up(node, core, k)
        node.sleeping = False
        node.has_timer = False
        tree.idle_sleepers.discard(node.index)
        now = self.now
        if self.skip_heartbeats and core.heartbeat_is_noop(
            node.address, now, lambda: self._pending_min(tree)
        ):
            core.skip_heartbeat(node.address, now)
            node.k_next = k + 1
            self.stats["heartbeats_skipped"] += 1
            self._sleep(node, core)
            return
        result = core.process_heartbeat(NodeHeartbeat(node.address, node.limits, node.tags), now)
        self.stats["heartbeats_processed"] += 1
        node.k_next = k + 1
        self._schedule_beat(node, k + 1)
        if result.allocations_to_start or result.allocations_to_preempt:
            tree.changed = True
            self._apply(node, tree, result)

    def _apply(self, node: _Node, tree: _TreeState, result: HeartbeatResult) -> None:
        touched: dict[str, _Op] = {}
        for allocation in result.allocations_to_start:
            op = self.op_by_id[allocation.operation_id]
            touched[op.spec.id] = op
            self._start_job(allocation, op, node)
        for record in result.allocations_to_preempt:
            job = self.jobs.get(record.allocation_id)
            if job is not None:
                self._preempted(job, record)
        if result.allocations_to_preempt:
            self._wake_queued(tree)
        for op in touched.values():
            assert op.controller is not None
            if op.controller.pending_allocation_count == 0:
                tree.pending_ops.discard(op.spec.id)

    def _start_job(self, allocation: Allocation, op: _Op, node: _Node) -> None:
        now = self.now
        task = next(t for t in op.spec.tasks if t.name == allocation.task)
        fraction = getattr(allocation.payload, "fraction", 1.0)
        duration = None
        if task.duration is not None:
            duration = task.duration.sample(op.rng) * fraction
        self.job_serial += 1
        job = _Job(allocation, op, node, self.job_serial, now, duration, task)
        reserve_bytes = float(allocation.resources[MEMORY])
        job.memory_now = reserve_bytes
        job.memory_limit_total = max(reserve_bytes, 1.0)
        reserve = op.reserves.get(task.name)
        if task.memory_usage is not None and reserve is not None:
            options = reserve.options
            job.user_peak = task.memory_usage.sample(op.rng)
            job.peak_total = options.footprint_memory + options.job_proxy_memory + job.user_peak
            job.memory_limit_total = (
                options.footprint_memory + options.job_proxy_memory + options.memory_limit
            )
            job.memory_now = min(reserve_bytes, job.peak_total)
            peak_after = duration / 2.0 if duration is not None else VANILLA_MEMORY_PEAK_AFTER
            if duration is not None and op.spec.type == "vanilla":
                peak_after = min(VANILLA_MEMORY_PEAK_AFTER, duration / 2.0)
            self._push(
                now + peak_after,
                JOB_EVENT,
                job.serial,
                _JOB_PEAK,
                ("job", allocation.id, job.token, _JOB_PEAK),
            )
        self.jobs[allocation.id] = job
        node.jobs.add(allocation.id)
        if duration is not None:
            self._plan_end(job, now + duration, FinishedAllocation(allocation.id, "completed"))

    def _plan_end(self, job: _Job, when: float, finished: FinishedAllocation) -> None:
        job.token += 1
        job.end = when
        job.end_finished = finished
        self._push(when, JOB_EVENT, job.serial, _JOB_END, ("job", job.allocation.id, job.token, _JOB_END))

    def _with_memory(self, job: _Job, finished: FinishedAllocation) -> FinishedAllocation:
        reserve = job.op.reserves.get(job.task.name)
        if reserve is None or job.task.memory_usage is None:
            return finished
        finished.user_job_max_memory = job.user_peak if job.memory_now >= job.peak_total else None
        finished.job_proxy_max_memory = (
            reserve.options.job_proxy_memory if finished.user_job_max_memory else None
        )
        return finished

    def _preempted(self, job: _Job, record: Any) -> None:
        now = self.now
        allocation_id = job.allocation.id
        if record.interruptible:
            delay = min(self.scenario.scheduler.interruption_delay, record.timeout)
            done = now + delay
            if job.end is not None and job.end <= done:
                return
            processed = None
            if job.duration:
                processed = min(1.0, max(0.0, (done - job.start) / job.duration))
            self._plan_end(
                job, done, FinishedAllocation(allocation_id, "completed", processed_fraction=processed)
            )
        elif record.reason.value == "graceful_preemption":
            if job.end is not None and job.end <= now + record.timeout:
                return
            self._plan_end(job, now + record.timeout, FinishedAllocation(allocation_id, "aborted"))
        else:
            node = job.node
            report = self.beat_time(node, node.k_next)
            self._plan_end(job, report, FinishedAllocation(allocation_id, "aborted"))

    # ------------------------------------------------------------------ job endings

    def _drop_job(self, job: _Job, state: str) -> None:
        """Forget a job whose allocation the core no longer tracks; account its run time."""
        runtime = self.now - job.start
        op = job.op
        op.jobs_total_duration += runtime
        op.job_max_duration = max(op.job_max_duration, runtime)
        if job.allocation.preemption is not None:
            op.preempted_job_time += runtime
            op.preempted_job_count += 1
        if state in ("aborted", "failed"):
            self.wasted_job_time += runtime
            op.wasted_job_time += runtime
        self.jobs.pop(job.allocation.id, None)
        job.node.jobs.discard(job.allocation.id)
        job.token += 1

    def _finish_job(self, job: _Job, finished: FinishedAllocation) -> None:
        op = job.op
        tree = self.trees[op.tree]
        finished = self._with_memory(job, finished)
        tree.core.on_allocation_finished(finished, self.now)
        tree.changed = True
        if finished.state == "aborted":
            self._wake_queued(tree)  # a lost gang allocation stops the rest of its gang
        self._drop_job(job, finished.state)
        node = job.node
        if node.alive:
            self._wake(node)
        clean = finished.state == "completed" and job.allocation.preemption is None
        self._after_job_change(op, demand_may_grow=not clean or job.task.memory_usage is not None)

    def _after_job_change(self, op: _Op, *, demand_may_grow: bool) -> None:
        controller = op.controller
        if controller is None or op.state not in ("running", "pending"):
            return
        tree = self.trees[op.tree]
        max_failed = op.spec.spec.max_failed_job_count
        if controller.failed_job_count > max_failed:
            op.error = f"Failed jobs limit exceeded ({controller.failed_job_count} > {max_failed})"
            self._finish_operation(op, "failed")
            return
        if controller.is_completed:
            self._finish_operation(op, "completed")
            return
        self._refresh_pending(tree, op, demand_may_grow)

    def _memory_peak(self, job: _Job) -> None:
        job.memory_now = job.peak_total
        node = job.node
        if job.memory_now > float(job.allocation.reserve[MEMORY]):
            # The node reports memory above the reserve: the scheduler counts it (SchedulerCore.report_usage).
            tree = self.trees[node.tree]
            usage = np.array(job.allocation.reserve, dtype=float)
            usage[MEMORY] = job.memory_now
            if tree.core.report_usage(job.allocation.id, usage):
                tree.changed = True
                self._wake(node)
        limit = float(node.limits[MEMORY])
        jobs = [self.jobs[j] for j in sorted(node.jobs, key=lambda j: self.jobs[j].serial)]
        usage = sum(j.memory_now for j in jobs)
        failing = [j for j in jobs if j.memory_now > j.memory_limit_total]
        if usage <= limit and not failing:
            return
        victims = select_overdraft_victims(
            limit,
            [
                JobMemory(
                    j.allocation.id,
                    float(j.allocation.reserve[MEMORY]),
                    j.memory_now,
                    j.memory_limit_total,
                    j.start,
                )
                for j in jobs
            ],
        )
        for victim in victims.failed:
            failed = self.jobs[victim.id]
            self._emit(
                {
                    "event": "job_memory_limit_exceeded",
                    "time": self.now,
                    "allocation_id": victim.id,
                    "operation_id": failed.op.spec.id,
                    "node": node.address,
                    "usage": victim.usage,
                }
            )
            self._finish_job(failed, self._with_memory(failed, FinishedAllocation(victim.id, "failed")))
        for victim in victims.aborted:
            aborted = self.jobs.get(victim.id)
            if aborted is None:
                continue
            self.stats["resource_overdraft"] += 1
            self._emit(
                {
                    "event": "job_resource_overdraft",
                    "time": self.now,
                    "allocation_id": victim.id,
                    "operation_id": aborted.op.spec.id,
                    "node": node.address,
                    "usage": victim.usage,
                    "reserve": victim.reserve,
                }
            )
            finished = FinishedAllocation(victim.id, "aborted", abort_reason=RESOURCE_OVERDRAFT)
            self._finish_job(aborted, self._with_memory(aborted, finished))

    # ------------------------------------------------------------------ operations

    def _controller(self, op: _Op) -> OperationControllerBase:
        spec = op.spec
        raw = spec.raw_spec
        tasks = []
        for task in spec.tasks:
            reserve = None
            if task.memory_usage is not None:
                options_spec: dict[str, Any] = {"memory_limit": task.memory_limit}
                for key in (
                    "user_job_memory_digest_default_value",
                    "user_job_memory_digest_lower_bound",
                    "memory_reserve_factor",
                    "job_proxy_memory_digest",
                ):
                    if raw.get(key) is not None:
                        options_spec[key] = raw[key]
                options = TaskMemoryOptions.from_spec(
                    options_spec, self.scenario.memory, path=f"operations.{spec.id}.spec"
                )
                reserve = TaskMemoryReserve(options, self.scenario.memory)
                op.reserves[task.name] = reserve
            tasks.append(
                TaskSpec(
                    task.name,
                    task.job_count,
                    task.resources,
                    interruptible=task.interruptible,
                    memory_reserve=reserve,
                )
            )
        return make_controller(spec.id, spec.type, tasks, interruption_signal=spec.spec.interruption_signal)

    def _arrive(self, op: _Op) -> None:
        self.arrivals_left -= 1
        spec = op.spec
        tree = self.trees[op.tree]
        op.controller = self._controller(op)
        op.pool = spec.spec.pool_for_tree(op.tree, spec.user)
        self._emit(
            {
                "event": "operation_submitted",
                "time": self.now,
                "operation_id": spec.id,
                "pool": op.pool,
                "tree": op.tree,
            }
        )
        try:
            state = tree.core.register_operation(
                spec.id,
                op.controller,
                user=spec.user,
                operation_type=spec.type,
                pool=op.pool,
                weight=spec.spec.weight_for_tree(op.tree),
                resource_limits=spec.spec.resource_limits_for_tree(op.tree),
                spec=spec.spec,
                now=self.now,
            )
        except PooltreeError as error:
            op.state = "failed"
            op.error = error.message
            op.finish_time = self.now
            self._emit(
                {
                    "event": "operation_failed",
                    "time": self.now,
                    "operation_id": spec.id,
                    "error": error.message,
                }
            )
            return
        self.active_ops += 1
        tree.changed = True
        registered = tree.core.pool_tree.operations.get(spec.id)
        if registered is not None:
            op.pool = registered.pool.name
        op.state = state
        if state == "running":
            op.start_time = self.now
            self._add_pending(tree, op)
            self._check_fit(op)
        if spec.lifetime is not None:
            self._push(self.now + spec.lifetime, OPERATION_EVENT, op.index, 1, ("lifetime", op))

    # ------------------------------------------------------------------ operations no node can fit

    def _online_limits(self, tree: str, filter_text: str) -> list[Vector]:
        """The distinct limits of the online nodes of ``tree`` matching the operation's tag filter."""
        key = (tree, filter_text)
        cached = self._node_limits_cache.get(key)
        if cached is None:
            tag_filter = self._tag_filters.get(filter_text)
            if tag_filter is None:
                tag_filter = TagFilter.parse(filter_text, "spec.scheduling_tag_filter")
                self._tag_filters[filter_text] = tag_filter
            distinct: dict[tuple[float, ...], Vector] = {}
            for node in self.nodes:
                if node.alive and node.tree == tree and tag_filter.matches(node.tags):
                    distinct.setdefault(tuple(node.limits.tolist()), node.limits)
            cached = list(distinct.values())
            self._node_limits_cache[key] = cached
        return cached

    def _unfit(self, op: _Op) -> str | None:
        """Why no online node of the operation's tree can ever fit one job of a pending task (the live service's
        rule, ``pooltree.alerts.unschedulable_task``), or None when some node can."""
        controller = op.controller
        if controller is None or op.state != "running" or controller.pending_allocation_count == 0:
            return None
        online = self._online_counts.get(op.tree)
        if online is None:
            online = sum(1 for node in self.nodes if node.alive and node.tree == op.tree)
            self._online_counts[op.tree] = online
        if online < self.safe_online_node_count:
            return None
        filter_text = str(getattr(op.spec.spec, "scheduling_tag_filter", None) or "")
        limits = self._online_limits(op.tree, filter_text)
        tasks = controller.pending_task_resources()
        found = unschedulable_task(tasks, limits) if limits else next(iter(tasks.items()), None)
        if found is None:
            return None
        name, needed = found
        where = f'tree "{op.tree}"' + (f" matching {filter_text!r}" if filter_text else "")
        if not limits:
            return f"No online node can satisfy the resource demand: no node of {where} is online"
        largest = np.max(np.vstack(limits), axis=0)
        short = [RESOURCES[i] for i in range(RESOURCE_COUNT) if needed[i] > largest[i] + 1e-9]
        return (
            f"No online node can satisfy the resource demand: a job of task {name!r} needs "
            f"{_resources_text(needed)}; the largest node of {where} has {_resources_text(largest)} "
            f"(short of {', '.join(short) if short else 'a combination of resources'})"
        )

    def _check_fit(self, op: _Op) -> None:
        """If no node can fit the operation, check again after the live service's timeout and fail it then."""
        if op.unfit_check_due or self._unfit(op) is None:
            return
        op.unfit_check_due = True
        self._push(self.now + self.unschedulable_timeout, OPERATION_EVENT, op.index, 2, ("unfit", op))

    def _unfit_timeout(self, op: _Op) -> None:
        op.unfit_check_due = False
        reason = self._unfit(op)
        if reason is None:
            return
        op.error = reason
        self._finish_operation(op, "failed")

    def _lifetime_end(self, op: _Op) -> None:
        if op.state in ("running", "pending"):
            self._finish_operation(op, "completed")

    def _finish_operation(self, op: _Op, state: str) -> None:
        tree = self.trees[op.tree]
        leftover = tree.core.unregister_operation(op.spec.id, self.now, state=state)
        tree.changed = True
        op.state = state
        op.finish_time = self.now
        tree.pending_ops.discard(op.spec.id)
        self.active_ops -= 1
        for allocation in leftover:
            self._emit(
                {
                    "event": "allocation_finished" if state == "completed" else "allocation_aborted",
                    "time": self.now,
                    "allocation_id": allocation.id,
                    "operation_id": op.spec.id,
                    "node": allocation.node_address,
                    "state": "completed" if state == "completed" else "aborted",
                    "reason": f"operation_{state}",
                    "preemptor_operation_id": None,
                    "tree": op.tree,
                }
            )
            job = self.jobs.get(allocation.id)
            if job is not None:
                self._drop_job(job, "aborted" if state != "completed" else "completed")
                if job.node.alive:
                    self._wake(job.node)
        if op.error is not None:
            self._emit(
                {"event": "operation_error", "time": self.now, "operation_id": op.spec.id, "error": op.error}
            )

    # ------------------------------------------------------------------ nodes

    def _node_failed(self, failure: Any) -> None:
        node = self.node_by_address[failure.address]
        if not node.alive:
            return
        tree = self.trees[node.tree]
        node.alive = False
        node.sleeping = False
        node.token += 1
        tree.idle_sleepers.discard(node.index)
        self._emit({"event": "node_failed", "time": self.now, "node": node.address})
        self._node_limits_cache.clear()
        self._online_counts.clear()
        lost = tree.core.remove_node(node.address, self.now)
        tree.changed = True
        touched: dict[str, _Op] = {}
        for allocation in lost:
            job = self.jobs.get(allocation.id)
            if job is not None:
                self._drop_job(job, "aborted")
                touched[job.op.spec.id] = job.op
        for op_id in sorted(touched):
            self._after_job_change(touched[op_id], demand_may_grow=True)
        self._wake_queued(tree)

    def _node_restored(self, failure: Any) -> None:
        node = self.node_by_address[failure.address]
        if node.alive:
            return
        tree = self.trees[node.tree]
        node.alive = True
        self._node_limits_cache.clear()
        self._online_counts.clear()
        tree.core.add_node(node.address, node.limits, node.tags)
        tree.changed = True
        self._emit({"event": "node_restored", "time": self.now, "node": node.address})
        node.k_next = self._first_beat_at_or_after(node, self.now)
        self._schedule_beat(node, node.k_next)

    # ------------------------------------------------------------------ fair share and metrics

    def _fair_share_update(self, index: int) -> None:
        now = self.now
        self._sample(now)
        emit = self.timeline_sink is not None and (
            self.timeline_period <= 0
            or self._last_timeline is None
            or now - self._last_timeline >= self.timeline_period - 1e-9
        )
        if emit:
            self._last_timeline = now
        for tree in self.trees.values():
            core = tree.core
            self._enforce_time_limits(tree, now)
            identical = (
                self.skip_updates and core.last_result is not None and not tree.changed and not tree.integral
            )
            if identical:
                self.stats["fair_share_updates_skipped"] += 1
                if any(
                    state.below_fair_share_since is not None for state in core.strategy.starvation.values()
                ):
                    # shares are unchanged but starvation clocks run: publish the same result at this time
                    core.republish(now)
                    self.stats["fair_share_republished"] += 1
                    self._record(tree, now)
                    if core.has_starving_operations():
                        self._arm_timers(tree)
            else:
                core.update_fair_share(now)
                self.stats["fair_share_updates"] += 1
                tree.changed = False
                self._record(tree, now)
                if core.limits_violated():
                    for node in self.nodes:
                        if node.tree == tree.name and node.sleeping:
                            self._wake(node)
                elif core.has_starving_operations():
                    self._arm_timers(tree)
            self._timeline(tree, now, emit)
        next_time = (index + 1) * self.update_period
        self._push(next_time, FAIR_SHARE_EVENT, index + 1, 0, ("update", index + 1))

    def _enforce_time_limits(self, tree: _TreeState, now: float) -> None:
        """Operations past their time_limit fail; jobs past their job_time_limit stop (SchedulerCore rules)."""
        for operation_id, error in tree.core.enforce_time_limits(now):
            op = self.op_by_id.get(operation_id)
            if op is not None and op.state in ("running", "pending"):
                op.error = error["message"]
                self._finish_operation(op, "failed")
        self._wake_queued(tree)

    def _wake_queued(self, tree: _TreeState) -> None:
        """Nodes with stops decided outside their heartbeats (gangs, job time limits) beat again soon."""
        queued = tree.core.nodes_with_queued_preemptions()
        if queued:
            tree.changed = True
            for address in queued:
                node = self.node_by_address.get(address)
                if node is not None:
                    self._wake(node)

    def _arm_timers(self, tree: _TreeState) -> None:
        """Starving operations appeared: sleeping nodes wake when their preemptive stages are due."""
        for node in self.nodes:
            if node.tree == tree.name and node.sleeping and not node.has_timer and node.alive:
                self._set_timer(node, tree.core)

    def _record(self, tree: _TreeState, now: float) -> None:
        """Remember the values published at ``now`` (they hold until the next update)."""
        result = tree.core.last_result
        starvation = tree.core.strategy.starvation
        values: dict[str, tuple[float, float, float, str, str]] = {}
        elements = result.elements
        if self.timeline_sink is not None and self.timeline_operations:
            ids: Any = elements
        else:
            ids = [ROOT if pool.is_root else name for name, pool in tree.core.pool_tree.pools.items()]
            arrays = getattr(elements, "arrays", None)
            index = getattr(elements, "index", None)
            if arrays is not None and index is not None and arrays.keys() >= _RECORD_ARRAYS:
                # pools only, read from the update's arrays in one pass (same values as the per-element path)
                present = [element_id for element_id in ids if element_id in index]
                rows = [index[element_id] for element_id in present]
                fair = arrays["fair_share"][rows].tolist()
                usage = arrays["usage_share"][rows].tolist()
                demand = arrays["demand_share"][rows].tolist()
                below = arrays["below"][rows].tolist()
                for k, element_id in enumerate(present):
                    state = starvation.get(element_id)
                    values[element_id] = (
                        max(fair[k]),
                        max(usage[k]),
                        max(demand[k]),
                        "below_fair_share" if below[k] else "normal",
                        state.status.value if state is not None else "non_starving",
                    )
                    if element_id not in tree.pool_set:
                        tree.pool_set.add(element_id)
                        tree.pools.append(element_id)
                ids = ()
        for element_id in ids:
            element = elements.get(element_id)
            if element is None:
                continue
            state = starvation.get(element_id)
            values[element_id] = (
                max(element.fair_share.tolist()),
                max(element.usage_share.tolist()),
                max(element.demand_share.tolist()),
                element.scheduling_status,
                state.status.value if state is not None else "non_starving",
            )
            if not element.is_operation and element_id not in tree.pool_set:
                tree.pool_set.add(element_id)
                tree.pools.append(element_id)
        tree.last_values = values
        matrix = np.zeros((len(tree.pools), 6))
        matrix[:, 0] = 1.0
        for row, pool in enumerate(tree.pools):
            held = values.get(pool)
            if held is not None:
                matrix[row, 1:4] = held[:3]
                matrix[row, 4] = held[3] == "below_fair_share"
                matrix[row, 5] = held[4] != "non_starving"
        tree.matrix = matrix
        if tree.acc.shape[0] < len(tree.pools):
            tree.acc = np.vstack([tree.acc, np.zeros((len(tree.pools) - tree.acc.shape[0], 6))])
        index = getattr(elements, "index", None)
        arrays = getattr(elements, "arrays", None)
        if index is not None and arrays is not None and "resource_usage" in arrays:
            if ROOT in index:
                usage_row = np.array(arrays["resource_usage"][index[ROOT]], dtype=float)
                tree.last_root = (usage_row, tree.core.total_resources)
        else:
            root = elements.get(ROOT)
            if root is not None:
                tree.last_root = (np.array(root.resource_usage, dtype=float), tree.core.total_resources)

    def _sample(self, now: float, *, final: bool = False) -> None:
        """Integrate the values held since the previous sample (time-weighted means, starving time)."""
        for tree in self.trees.values():
            if tree.last_sample is not None and now > tree.last_sample:
                dt = now - tree.last_sample
                if tree.matrix is not None:
                    tree.acc += tree.matrix * dt
                if tree.last_root is not None:
                    usage, total = tree.last_root
                    tree.usage_integral += usage * dt
                    tree.total_integral += total * dt
            tree.last_sample = now

    def _timeline(self, tree: _TreeState, now: float, emit: bool) -> None:
        if tree.last_series is None or now - tree.last_series >= tree.series_interval - 1e-9:
            tree.last_series = now
            for pool in tree.pools:
                values = tree.last_values.get(pool)
                if values is not None:
                    tree.series.setdefault(pool, []).append((now, values[0], values[1], values[2]))
            if tree.series and len(next(iter(tree.series.values()))) > MAX_PLOT_POINTS:
                for pool in tree.series:
                    tree.series[pool] = tree.series[pool][::2]
                tree.series_interval *= 2
        if not emit or self.timeline_sink is None:
            return
        rows = []
        for element_id, values in tree.last_values.items():
            is_pool = element_id in tree.pool_set
            if not is_pool and not self.timeline_operations:
                continue
            rows.append(
                [
                    round(now, 6),
                    tree.name,
                    element_id,
                    "pool" if is_pool else "operation",
                    round(values[0], 6),
                    round(values[1], 6),
                    round(values[2], 6),
                    values[4],
                ]
            )
        self.timeline_sink(rows)

    # ------------------------------------------------------------------ results

    def _result(self, end_time: float, wall: float) -> SimulationResult:
        operations = []
        rows = []
        for op in self.ops:
            spec = op.spec
            controller = op.controller
            start = op.start_time
            pending_end = (
                start if start is not None else (op.finish_time if op.finish_time is not None else end_time)
            )
            pending_duration = max(0.0, pending_end - spec.submit_time) if op.state != "submitted" else 0.0
            progress = controller.progress() if controller is not None else {}
            aborted = dict(sorted(progress.get("aborted_job_count_by_reason", {}).items()))
            reserve = next(iter(op.reserves.values()), None)
            state = op.state if op.state != "submitted" else "not_submitted"
            entry: dict[str, Any] = {
                "id": spec.id,
                "tree": op.tree,
                "pool": op.pool or spec.spec.pool_for_tree(op.tree, spec.user),
                "user": spec.user,
                "type": spec.type,
                "state": state,
                "submit_time": spec.submit_time,
                "start_time": start,
                "finish_time": op.finish_time,
                "pending_duration": round(pending_duration, 6),
                "job_count": spec.job_count,
                "completed_job_count": progress.get("completed_job_count", 0),
                "failed_job_count": progress.get("failed_job_count", 0),
                "interrupted_job_count": progress.get("interrupted_job_count", 0),
                "aborted_job_count_by_reason": aborted,
                "preempted_job_time": round(op.preempted_job_time, 6),
                "user_job_memory_reserve_factor": reserve.user_job_reserve_factor() if reserve else None,
                "job_proxy_memory_reserve_factor": reserve.job_proxy_reserve_factor() if reserve else None,
                "resource_overdraft_count": sum(r.resource_overdraft_count for r in op.reserves.values()),
            }
            if op.error is not None:
                entry["error"] = op.error
            operations.append(entry)
            finish = op.finish_time
            real_start = start if start is not None else spec.submit_time
            rows.append(
                {
                    "id": spec.id,
                    "job_count": spec.job_count,
                    "preempted_job_count": op.preempted_job_count,
                    "start_time": _num(real_start),
                    "finish_time": _num(finish) if finish is not None else "",
                    "real_duration": _num(finish - real_start) if finish is not None else "",
                    "jobs_total_duration": _num(op.jobs_total_duration),
                    "job_max_duration": _num(op.job_max_duration),
                    "preempted_jobs_total_duration": _num(op.preempted_job_time),
                    "operation_type": spec.type,
                    "operation_state": state,
                    "in_timeframe": "true" if spec.in_timeframe else "false",
                }
            )
        pools: dict[str, Any] = {}
        series: dict[str, Any] = {}
        utilization_usage = np.zeros(RESOURCE_COUNT)
        utilization_total = np.zeros(RESOURCE_COUNT)
        multi = len(self.trees) > 1
        for tree in self.trees.values():
            utilization_usage += tree.usage_integral
            utilization_total += tree.total_integral
            series[tree.name] = tree.series
            for row, pool in enumerate(tree.pools):
                acc = tree.acc[row].tolist() if row < tree.acc.shape[0] else [0.0] * 6
                span = acc[0]
                key = f"{tree.name}/{pool}" if multi else pool
                pools[key] = {
                    "mean_fair_share_ratio": round(acc[1] / span, 6) if span else 0.0,
                    "mean_usage_ratio": round(acc[2] / span, 6) if span else 0.0,
                    "mean_demand_ratio": round(acc[3] / span, 6) if span else 0.0,
                    "starving_time": round(acc[5], 6),
                    "below_fair_share_time": round(acc[4], 6),
                    "preempted_allocation_count": tree.preempted_by_pool.get(pool, 0)
                    if pool != ROOT
                    else sum(self.preemptions_by_reason.values()),
                }
        utilization = {
            name: round(float(utilization_usage[i] / utilization_total[i]), 6)
            if utilization_total[i] > 0
            else 0.0
            for i, name in enumerate(RESOURCES)
        }
        stats = dict(sorted(self.stats.items()))
        simulated = end_time
        summary = {
            "scenario": self.scenario.source,
            "seed": self.seed,
            "operations": operations,
            "pools": pools,
            "global": {
                "utilization": utilization,
                "preempted_allocation_count": sum(self.preemptions_by_reason.values()),
                "preemptions_by_reason": dict(sorted(self.preemptions_by_reason.items())),
                "wasted_job_time": round(self.wasted_job_time, 6),
                "simulated_time": round(simulated, 6),
                "wall_time": round(wall, 3),
                "operation_count": len(self.ops),
                "completed_operation_count": sum(1 for op in self.ops if op.state == "completed"),
            },
            # Options the scenario sets that pooltree accepts without implementing (config/support.py).
            "unsupported_options": unsupported_options(
                self.scenario.snapshot.pool_trees, [(op.spec.id, op.spec.spec) for op in self.ops]
            ),
            "engine": {
                "heartbeats_processed": stats.get("heartbeats_processed", 0),
                "heartbeats_skipped": stats.get("heartbeats_skipped", 0),
                "fair_share_updates": stats.get("fair_share_updates", 0),
                "fair_share_updates_skipped": stats.get("fair_share_updates_skipped", 0),
                "events": stats.get("events", 0),
            },
        }
        wasted = {op.spec.id: round(op.wasted_job_time, 6) for op in self.ops}
        parents: dict[str, str | None] = {}
        for tree in self.trees.values():
            prefix = f"{tree.name}/" if multi else ""
            for name, pool in tree.core.pool_tree.pools.items():
                key = prefix + (ROOT if pool.is_root else name)
                parent = pool.parent
                parents[key] = None if parent is None else prefix + (ROOT if parent.is_root else parent.name)
        return SimulationResult(
            summary, rows, series, dict(self.preemptions_by_reason), stats, wasted, parents
        )


def _resources_text(vector: Vector) -> str:
    """``cpu=32, memory=64.0 GiB`` (non-zero resources)."""
    parts = []
    for i, name in enumerate(RESOURCES):
        value = float(vector[i])
        if value:
            parts.append(f"{name}={format_size(value)}" if i == MEMORY else f"{name}={value:g}")
    return ", ".join(parts) or "nothing"


def _num(value: float) -> str:
    return f"{value:.3f}"
