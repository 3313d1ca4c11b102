"""Per-pool fair share, usage and demand over the last hours, kept by the scheduler in bounded memory.

``PoolHistory`` listens to the live scheduler's fair-share updates (``LiveScheduler.update_listeners``) and keeps
at most one sample per ``period`` seconds per tree in a ring of ``size`` samples (3 hours at the defaults), plus
the preemptions of that time (from the scheduler's event log) to mark on the chart. Memory is bounded by
``size`` × pools per tree; older samples drop out first.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pooltree.server.live import LiveScheduler

DEFAULT_PERIOD = 10.0
DEFAULT_SIZE = 1080
MAX_PREEMPTIONS = 5000


@dataclass
class Sample:
    """One moment of a tree: pool → (fair share, usage, demand, starving) as dominant-resource ratios."""

    time: float
    pools: dict[str, tuple[float, float, float, bool]]


@dataclass
class TreeHistory:
    samples: deque[Sample]
    preemptions: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_PREEMPTIONS))
    last_sample: float = float("-inf")


class PoolHistory:
    """Samples of every tree's pools; ``attach(scheduler)`` subscribes it to fair-share updates."""

    def __init__(self, *, period: float = DEFAULT_PERIOD, size: int = DEFAULT_SIZE) -> None:
        if period < 0 or size < 2:
            raise ValueError("history period must be >= 0 and size >= 2")
        self.period = period
        self.size = size
        self.trees: dict[str, TreeHistory] = {}
        self._lock = threading.Lock()
        self._seen_events = 0
        self._scheduler: LiveScheduler | None = None
        self.version = 0
        """Counts the changes of what ``series`` and ``pools`` answer (a sample or a preemption kept): the web
        pages keep a rendered History page per snapshot and ``version``."""

    def attach(self, scheduler: LiveScheduler) -> None:
        self._scheduler = scheduler
        scheduler.update_listeners.append(self.on_update)

    def on_update(self, tree: str, now: float) -> None:
        """Called under the scheduler's lock after a fair-share update of ``tree``. The tree's view (built per
        element on first read after an update, `TreeViews`) is read only when a sample is due: at a 1 s update
        period and a 10 s sample period, building it at every update was most of what the update cost the
        scheduler beside the fair share (7% of a loaded scheduler's CPU, `bench/live_nodes.py`)."""
        scheduler = self._scheduler
        if scheduler is None or tree not in scheduler.views:
            return
        with self._lock:
            history = self.trees.get(tree)
            if history is None:
                history = self.trees[tree] = TreeHistory(deque(maxlen=self.size))
            self._collect_preemptions(scheduler)
            if now - history.last_sample < self.period:
                return
            # the pools alone: the capture is the one the update's publication takes, the operations' entries
            # (most of a view) are not made under the lock (``ViewCapture.pools_view``)
            view_pools = scheduler.views.capture(tree).pools_view()
            history.last_sample = now
            pools = {
                name: (
                    float(pool.get("fair_share_ratio", 0.0)),
                    float(pool.get("usage_ratio", 0.0)),
                    float(pool.get("demand_ratio", 0.0)),
                    pool.get("starvation_status", "non_starving") != "non_starving",
                )
                for name, pool in view_pools.items()
            }
            history.samples.append(Sample(now, pools))
            self.version += 1
            for name in [t for t in self.trees if t not in scheduler.views]:
                del self.trees[name]

    def _collect_preemptions(self, scheduler: LiveScheduler) -> None:
        """Preemptions from the event log since the last look (the log is a bounded deque: count from its end)."""
        events = scheduler.event_log
        fresh = min(scheduler.event_count - self._seen_events, len(events))
        self._seen_events = scheduler.event_count
        new = [events[i] for i in range(len(events) - fresh, len(events))] if fresh > 0 else []
        for event in new:
            if event.get("event") != "allocation_preempted":
                continue
            tree = event.get("tree")
            history = self.trees.get(tree) if isinstance(tree, str) else None
            if history is None:
                continue
            capture = scheduler.views.capture(tree) if tree in scheduler.views else None  # no view assembled
            operation_id = event.get("operation_id")
            pool = capture.operation_pool(operation_id) if capture is not None and operation_id else None
            preemptor = event.get("preemptor_operation_id")
            preemptor_pool = capture.operation_pool(preemptor) if capture is not None and preemptor else None
            self.version += 1
            history.preemptions.append(
                {
                    "time": float(event.get("time", 0.0)),
                    "operation_id": event.get("operation_id"),
                    "pool": pool,
                    "preemptor_operation_id": preemptor,
                    "preemptor_pool": preemptor_pool,
                    "reason": event.get("reason"),
                }
            )

    def series(self, tree: str, pool: str) -> dict[str, Any]:
        """Times and fair share / usage / demand / starving of one pool, and the preemptions touching it."""
        with self._lock:
            history = self.trees.get(tree)
            if history is None:
                return {
                    "time": [],
                    "fair_share": [],
                    "usage": [],
                    "demand": [],
                    "starving": [],
                    "preemptions": [],
                }
            times, fair, usage, demand, starving = [], [], [], [], []
            for sample in history.samples:
                values = sample.pools.get(pool)
                if values is None:
                    continue
                times.append(sample.time)
                fair.append(values[0])
                usage.append(values[1])
                demand.append(values[2])
                starving.append(values[3])
            preemptions = [
                p for p in history.preemptions if pool in ("<Root>", p.get("pool"), p.get("preemptor_pool"))
            ]
        return {
            "time": times,
            "fair_share": fair,
            "usage": usage,
            "demand": demand,
            "starving": starving,
            "preemptions": preemptions,
        }

    def pools(self, tree: str) -> list[str]:
        with self._lock:
            history = self.trees.get(tree)
            if history is None or not history.samples:
                return []
            return list(history.samples[-1].pools)
