"""The scheduler process's garbage collector: keep full collections short while the operation queue grows.

The scheduler is one process (uvicorn's event loop plus a thread pool), so a collection stalls every request under
way. CPython's full (generation 2) collection walks every tracked object: with 10,000 queued operations that is
~670k objects and ~1 s, during which no request is answered. The freezing policy is the process's, shared with the
simulator and ``pooltree fair-share`` (``pooltree.gc_policy``); the service applies it thus:

* after revival and start-up (``settle``): one full collection at a time nobody waits for, then ``gc.freeze()``
  (everything alive then moves to the permanent generation, which no collection walks) and short-walk thresholds
  (``THRESHOLDS``): a middle-generation collection walks at most ~1000 x (5 + 1) objects and, with the survivors
  of each full collection frozen, a full one at most ~3 times that (it comes every 3rd middle one);
* at the end of every middle and full collection (``pooltree.gc_policy``'s ``middle``): freeze the survivors too.
  The collection has just removed the garbage among what it walked, so what is frozen is alive; the old
  generation stays empty and a full collection walks no more than a middle one (``POOLTREE_GC_TUNING=full``: only
  the survivors of each full collection, at the service loop's next ``tick``, the policy before session 31: a
  full collection then walked everything promoted since the last, about once a second at 1,000 nodes).

The price: a reference cycle among frozen objects that later becomes garbage is never collected (objects freed
by reference counting, i.e. nearly all, are freed as before): with ``middle``, any cycle that outlives its first
middle collection (``bench/gc_heap.py``'s ``frozen_garbage`` measures what such cycles would keep).
``POOLTREE_GC_TUNING=0`` in the environment turns the tuning off (for comparisons, see bench/live_queue.py); the
pauses are measured either way and exported in ``GET /metrics`` as ``pooltree_gc_pause_seconds`` /
``pooltree_gc_pause_max_seconds`` by generation and ``pooltree_gc_frozen_objects``.

``pooltree_gc_frozen_objects`` is counted at most once per ``FROZEN_RECOUNT_SECONDS`` and kept between: CPython
counts the permanent generation by walking it with the GIL held (~50 ms per million objects), and frozen objects
freed by reference counting leave it at any time, so no cheaper exact count exists. Counting at every scrape
stalled every request for that long (3% of a loaded scheduler's CPU in ``bench/live_nodes.py``, which reads
``/metrics`` a few times per phase).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from pooltree.gc_policy import ENVIRONMENT, POLICY, THRESHOLDS, tuning_enabled, tuning_mode
from pooltree.server.heartbeat_trace import TRACE
from pooltree.server.stalls import StallRing

__all__ = [
    "ENVIRONMENT",
    "FROZEN_RECOUNT_SECONDS",
    "GC",
    "THRESHOLDS",
    "GcCollector",
    "GcTuning",
    "tuning_enabled",
]

FROZEN_RECOUNT_SECONDS = 60.0
"""How old the frozen-objects gauge may be before a scrape counts again (the count walks the whole generation)."""


class GcTuning:
    """Pause accounting (a ``gc.callbacks`` hook) and the service's hold on the freezing policy
    (``pooltree.gc_policy.POLICY``, frozen at each ``tick``); the gc is per process, so is this."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.lock = threading.Lock()
        self.clock = clock
        # generation -> [count, total seconds, longest seconds]
        self.pauses: dict[int, list[float]] = {0: [0, 0.0, 0.0], 1: [0, 0.0, 0.0], 2: [0, 0.0, 0.0]}
        self.paused_seconds = 0.0
        """Every generation's pauses summed (a heartbeat reads it at its start and end: the pauses inside it)."""
        self.long_pauses = StallRing()
        """Collections of at least ``STALL_SECONDS`` (``live/tail.py``), by generation."""
        self.tuned = False
        self.middle = False
        """Whether the held policy freezes each middle collection's survivors (``POOLTREE_GC_TUNING=1``)."""
        self._began: float | None = None
        self._began_cpu = 0.0
        """The collecting thread's CPU clock at the collection's start (only while ``heartbeat_trace.py`` is on)."""
        self._installed = 0
        self._settling = False
        self._frozen: tuple[float, int] | None = None
        """(when counted, by ``clock``; the count) of the last walk of the permanent generation."""

    @property
    def freezes(self) -> int:
        return POLICY.freezes

    # ------------------------------------------------------------------ measuring

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            if TRACE.enabled:
                self._began_cpu = time.thread_time()
            return
        if self._began is None or self._settling:
            return
        seconds = time.perf_counter() - self._began
        self._began = None
        generation = int(info.get("generation", 0))
        if TRACE.enabled:
            cpu = time.thread_time() - self._began_cpu
            TRACE.collections.append((time.time() - seconds, seconds, generation, cpu))
        self.long_pauses.note(seconds, f"generation {generation}")
        with self.lock:
            self.paused_seconds += seconds
            entry = self.pauses.setdefault(generation, [0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += seconds
            entry[2] = max(entry[2], seconds)

    def install(self) -> None:
        """Start measuring (idempotent; counted, so several services in one process share it)."""
        if self._installed == 0:
            gc.callbacks.append(self._callback)
        self._installed += 1

    def uninstall(self) -> None:
        """Undo one ``install``; the last one removes the hook and undoes the tuning (``gc.unfreeze``)."""
        if self._installed == 0:
            return
        self._installed -= 1
        if self._installed:
            return
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
        if self.tuned:
            # the last holder unfreezes and restores the thresholds
            POLICY.release(at_collection=False, middle=self.middle)
            self.tuned = False
            self.middle = False
            self._frozen = None

    # ------------------------------------------------------------------ tuning

    def settle(self) -> None:
        """After revival and start-up: hold the policy (short-walk thresholds, survivors of each full collection
        frozen at the next ``tick``), one full collection, freeze what survives."""
        if not self.tuned:
            self.middle = tuning_mode() == "1"
            POLICY.acquire(at_collection=False, middle=self.middle)
            self.tuned = True
        self._settling = True  # start-up's own collection is not a pause anyone waits for: not counted
        try:
            POLICY.settle()
        finally:
            self._settling = False

    def tick(self) -> None:
        """Freeze the survivors of the full collection that ran since the last tick (cheap: a list splice)."""
        if self.tuned:
            POLICY.tick()

    # ------------------------------------------------------------------ metrics

    def frozen_objects(self) -> int:
        """The permanent generation's size, counted again only once the last count is ``FROZEN_RECOUNT_SECONDS``
        old (or the tuning was undone since)."""
        now = self.clock()
        kept = self._frozen
        if kept is not None and now - kept[0] < FROZEN_RECOUNT_SECONDS:
            return kept[1]
        count = gc.get_freeze_count()
        self._frozen = (now, count)
        return count

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            pauses = {generation: tuple(entry) for generation, entry in self.pauses.items()}
        return {
            "pauses": pauses,
            "frozen": self.frozen_objects(),
            "freezes": self.freezes,
            "tuned": self.tuned,
        }


GC = GcTuning()


class GcCollector(Collector):
    """``pooltree_gc_*`` metric families from ``GC``."""

    def collect(self) -> Iterator[Metric]:
        state = GC.snapshot()
        pauses = SummaryMetricFamily(
            "pooltree_gc_pause_seconds", "Garbage collections and their pauses", labels=["generation"]
        )
        longest = GaugeMetricFamily(
            "pooltree_gc_pause_max_seconds", "Longest garbage collection pause", labels=["generation"]
        )
        for generation, (count, total, maximum) in sorted(state["pauses"].items()):
            pauses.add_metric([str(generation)], count_value=count, sum_value=total)
            longest.add_metric([str(generation)], maximum)
        frozen = GaugeMetricFamily(
            "pooltree_gc_frozen_objects", "Objects in the permanent (frozen) generation"
        )
        frozen.add_metric([], float(state["frozen"]))
        yield from (pauses, longest, frozen)
