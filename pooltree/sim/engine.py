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
preemptive backoff has elapsed). Demand wakes idle nodes only once the operation is published, and one node at
a time in beat order while it lasts (`_wake_idle`). The beats it slept through are replayed only for their one
side effect (the preemptive-scheduling timestamp), in O(1) per elapsed backoff. `tests/sim` checks that runs with and without
skipping write identical events and summaries.

Fair-share updates are skipped only when provably identical: nothing started, finished, registered or failed
since the previous update, no pool has integral guarantees or infers its children's weights from their historic
usage (both depend on time), the tree does not discretize fair shares (it depends on the previous update), no operation's best allocation share computed at that time changes, and no element is
below its fair share (starvation timers depend on time).
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
import time as wall_clock
from collections import Counter
from typing import Any

import numpy as np

from pooltree.alerts import AlertSettings
from pooltree.config import TagFilter
from pooltree.controllers.speculative import SPECULATIVE_ABORT_REASONS
from pooltree.errors import ConfigError
from pooltree.fairshare.historic_usage import historic_usage_halflife
from pooltree.gc_policy import survivors_frozen
from pooltree.phases import PhaseTimes
from pooltree.resources import RESOURCE_COUNT, Vector
from pooltree.sim.beats import VECTOR_GAP, beat_time, replay_chain
from pooltree.sim.jobs import SimulationJobs
from pooltree.sim.metrics import SimulationMetrics
from pooltree.sim.operations import SimulationOperations
from pooltree.sim.scenario import Scenario, node_addresses
from pooltree.sim.state import (
    _JOB_PEAK,
    FAIR_SHARE_EVENT,
    HEARTBEAT_EVENT,
    NODE_EVENT,
    OPERATION_EVENT,
    ROOT,
    EventSink,
    ProgressCallback,
    SimulationResult,
    TimelineSink,
    _Job,
    _mix,
    _Node,
    _Op,
    _TreeState,
)
from pooltree.sim.tentative import SimulationTentative
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.model import NodeHeartbeat
from pooltree.tree import PoolTree

_WAKE_SLACK = 1e-6
"""Seconds of float rounding allowed in the phase bounds of `_wake_idle` (taking a node early is harmless)."""


__all__ = ["ROOT", "EventSink", "ProgressCallback", "Simulation", "SimulationResult", "TimelineSink"]


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
        progress_interval: float | None = None,
        skip_idle_heartbeats: bool | None = None,
        skip_unchanged_fair_share_updates: bool | None = None,
        phase_times: PhaseTimes | None = None,
    ):
        scenario.check_end(until)
        self.phase_times = phase_times if phase_times is not None else PhaseTimes()
        """Timers of the simulator's ``period`` and of its cores' phases (`pooltree.phases`; off by default)."""
        self.scenario = scenario
        self.job_model = SimulationJobs(self)
        """Jobs: started from heartbeat decisions, their ends, preemption, memory peaks (a part of the run)."""
        self.operation_model = SimulationOperations(self)
        """Operations: arrival and registration, controllers, lifetimes, operations no node fits."""
        self.tentative = SimulationTentative(self)
        """Operations in tentative pool trees (`tentative.py`)."""
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
        self.progress_interval = progress_interval
        """Simulated seconds: ``progress`` is also called at the first event at or after each multiple."""
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
        # filled by _build from the scenario
        self.trees: dict[str, _TreeState] = {}
        self.nodes: list[_Node] = []
        self.node_by_address: dict[str, _Node] = {}
        self.ops: list[_Op] = []
        self.op_by_id: dict[str, _Op] = {}
        self._build()
        self.metrics = SimulationMetrics(
            scenario,
            self.seed,
            self.trees,
            self.ops,
            self.stats,
            self.preemptions_by_reason,
            timeline_sink,
            self.timeline_operations,
        )
        """Held values, integrals, series, timeline rows and the result (`metrics.py`)."""

    # ------------------------------------------------------------------ setup

    def _build(self) -> None:
        snapshot = self.scenario.snapshot
        for name, definition in snapshot.pool_trees.items():
            tree = PoolTree(definition)
            core = SchedulerCore(tree, event_sink=self._core_event, phase_times=self.phase_times)
            integral = any(
                getattr(pool.config, "integral_guarantees", None) is not None
                and pool.config.integral_guarantees.has_integral_resources
                for pool in definition.pools.values()
            ) or any(historic_usage_halflife(pool.config) is not None for pool in definition.pools.values())
            # discretized fair share: a large operation's window is centred on its previous fair share
            integral = integral or bool(definition.config.enable_discretized_fair_share)
            state = _TreeState(name, core, integral)
            state.pools = [ROOT, *definition.pools]
            state.pool_set = set(state.pools)
            state.pool_row = {pool: row for row, pool in enumerate(state.pools)}
            state.series_interval = self.update_period
            self.trees[name] = state
        group_tree: dict[str, str] = {}
        for tree_name, groups in snapshot.tree_nodes.items():
            for group in groups:
                group_tree[group] = tree_name
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
        for tree in self.trees.values():
            ordered = sorted((node.phase, node.index) for node in self.nodes if node.tree == tree.name)
            tree.phases = [phase for phase, _index in ordered]
            tree.phase_order = [index for _phase, index in ordered]
            tree.position_of = {index: position for position, index in enumerate(tree.phase_order)}
        if not self.nodes:
            raise ConfigError("cluster.nodes", "no node belongs to any pool tree (check node_tag_filter)")
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
        return beat_time(node.phase, node.salt, self.period, self.jitter, k)

    def _first_beat_at_or_after(self, node: _Node, when: float) -> int:
        return self._first_beat_at_or_after_timed(node, when)[0]

    def _first_beat_at_or_after_timed(self, node: _Node, when: float) -> tuple[int, float]:
        """The first beat of ``node`` (from ``k_next`` on) at or after ``when``, and its time."""
        phase, salt, period, jitter = node.phase, node.salt, self.period, self.jitter
        k = max(node.k_next, math.floor((when - phase - jitter) / period))
        t = beat_time(phase, salt, period, jitter, k)
        while t < when:
            k += 1
            t = beat_time(phase, salt, period, jitter, k)
        return k, t

    def _first_beat_after(self, node: _Node, when: float, start: int) -> int:
        phase, salt, period, jitter = node.phase, node.salt, self.period, self.jitter
        k = max(start, math.floor((when - phase - jitter) / period))
        while beat_time(phase, salt, period, jitter, k) <= when:
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
            if op is not None and op.other_trees and op.state in ("pending", "running"):
                if event.get("tree") in op.regular_trees:  # a tree of an operation in several
                    self.operation_model.activated(op, event["tree"], event["time"])
            elif op is not None and op.state == "pending" and event.get("tree", op.tree) == op.tree:
                op.state = "running"
                op.start_time = event["time"]
                tree = self.trees[op.tree]
                assert op.controller is not None
                if op.controller.pending_allocation_count > 0:
                    self._add_pending(tree, op)
                    self.operation_model.check_fit(op)
            elif op is not None and event.get("tree") in op.tentative_trees and op.state == "running":
                self._add_pending(self.trees[event["tree"]], op)  # activated in a tentative tree
        elif kind == "allocation_preempted" and event["reason"] not in SPECULATIVE_ABORT_REASONS:
            self.preemptions_by_reason[event["reason"]] += 1
            op = self.op_by_id.get(event["operation_id"])
            if op is not None:
                tree, pool_name = self.trees[op.tree], op.pool
                if event.get("tree") in op.other_trees:  # preempted in another of its trees: its pool there
                    tree = self.trees[event["tree"]]
                    registered = tree.core.pool_tree.operations.get(op.spec.id)
                    pool_name = registered.pool.name if registered is not None else ""
                pools = tree.core.pool_tree.pools
                pool = pools.get(pool_name)
                while pool is not None and not pool.is_root:
                    tree.preempted_by_pool[pool.name] += 1
                    pool = pool.parent
        self._emit(event)

    # ------------------------------------------------------------------ pending demand (for exact skipping)

    def _add_pending(self, tree: _TreeState, op: _Op) -> None:
        """The operation has pending allocations: idle sleepers wake, once the strategy has published it.

        A heartbeat starts allocations only of operations in the published tree, so demand of an operation
        registered (or activated) since the last fair-share update wakes nobody until that update publishes it
        (`_publish_pending`); waking every idle node at once would process heartbeats that provably start nothing.
        """
        op_id = op.spec.id
        if not tree.core.operation_is_published(op_id):
            tree.unpublished.add(op_id)
            tree.pending_ops.discard(op_id)
            return
        tree.unpublished.discard(op_id)
        tree.pending_ops.add(op_id)
        tree.pending_dirty = True
        self._wake_idle(tree)

    def _drop_pending(self, tree: _TreeState, op_id: str) -> None:
        """The operation has no pending allocation (any more), or stopped running."""
        tree.pending_ops.discard(op_id)
        tree.unpublished.discard(op_id)

    def _publish_pending(self, tree: _TreeState) -> None:
        """After an update: demand of operations it published becomes schedulable, idle sleepers wake."""
        core = tree.core
        published = sorted(op_id for op_id in tree.unpublished if core.operation_is_published(op_id))
        if not published:
            return
        tree.unpublished.difference_update(published)
        tree.pending_ops.update(published)
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
        if op.other_trees and op.state in ("running", "pending"):  # schedulable where its tree runs it
            running = self.operation_model.runs_in(op, tree.name)
        else:
            running = op.state == "running"
        if controller is None or not running:
            self._drop_pending(tree, op.spec.id)
            return
        if controller.pending_allocation_count > 0:
            if op.spec.id not in tree.pending_ops or demand_may_grow:
                self._add_pending(tree, op)
        else:
            self._drop_pending(tree, op.spec.id)

    # ------------------------------------------------------------------ sleeping nodes

    def _wake(self, node: _Node) -> None:
        if not node.sleeping or not node.alive:
            return
        node.sleeping = False
        node.has_timer = False
        tree = self.trees[node.tree]
        self._not_idle(tree, node.index)
        tree.sleepers.discard(node.index)
        tree.untimed_sleepers.discard(node.index)
        k, when = self._first_beat_at_or_after_timed(node, self.now)
        node.token += 1
        self._push(when, HEARTBEAT_EVENT, node.index, k, ("beat", node, node.token))

    def _wake_idle(self, tree: _TreeState) -> None:
        """Schedulable demand appeared: the idle sleepers beat again, one after another in beat order.

        Waking them all at once would be exact too, but each of them beats; once the demand is placed the rest
        find nothing and fall asleep again. Instead the idle sleepers are woken one at a time in the order in
        which they would beat: the next one when the previous one has beaten, while the tree still has
        published pending demand (`_advance_idle_wakes`). A sleeper not reached when the demand is gone would
        have found nothing: its beats are noops until demand appears again, which starts the walk anew.

        The walk needs no pass over all sleepers: the tree's nodes are kept sorted by heartbeat phase, and
        ``phase + k·period`` of a node's first beat that can be at or after ``now`` (jitter aside) is a lower
        bound of its next beat that grows along that order rotated to start at ``(now - jitter) mod period``.
        Nodes are taken along it while their bound does not exceed the earliest exact next beat found so far;
        the exact times go to a small heap ordered like the heartbeat events (time, node index).
        """
        if not tree.idle_sleepers or not tree.phase_order:
            return
        reach = self.now - self.jitter
        offset = reach % self.period
        tree.wake_base = reach - offset
        tree.wake_start = bisect.bisect_left(tree.phases, offset)
        tree.wake_cursor = 0
        tree.wake_queue = []
        tree.wake_head = None
        self._advance_idle_wakes(tree)

    def _advance_idle_wakes(self, tree: _TreeState) -> None:
        """Wake the next idle sleeper in beat order while published demand is pending (see `_wake_idle`).

        The walk's cursor passes every node whose bound is within the earliest exact beat found; it visits only
        the idle sleepers among them (``idle_positions``, their phase positions kept sorted), and finds where
        it stops among the others by bisection (the bounds grow along the walk), so a walk through a busy
        cluster costs the idle nodes it takes, not every node it passes.
        """
        tree.wake_head = None
        queue = tree.wake_queue
        count = len(tree.phase_order)
        if not tree.pending_ops:
            queue.clear()
            tree.wake_cursor = count
            return
        idle = tree.idle_sleepers
        nodes = self.nodes
        order = tree.phase_order
        while True:
            limit = (queue[0][0] if queue else math.inf) + _WAKE_SLACK
            while tree.wake_cursor < count:
                ahead = self._next_idle(tree, tree.wake_cursor)
                if ahead < count and self._wake_bound(tree, ahead) <= limit:
                    tree.wake_cursor = ahead + 1
                    position = tree.wake_start + ahead
                    index = order[position - count if position >= count else position]
                    when = self._first_beat_at_or_after_timed(nodes[index], self.now)[1]
                    heapq.heappush(queue, (when, index))
                    limit = queue[0][0] + _WAKE_SLACK
                    continue
                tree.wake_cursor = self._first_beyond(tree, tree.wake_cursor, ahead, limit)
                break
            if not queue:
                return
            _, index = heapq.heappop(queue)
            if index in idle:
                tree.wake_head = index
                self._wake(nodes[index])
                return

    def _wake_bound(self, tree: _TreeState, step: int) -> float:
        """The lower bound of the next beat of the node ``step`` places along the current walk."""
        position = tree.wake_start + step
        if position >= len(tree.phases):
            return tree.wake_base + self.period + tree.phases[position - len(tree.phases)]
        return tree.wake_base + tree.phases[position]

    def _first_beyond(self, tree: _TreeState, low: int, high: int, limit: float) -> int:
        """The first step in ``low .. high - 1`` of the walk whose bound exceeds ``limit``, else ``high``."""
        while low < high:
            middle = (low + high) // 2
            if self._wake_bound(tree, middle) > limit:
                high = middle
            else:
                low = middle + 1
        return low

    def _next_idle(self, tree: _TreeState, step: int) -> int:
        """The first step at or after ``step`` of the walk that holds an idle sleeper, else the node count."""
        positions = tree.idle_positions
        count = len(tree.phases)
        start = tree.wake_start
        target = start + step
        if target < count:
            i = bisect.bisect_left(positions, target)
            if i < len(positions):
                return positions[i] - start
            if positions and positions[0] < start:
                return positions[0] - start + count
            return count
        i = bisect.bisect_left(positions, target - count)
        if i < len(positions) and positions[i] < start:
            return positions[i] - start + count
        return count

    def _not_idle(self, tree: _TreeState, index: int) -> None:
        if index in tree.idle_sleepers:
            tree.idle_sleepers.discard(index)
            positions = tree.idle_positions
            del positions[bisect.bisect_left(positions, tree.position_of[index])]

    def _catch_up(self, node: _Node, core: SchedulerCore, until_k: int) -> None:
        """Replay the preemptive-backoff timestamp of the skipped beats ``k_next .. until_k - 1``.

        A skipped beat moves the timestamp (`SchedulerCore.skip_heartbeat`) exactly when it is the first beat
        after ``timestamp + backoff``; the chain of such beats is followed here with the same beat times, and
        the last one is written once (what the skipped beats one by one would have left).
        """
        k = node.k_next
        node.k_next = until_k
        if k >= until_k:
            return
        exec_node = core.strategy.nodes.get(node.address)
        if exec_node is None:
            return
        backoff = core.config.preemptive_scheduling_backoff
        last = exec_node.last_preemptive_scheduling_time
        phase, salt, period, jitter = node.phase, node.salt, self.period, self.jitter
        if until_k - k > VECTOR_GAP:
            last, replayed = replay_chain(phase, salt, period, jitter, backoff, k, until_k, last)
            k = until_k
        else:
            replayed = 0
        reach = jitter if jitter > 0 else 0.0  # how late a beat can be after phase + k·period
        while k < until_k:
            if last is None:
                j = k
                t = beat_time(phase, salt, period, jitter, j)
            else:
                when = last + backoff
                j = max(k, math.floor((when - phase - jitter) / period))
                # a beat's time is at most phase + j·period + jitter (the same float sums, rounding is
                # monotonic): beats whose bound is not after ``when`` are passed without hashing
                while phase + j * period + reach <= when:
                    j += 1
                if j >= until_k:
                    break
                t = beat_time(phase, salt, period, jitter, j)
                while t <= when:
                    j += 1
                    t = beat_time(phase, salt, period, jitter, j)
            if j >= until_k:
                break
            last = t
            replayed += 1
            k = j + 1
        if replayed:
            exec_node.last_preemptive_scheduling_time = last
            self.stats["replayed_backoff_beats"] += replayed

    def _set_timer(self, node: _Node, core: SchedulerCore) -> None:
        """A sleeping node wakes at its first beat whose preemptive stages are due."""
        exec_node = core.strategy.nodes[node.address]
        backoff = core.config.preemptive_scheduling_backoff
        now_k = self._first_beat_at_or_after(node, self.now)
        self._catch_up(node, core, now_k)
        last = exec_node.last_preemptive_scheduling_time
        j = node.k_next if last is None else self._first_beat_after(node, last + backoff, node.k_next)
        node.has_timer = True
        self.trees[node.tree].untimed_sleepers.discard(node.index)
        self._schedule_beat(node, j)

    def _sleep(self, node: _Node, core: SchedulerCore) -> None:
        node.sleeping = True
        node.token += 1
        tree = self.trees[node.tree]
        tree.sleepers.add(node.index)
        if core.can_start_more(node.address):
            tree.idle_sleepers.add(node.index)
            bisect.insort(tree.idle_positions, tree.position_of[node.index])
        if core.has_starving_operations():
            self._set_timer(node, core)
        else:
            node.has_timer = False
            tree.untimed_sleepers.add(node.index)

    # ------------------------------------------------------------------ main loop

    @survivors_frozen()  # the process's gc policy while the loop runs (pooltree/gc_policy.py)
    def run(self) -> SimulationResult:
        """Process events until every operation finished or the horizon; returns the collected results."""
        started = wall_clock.perf_counter()
        processed = 0
        end_time = 0.0
        heap = self.heap
        interval = self.progress_interval if self.progress_interval and self.progress_interval > 0 else None
        mark = interval if interval is not None else math.inf
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
                    self.job_model.memory_peak(job)
                elif job is not None and job.token == token:
                    assert job.end_finished is not None
                    self.job_model.finish_job(job, job.end_finished)
            elif kind == "update":
                self._fair_share_update(payload[1])
            elif kind == "arrive":
                self.operation_model.arrive(payload[1])
            elif kind == "lifetime":
                self.operation_model.lifetime_end(payload[1])
            elif kind == "unfit":
                self.operation_model.unfit_timeout(payload[1])
            elif kind == "fail":
                self._node_failed(payload[1])
            elif kind == "restore":
                self._node_restored(payload[1])
            processed += 1
            end_time = when
            if self.arrivals_left == 0 and self.active_ops == 0:
                break
            if self.progress is not None and (processed % 20000 == 0 or when >= mark):
                if interval is not None and when >= mark:
                    mark = (math.floor(when / interval) + 1) * interval
                self.progress(
                    self.now,
                    self.horizon,
                    len(self.ops) - self.arrivals_left - self.active_ops,
                    len(self.ops),
                )
        else:
            end_time = self.now
        self.stats["events"] = processed
        self.metrics.sample(end_time, final=True)
        wall = wall_clock.perf_counter() - started
        if self.progress is not None:
            self.progress(
                end_time, self.horizon, len(self.ops) - self.arrivals_left - self.active_ops, len(self.ops)
            )
        return self.metrics.result(end_time, wall, self.wasted_job_time)

    # ------------------------------------------------------------------ heartbeats

    def _beat(self, node: _Node, k: int) -> None:
        tree = self.trees[node.tree]
        self._heartbeat(node, k, tree)
        if tree.wake_head == node.index:
            self._advance_idle_wakes(tree)

    def _heartbeat(self, node: _Node, k: int, tree: _TreeState) -> None:
        core = tree.core
        if k > node.k_next:
            self._catch_up(node, core, k)
        node.sleeping = False
        node.has_timer = False
        self._not_idle(tree, node.index)
        tree.sleepers.discard(node.index)
        tree.untimed_sleepers.discard(node.index)
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
            self.job_model.apply(node, tree, result)

    # ------------------------------------------------------------------ nodes

    def _node_failed(self, failure: Any) -> None:
        node = self.node_by_address[failure.address]
        if not node.alive:
            return
        tree = self.trees[node.tree]
        node.alive = False
        node.sleeping = False
        node.token += 1
        self._not_idle(tree, node.index)
        tree.sleepers.discard(node.index)
        tree.untimed_sleepers.discard(node.index)
        if tree.wake_head == node.index:
            self._advance_idle_wakes(tree)
        self._emit({"event": "node_failed", "time": self.now, "node": node.address})
        self._node_limits_cache.clear()
        self._online_counts.clear()
        lost = tree.core.remove_node(node.address, self.now)
        tree.changed = True
        touched: dict[str, _Op] = {}
        for allocation in lost:
            job = self.jobs.get(allocation.id)
            if job is not None:
                self.job_model.drop_job(job, "aborted")
                touched[job.op.spec.id] = job.op
        for op_id in sorted(touched):
            self.job_model.after_job_change(touched[op_id], demand_may_grow=True)
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

    def time_phases(self, times: PhaseTimes) -> None:
        """Record the simulator's and its cores' phases in ``times`` from now on (a loaded checkpoint too)."""
        self.phase_times = times
        for tree in self.trees.values():
            tree.core.phase_times = times

    def _fair_share_update(self, index: int) -> None:
        with self.phase_times.phase("period"):
            self._update_trees(index)
        next_time = (index + 1) * self.update_period
        self._push(next_time, FAIR_SHARE_EVENT, index + 1, 0, ("update", index + 1))

    def _update_trees(self, index: int) -> None:
        """One fair-share period of every tree: time limits, the core's update (or republish), records."""
        now = self.now
        self.metrics.sample(now)
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
                self.skip_updates
                and core.last_result is not None
                and not tree.changed
                and not tree.integral
                and not core.refresh_best_allocation(now)  # due shares computed now, as an update would
            )
            if identical:
                self.stats["fair_share_updates_skipped"] += 1
                if any(
                    state.below_fair_share_since is not None for state in core.strategy.starvation.values()
                ):
                    # shares are unchanged but starvation clocks run: publish the same result at this time
                    core.republish(now)
                    self.stats["fair_share_republished"] += 1
                    self.metrics.record(tree, now)
                    if core.has_starving_operations():
                        self._arm_timers(tree)
            else:
                core.update_fair_share(now)
                self.stats["fair_share_updates"] += 1
                tree.changed = False
                self._publish_pending(tree)
                self.metrics.record(tree, now)
                if core.limits_violated():
                    for index in sorted(tree.sleepers):
                        self._wake(self.nodes[index])
                elif core.has_starving_operations():
                    self._arm_timers(tree)
            for address in core.nodes_to_wake():  # segments or the GPU plan gave sleeping nodes work
                node = self.node_by_address.get(address)
                if node is not None:
                    self._wake(node)
            self.metrics.timeline(tree, now, emit)

    def _enforce_time_limits(self, tree: _TreeState, now: float) -> None:
        """Operations past their time_limit fail; jobs past their job_time_limit stop; jobs past their
        job_speculation_timeout get speculative copies (SchedulerCore rules)."""
        for operation_id, error in tree.core.enforce_time_limits(now):
            op = self.op_by_id.get(operation_id)
            if op is not None and op.state in ("running", "pending"):
                op.error = error["message"]
                self.operation_model.finish_operation(op, "failed")
        self._wake_queued(tree)
        for operation_id in tree.core.launch_speculative_jobs(now):  # copies of slow jobs are demand now
            tree.changed = True
            self.job_model.after_job_change(self.op_by_id[operation_id], demand_may_grow=True)

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
        nodes = self.nodes
        for index in sorted(tree.untimed_sleepers):
            self._set_timer(nodes[index], tree.core)
