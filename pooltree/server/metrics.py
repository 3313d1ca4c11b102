"""Prometheus metrics of the live scheduler, read at scrape time from the last read snapshot (``live/snapshot.py``:
the published fair-share views and scheduler alerts) and from counters, without the scheduling lock.

One ``CollectorRegistry`` per service (never the global one), so several services in one process (tests) do not
collide. Per tree, pool and operation: fair share, usage, demand (dominant ratios), starvation; per pool running
and pending operation counts; per tree and reason the preemptions so far; per scope (scheduler, operation) and
type the alerts holding now (``pooltree_alerts``, see ``pooltree/alerts.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from pooltree.server.live import LiveScheduler
from pooltree.server.live.lock import HOLD_BUCKETS

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class SchedulerCollector(Collector):
    """Builds the metric families from the scheduler's read snapshot and counters, never under its lock: a scrape
    (every operation's alerts, every pool and operation of the views) does not hold heartbeats up."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self.scheduler = scheduler

    def collect(self) -> Iterator[Metric]:
        yield from _tree_metrics(self.scheduler)
        yield from _work_durations(self.scheduler)
        yield from _heartbeat_queue(self.scheduler)
        yield from _lock_holds(self.scheduler)


def _tree_metrics(scheduler: LiveScheduler) -> Iterator[Metric]:
    """Per tree, pool and operation the published fair-share views' ratios and starvation (the read snapshot's,
    as the orchid shows them), the preemptions so far, the nodes heard from and the alerts holding now (the
    snapshot's scheduler alerts; the operations' read without the lock: ``SchedulerAlerts.counts``)."""
    pool_gauges = {
        key: GaugeMetricFamily(
            f"pooltree_pool_{key}", f"Pool {key.replace('_', ' ')}", labels=["tree", "pool"]
        )
        for key in ("fair_share_ratio", "usage_ratio", "demand_ratio")
    }
    pool_starving = GaugeMetricFamily(
        "pooltree_pool_starving", "1 if the pool is starving", labels=["tree", "pool"]
    )
    running = GaugeMetricFamily(
        "pooltree_pool_running_operations",
        "Running operations in the pool subtree",
        labels=["tree", "pool"],
    )
    pending = GaugeMetricFamily(
        "pooltree_pool_pending_operations", "Operations the pool holds pending", labels=["tree", "pool"]
    )
    op_gauges = {
        key: GaugeMetricFamily(
            f"pooltree_operation_{key}",
            f"Operation {key.replace('_', ' ')}",
            labels=["tree", "operation"],
        )
        for key in ("fair_share_ratio", "usage_ratio", "demand_ratio")
    }
    op_starving = GaugeMetricFamily(
        "pooltree_operation_starving", "1 if the operation is starving", labels=["tree", "operation"]
    )
    preemptions = CounterMetricFamily(
        "pooltree_preemptions", "Allocations preempted by the scheduler", labels=["tree", "reason"]
    )
    nodes = GaugeMetricFamily("pooltree_nodes", "Exec nodes heard from")
    alerts = GaugeMetricFamily(
        "pooltree_alerts",
        "Alerts holding now, by scope (scheduler, operation) and type",
        labels=["scope", "type"],
    )
    snapshot = scheduler.snapshots.current
    counts = scheduler.alert_center.counts(scheduler.now, snapshot.scheduler_alerts)
    for (scope, kind), count in sorted(counts.items()):
        alerts.add_metric([scope, kind], float(count))
    for tree, read in snapshot.trees.items():
        view = read.view
        for name, pool in view.get("pools", {}).items():
            for key, gauge in pool_gauges.items():
                gauge.add_metric([tree, name], float(pool.get(key, 0.0)))
            pool_starving.add_metric([tree, name], _starving(pool.get("starvation_status")))
            running.add_metric([tree, name], float(pool.get("running_operation_count", 0)))
            pending.add_metric([tree, name], float(pool.get("pending_operation_count", 0)))
        for op_id, op in view.get("operations", {}).items():
            for key, gauge in op_gauges.items():
                gauge.add_metric([tree, op_id], float(op.get(key, 0.0)))
            op_starving.add_metric([tree, op_id], _starving(op.get("starvation_status")))
    for (tree, reason), count in sorted(dict(scheduler.preemptions).items()):  # a copy: heartbeats add to it
        preemptions.add_metric([tree, reason], float(count))
    nodes.add_metric([], float(len(scheduler.nodes)))
    yield from pool_gauges.values()
    yield from (pool_starving, running, pending)
    yield from op_gauges.values()
    yield from (op_starving, preemptions, nodes, alerts)


def _work_durations(scheduler: LiveScheduler) -> Iterator[Metric]:
    """Time spent per node heartbeat and per fair-share update (lock wait included), and the longest of each."""
    durations = SummaryMetricFamily(
        "pooltree_scheduler_work_seconds",
        "Time the scheduler spent per node heartbeat / fair-share update (lock wait included)",
        labels=["work"],
    )
    longest = GaugeMetricFamily(
        "pooltree_scheduler_work_max_seconds",
        "Longest single heartbeat / fair-share update",
        labels=["work"],
    )
    for work, (count, total, maximum) in sorted(dict(scheduler.durations).items()):
        durations.add_metric([work], count_value=count, sum_value=total)
        longest.add_metric([work], maximum)
    yield from (durations, longest)


def _heartbeat_queue(scheduler: LiveScheduler) -> Iterator[Metric]:
    """Node heartbeats in flight, throttled past a limit, and how long they waited for their handler."""
    throttle = scheduler.heartbeat_throttle
    in_flight = GaugeMetricFamily(
        "pooltree_scheduler_heartbeats_in_flight",
        "Node heartbeats received and not yet answered (waiting for a worker thread or the lock included)",
    )
    in_flight.add_metric([], float(throttle.in_flight))
    most = GaugeMetricFamily(
        "pooltree_scheduler_heartbeats_in_flight_max", "Most node heartbeats in flight at once so far"
    )
    most.add_metric([], float(throttle.max_in_flight))
    throttled = CounterMetricFamily(
        "pooltree_scheduler_heartbeats_throttled",
        "Node heartbeats whose scheduling was skipped past a concurrent heartbeat limit",
        labels=["limit"],
    )
    for limit, count in sorted(throttle.throttled.items()):
        throttled.add_metric([limit], float(count))
    yield from (in_flight, most, throttled)
    yield from _summary_and_max(
        "pooltree_scheduler_heartbeat_queue_wait",
        "How long node heartbeats waited for their handler after their headers arrived (the event loop's "
        "backlog; past the queued limit a heartbeat is throttled)",
        "Longest wait of a node heartbeat for its handler so far",
        (throttle.queue_waits, throttle.queue_wait_seconds, throttle.queue_wait_max),
    )


def _summary_and_max(
    name: str, summary_help: str, max_help: str, figures: tuple[float, float, float]
) -> Iterator[Metric]:
    """``name``_seconds, a summary of ``figures``' count and sum, and ``name``_max_seconds, its longest."""
    count, total, longest = figures
    summary = SummaryMetricFamily(f"{name}_seconds", summary_help)
    summary.add_metric([], count_value=count, sum_value=total)
    gauge = GaugeMetricFamily(f"{name}_max_seconds", max_help)
    gauge.add_metric([], longest)
    yield from (summary, gauge)


def _lock_holds(scheduler: LiveScheduler) -> Iterator[Metric]:
    """How long the scheduling lock was held each time (a heartbeat waits for the longest holds)."""
    lock = scheduler.lock
    holds = list(lock.holds)
    cumulative, buckets = 0, []
    for bound, count in zip((*map(str, HOLD_BUCKETS), "+Inf"), holds, strict=True):
        cumulative += count
        buckets.append((bound, float(cumulative)))
    histogram = HistogramMetricFamily(
        "pooltree_scheduler_lock_hold_seconds",
        "How long the scheduling lock was held, per hold (heartbeats, commands, each part of a fair-share update)",
    )
    histogram.add_metric([], buckets, sum_value=lock.hold_seconds)
    longest = GaugeMetricFamily(
        "pooltree_scheduler_lock_hold_max_seconds", "Longest single hold of the scheduling lock so far"
    )
    longest.add_metric([], lock.hold_max)
    overtaken = CounterMetricFamily(
        "pooltree_scheduler_fair_share_computes_overtaken",
        "Fair-share updates computed outside the scheduling lock and computed again because their tree changed "
        "meanwhile (live/updates.py publish_computed_apart)",
    )
    overtaken.add_metric([], float(scheduler.updates.computes_overtaken))
    snapshots = scheduler.snapshots
    yield from (histogram, longest, overtaken)
    yield from _summary_and_max(
        "pooltree_scheduler_read_snapshot_capture_cpu",
        "Read snapshots published and their captures' thread CPU under the scheduling lock (live/snapshot.py)",
        "The longest read snapshot capture's thread CPU so far",
        (snapshots.published, snapshots.capture_seconds, snapshots.capture_max),
    )
    yield from _group_commit(scheduler)


def _group_commit(scheduler: LiveScheduler) -> Iterator[Metric]:
    """The group commit's transactions and what they stored (``live/commit.py``): submissions (a heartbeat's job
    records, or one write outside a heartbeat) per transaction say how many heartbeats one sync served."""
    commits = scheduler.commits
    for name, value, text in (
        ("batches", commits.batches, "Store transactions of the group commit"),
        ("submissions", commits.tickets, "Submissions (a heartbeat's job records) the group commit stored"),
        ("records", commits.records, "Job records the group commit stored"),
        ("gathered", commits.gathered, "Group commit transactions whose take waited for the commit interval"),
    ):
        counter = CounterMetricFamily(f"pooltree_scheduler_group_commit_{name}", text)
        counter.add_metric([], float(value))
        yield counter


def _starving(status: object) -> float:
    return 1.0 if status in ("starving", "aggressively_starving") else 0.0


def make_registry(scheduler: LiveScheduler) -> CollectorRegistry:
    """A fresh registry with the scheduler's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector(scheduler))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
