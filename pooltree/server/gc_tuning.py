"""The scheduler process's garbage collector: keep full collections short while the operation queue grows.

The scheduler is one process (uvicorn's event loop plus a thread pool), so a collection stalls every request under
way. CPython's full (generation 2) collection walks every tracked object: with 10,000 queued operations that is
~670k objects and ~1 s, during which no request is answered. The freezing policy is the process's, shared with the
simulator and ``pooltree fair-share`` (``pooltree.gc_policy``); the service applies it thus:

* during revival the collector is off (``live/revival.collector_paused``: the revival's objects are made and kept,
  and its automatic collections walked them again and again), with one young-and-middle collection after it;
* after revival and start-up (``settle``): one full collection at a time nobody waits for, then ``gc.freeze()``
  (everything alive then moves to the permanent generation, which no collection walks) and short-walk thresholds
  (``THRESHOLDS``): a middle-generation collection walks at most ~1000 x (5 + 1) objects and, with the survivors
  of each full collection frozen, a full one at most ~3 times that (it comes every 3rd middle one);
* at the end of every collection, young ones too (``pooltree.gc_policy``'s ``young``, the default since session
  38): freeze the survivors. The collection has just removed the garbage among what it walked, so what is frozen
  is alive; each object is walked once, in the young generation, and no middle collection runs
  (``POOLTREE_GC_TUNING=middle``: every middle and full collection's survivors, sessions 31-37's default, whose
  middle collections walked again what five young ones had walked; ``full``: only the survivors of each full
  collection, at the service loop's next ``tick``, the policy before session 31: a full collection then walked
  everything promoted since the last, about once a second at 1,000 nodes; ``bench/RESULTS.md``, session 38).

The price: a reference cycle among frozen objects that later becomes garbage is not collected (objects freed
by reference counting, i.e. nearly all, are freed as before): any cycle alive at a young collection (with
``middle``: at a middle one). Code that makes and drops cycles runs inside ``GcPolicy.unfrozen`` (the web UI's
charts and pretty JSON). The valve bounds it: once per ``FROZEN_RECOUNT_SECONDS`` the service loop's ``tick`` counts the frozen
generation, and when it grew by ``VALVE_GROWTH`` (half) of its size after the last vent or the settling, and by at
least ``VALVE_MIN_GROWTH`` objects, it vents (``GcPolicy.vent``: everything unfrozen, one full collection, what
lives frozen again). Growth by live objects (a longer queue, more running jobs) vents too, as seldom as the heap
grows by half, as CPython's own full collections come when the long-lived objects grew by a quarter. A vent's
pause is a full collection of the whole heap (0.5-1 s with 1-3M objects, ``bench/gc_heap.py``'s ``vent_ms``). A
vent that finds garbage raises the scheduler alert ``collector_frozen_garbage`` (the objects found and their most
common types: a path makes cycles; ``tests/server/test_gc_tuning.py`` finds such paths) for
``VALVE_ALERT_HOLD`` seconds; ``pooltree_gc_valve_seconds`` (count, sum), ``pooltree_gc_valve_max_seconds`` and
``pooltree_gc_frozen_garbage_objects_total`` count the vents in ``/metrics``.
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
from typing import Any, NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from pooltree.alerts import COLLECTOR_FROZEN_GARBAGE, alert
from pooltree.gc_policy import ENVIRONMENT, POLICY, THRESHOLDS, Vent, tuning_enabled, tuning_mode
from pooltree.server.heartbeat_trace import TRACE
from pooltree.server.stalls import StallRing

__all__ = [
    "ENVIRONMENT",
    "FROZEN_RECOUNT_SECONDS",
    "GC",
    "THRESHOLDS",
    "VALVE_ALERT_HOLD",
    "VALVE_GROWTH",
    "VALVE_MIN_GROWTH",
    "GcCollector",
    "GcTuning",
    "tuning_enabled",
]

FROZEN_RECOUNT_SECONDS = 60.0
"""How old the frozen-objects gauge may be before a scrape counts again (the count walks the whole generation);
also how often the service loop's ``tick`` counts it for the valve."""
VALVE_GROWTH = 0.5
"""The valve vents (``GcPolicy.vent``) when the frozen generation grew by this fraction of its size after the last
vent (or the settling at start-up) ..."""
VALVE_MIN_GROWTH = 100_000
"""... and by at least this many objects (a small heap is not vented for a few thousand)."""
VALVE_ALERT_HOLD = 600.0
"""Seconds the ``collector_frozen_garbage`` alert holds after a vent that found garbage."""


class ValveRecord(NamedTuple):
    """One vent of the valve: when (wall clock), what it found (``Vent``) and the frozen generation's size before
    and after it."""

    time: float
    vent: Vent
    frozen_before: int
    frozen_after: int


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
        """Whether the held policy freezes each middle collection's survivors (``POOLTREE_GC_TUNING=middle``)."""
        self.young = False
        """Whether it freezes every collection's survivors, young ones too (``POOLTREE_GC_TUNING=1``, the default)."""
        self._began: float | None = None
        self._began_cpu = 0.0
        """The collecting thread's CPU clock at the collection's start (only while ``heartbeat_trace.py`` is on)."""
        self._installed = 0
        self._settling = False
        self._frozen: tuple[float, int] | None = None
        """(when counted, by ``clock``; the count) of the last walk of the permanent generation."""
        self.valve_baseline: int | None = None
        """The frozen generation's size after the settling or the last vent (None: not tuned)."""
        self._valve_checked = 0.0
        """When (``clock``) ``tick`` last counted the frozen generation for the valve."""
        self.vents: list[float] = [0, 0.0, 0.0]
        """The valve's vents: [count, total pause seconds, longest]."""
        self.frozen_garbage = 0
        """Objects the vents found unreachable among the frozen ones, in all."""
        self.last_vent: ValveRecord | None = None
        self.last_garbage: ValveRecord | None = None
        """The last vent that found garbage (the alert's); ``_garbage_at``: when, by ``clock``."""
        self._garbage_at = 0.0

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
            POLICY.release(at_collection=False, middle=self.middle, young=self.young)
            self.tuned = False
            self.middle = False
            self.young = False
            self._frozen = None
            self.valve_baseline = None

    # ------------------------------------------------------------------ tuning

    def settle(self) -> None:
        """After revival and start-up: hold the policy (short-walk thresholds, survivors of each full collection
        frozen at the next ``tick``), one full collection, freeze what survives."""
        if not self.tuned:
            mode = tuning_mode()
            self.middle, self.young = mode == "middle", mode == "1"
            POLICY.acquire(at_collection=False, middle=self.middle, young=self.young)
            self.tuned = True
        self._settling = True  # start-up's own collection is not a pause anyone waits for: not counted
        try:
            POLICY.settle()
        finally:
            self._settling = False
        now = self.clock()
        self.valve_baseline = self._count_frozen(now)
        self._valve_checked = now

    def tick(self) -> None:
        """Freeze the survivors of the full collection that ran since the last tick (cheap: a list splice); once
        per ``FROZEN_RECOUNT_SECONDS``, count the frozen generation and vent when it grew past the valve's bound
        (``VALVE_GROWTH``, ``VALVE_MIN_GROWTH``)."""
        if not self.tuned:
            return
        POLICY.tick()
        now = self.clock()
        if self.valve_baseline is None or now - self._valve_checked < FROZEN_RECOUNT_SECONDS:
            return
        self._valve_checked = now
        frozen = self._count_frozen(now)
        if frozen - self.valve_baseline >= max(VALVE_MIN_GROWTH, VALVE_GROWTH * self.valve_baseline):
            self.vent(frozen)

    def vent(self, frozen_before: int | None = None) -> ValveRecord:
        """Vent now (``GcPolicy.vent``): the valve's figures, the alert's record when it found garbage, and the
        frozen generation counted again (the valve's new baseline)."""
        before = self._count_frozen(self.clock()) if frozen_before is None else frozen_before
        vent = POLICY.vent()
        now = self.clock()
        after = self._count_frozen(now)
        record = ValveRecord(time.time(), vent, before, after)
        with self.lock:
            self.vents[0] += 1
            self.vents[1] += vent.seconds
            self.vents[2] = max(self.vents[2], vent.seconds)
            self.frozen_garbage += vent.found
            self.last_vent = record
            if vent.found:
                self.last_garbage, self._garbage_at = record, now
        self.valve_baseline = after
        return record

    def alert(self) -> dict[str, Any] | None:
        """The ``collector_frozen_garbage`` scheduler alert (a vent found garbage in the last
        ``VALVE_ALERT_HOLD`` seconds), or None."""
        with self.lock:
            record, at = self.last_garbage, self._garbage_at
        if record is None or self.clock() - at > VALVE_ALERT_HOLD:
            return None
        vent = record.vent
        return alert(
            COLLECTOR_FROZEN_GARBAGE,
            f"The collector's valve found {vent.found} objects in reference cycles among the frozen ones: a path "
            "of the scheduler makes cycles that the freezing policy keeps until a vent",
            {
                "found_objects": vent.found,
                "found_kinds": dict(vent.kinds),
                "frozen_objects_before": record.frozen_before,
                "frozen_objects_after": record.frozen_after,
                "vent_seconds": round(vent.seconds, 4),
                "vent_time": record.time,
                "frozen_garbage_objects_total": self.frozen_garbage,
            },
        )

    # ------------------------------------------------------------------ metrics

    def frozen_objects(self) -> int:
        """The permanent generation's size, counted again only once the last count is ``FROZEN_RECOUNT_SECONDS``
        old (or the tuning was undone since)."""
        now = self.clock()
        kept = self._frozen
        if kept is not None and now - kept[0] < FROZEN_RECOUNT_SECONDS:
            return kept[1]
        return self._count_frozen(now)

    def _count_frozen(self, now: float) -> int:
        """Walk the permanent generation (``gc.get_freeze_count``); the gauge's count from now on."""
        count = gc.get_freeze_count()
        self._frozen = (now, count)
        return count

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            pauses = {generation: tuple(entry) for generation, entry in self.pauses.items()}
            vents = tuple(self.vents)
            garbage = self.frozen_garbage
        return {
            "pauses": pauses,
            "frozen": self.frozen_objects(),
            "freezes": self.freezes,
            "tuned": self.tuned,
            "vents": vents,
            "frozen_garbage": garbage,
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
        count, total, maximum = state["vents"]
        vents = SummaryMetricFamily(
            "pooltree_gc_valve_seconds",
            "The collector's valve: full collections of the unfrozen heap that reclaim cycles frozen by the policy",
            count_value=count,
            sum_value=total,
        )
        vent_longest = GaugeMetricFamily(
            "pooltree_gc_valve_max_seconds", "Longest pause of the collector's valve"
        )
        vent_longest.add_metric([], maximum)
        garbage = CounterMetricFamily(
            "pooltree_gc_frozen_garbage_objects",
            "Objects the valve found unreachable among the frozen ones (reference cycles the policy had frozen)",
        )
        garbage.add_metric([], float(state["frozen_garbage"]))
        yield from (pauses, longest, frozen, vents, vent_longest, garbage)
