"""The scheduler process's garbage collector: keep full collections short while the operation queue grows.

The scheduler is one process (uvicorn's event loop plus a thread pool), so a collection stalls every request under
way. CPython's full (generation 2) collection walks every tracked object: with 10,000 queued operations that is
~670k objects and ~1 s, during which no request is answered. Tuning, as CPython's ``gc.freeze`` documentation
suggests for long-lived servers:

* after revival and start-up (``settle``): one full collection at a time nobody waits for, then ``gc.freeze()``
  (everything alive then moves to the permanent generation, which no collection walks) and short-walk thresholds
  (``THRESHOLDS``): a middle-generation collection walks at most ~1000 x (5 + 1) objects and, with the survivors
  of each full collection frozen, a full one at most ~3 times that (it comes every 3rd middle one);
* after every full collection the process runs anyway (``tick``, called from the service's loop): freeze the
  survivors too. A full collection has just removed the garbage, so what is frozen is alive; the next full
  collection walks only what was allocated since. CPython starts a full collection only when the objects that
  survived the middle generation since the last one exceed a quarter of those the last one kept, so the pauses
  shrink with the walked set instead of growing with the queue.

The price: a reference cycle among frozen objects that later becomes garbage is never collected (objects freed
by reference counting, i.e. nearly all, are freed as before). ``POOLTREE_GC_TUNING=0`` in the environment turns
the tuning off (for comparisons, see bench/live_queue.py); the pauses are measured either way and exported in
``GET /metrics`` as ``pooltree_gc_pause_seconds`` / ``pooltree_gc_pause_max_seconds`` by generation and
``pooltree_gc_frozen_objects``.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from pooltree.errors import ConfigError

ENVIRONMENT = "POOLTREE_GC_TUNING"
THRESHOLDS = (1_000, 5, 2)


def tuning_enabled(environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """``POOLTREE_GC_TUNING`` is ``1`` (default) or ``0``; anything else is a ``ConfigError`` naming it."""
    value = (os.environ if environ is None else environ).get(ENVIRONMENT, "1").strip()
    if value not in ("0", "1"):
        raise ConfigError(ENVIRONMENT, f"must be 0 or 1, got {value!r}")
    return value == "1"


class GcTuning:
    """Pause accounting (a ``gc.callbacks`` hook) and the freezing policy; the gc is per process, so is this."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # generation -> [count, total seconds, longest seconds]
        self.pauses: dict[int, list[float]] = {0: [0, 0.0, 0.0], 1: [0, 0.0, 0.0], 2: [0, 0.0, 0.0]}
        self.freezes = 0
        self.tuned = False
        self._began: float | None = None
        self._freeze_due = False
        self._installed = 0
        self._saved_thresholds: tuple[int, int, int] | None = None
        self._settling = False

    # ------------------------------------------------------------------ measuring

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        if self._began is None or self._settling:
            return
        seconds = time.perf_counter() - self._began
        self._began = None
        generation = int(info.get("generation", 0))
        with self.lock:
            entry = self.pauses.setdefault(generation, [0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += seconds
            entry[2] = max(entry[2], seconds)
        if generation == 2 and self.tuned:
            self._freeze_due = True  # frozen in tick(): not from inside the collector

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
            gc.unfreeze()
            if self._saved_thresholds is not None:
                gc.set_threshold(*self._saved_thresholds)
            self.tuned = False
            self._freeze_due = False

    # ------------------------------------------------------------------ tuning

    def settle(self) -> None:
        """After revival and start-up: one full collection, freeze what survives, raise the thresholds."""
        if not self.tuned:
            self._saved_thresholds = gc.get_threshold()
        self._settling = True  # start-up's own collection is not a pause anyone waits for: not counted
        try:
            gc.collect()
        finally:
            self._settling = False
        gc.freeze()
        gc.set_threshold(*THRESHOLDS)
        self.tuned = True
        self.freezes += 1

    def tick(self) -> None:
        """Freeze the survivors of the full collection that ran since the last tick (cheap: a list splice)."""
        if self._freeze_due and self.tuned:
            self._freeze_due = False
            gc.freeze()
            self.freezes += 1

    # ------------------------------------------------------------------ metrics

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            pauses = {generation: tuple(entry) for generation, entry in self.pauses.items()}
        return {
            "pauses": pauses,
            "frozen": gc.get_freeze_count(),
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
