"""Where a slow heartbeat's time went: its phases timed in the service, and the stalls beside them.

Each heartbeat answered on an event loop (``heartbeat_flight.HeartbeatFlight``) is cut into ``PHASES``:

* ``queued``: from its bytes' arrival (the event loop's turn that read them) to its handler: the loop's backlog,
  and the interpreter held by other threads (a garbage collection, the fair-share update's computation);
* ``decode``: authentication, the body, its decoding, the throttle's count;
* ``lock_wait``: from its first try of the scheduling lock to the try that took it (another holder: a fair-share
  update's part, the read snapshot's capture, a command), the loop's wake-up included;
* ``processing``: its work under the lock (a heartbeat that first publishes a stale tree: that publish and its
  hop to a heartbeat thread too);
* ``commit``: waiting for its job records' batch to be stored (the group commit's transaction, and what ran on
  the group commit's thread before it: the batch before; the SQLite store's checkpoints run beside them, on a
  thread of their own, and hold the writes only for a short second pass now and then);
* ``wake``: from that batch's end to the heartbeat's loop running it again;
* ``answer``: encoding the answer.

``HeartbeatTail`` counts every heartbeat's phases (sums, ``pooltree_scheduler_heartbeat_phase_seconds``) and
those of heartbeats slower than ``SLOW_SECONDS`` apart (``pooltree_scheduler_slow_heartbeat_phase_seconds``), with
the garbage collections' pauses inside them (``pooltree_scheduler_slow_heartbeat_gc_seconds``), and keeps the last
``KEPT`` slow ones whole: counters and a bounded ring, nothing per heartbeat beyond a few additions. Beside them,
``report`` gathers the process's recent stalls longer than ``STALL_SECONDS`` that other parts keep in their own
bounded rings: holds of the scheduling lock (with the function that held it), the group commit's transactions,
garbage collections. ``GET /internal/heartbeat_tail`` answers ``report``; ``bench/live_nodes.py`` prints, per
phase, where the slow heartbeats' time went and which stalls they overlapped.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from pooltree.server.stalls import STALL_SECONDS, Stall

PHASES = ("queued", "decode", "lock_wait", "processing", "commit", "wake", "answer")
SLOW_SECONDS = 0.05
"""A heartbeat this long (from its arrival to its answer encoded) or longer is slow."""
KEPT = 256
"""Slow heartbeats kept (the latest)."""


class PhaseClock:
    """One heartbeat's ``PHASES`` as it goes (``time.perf_counter`` marks; ``heartbeat_flight.HeartbeatFlight``)."""

    __slots__ = ("answered", "began", "decoded", "ended", "processed", "queued", "resumed", "tried")

    def __init__(self, queued: float) -> None:
        self.queued = queued
        self.began = self.decoded = self.tried = self.processed = self.resumed = self.answered = (
            time.perf_counter()
        )
        self.ended: float | None = None

    def mark_decoded(self) -> None:
        self.decoded = self.tried = self.processed = self.resumed = time.perf_counter()

    def mark_try(self) -> None:
        """Before each try of the lock: the last one's mark begins ``processing``."""
        self.tried = time.perf_counter()

    def mark_processed(self) -> None:
        self.processed = self.resumed = time.perf_counter()

    def mark_committed(self, ended: float | None) -> None:
        """Back on the loop after the wait for the records' batch, which ended at ``ended`` (None: stored before)."""
        self.resumed = time.perf_counter()
        self.ended = ended

    def phases(self) -> tuple[float, ...]:
        """The ``PHASES``' seconds, the answer encoded now."""
        self.answered = time.perf_counter()
        ended = self.resumed if self.ended is None else min(max(self.ended, self.processed), self.resumed)
        return (
            max(self.queued, 0.0),
            self.decoded - self.began,
            self.tried - self.decoded,
            self.processed - self.tried,
            ended - self.processed,
            self.resumed - ended,
            self.answered - self.resumed,
        )


class HeartbeatTail:
    """The phases of the heartbeats answered so far, and the slow ones (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.timed = 0
        self.seconds = [0.0] * len(PHASES)
        self.slow = 0
        self.slow_seconds = [0.0] * len(PHASES)
        self.slow_gc_seconds = 0.0
        self.recent: deque[tuple[float, str, float, tuple[float, ...], float]] = deque(maxlen=KEPT)
        """(wall-clock answer time, node address, total seconds, the phases' seconds, collections' seconds) of
        the latest slow heartbeats."""

    def record(self, address: str, phases: Sequence[float], gc_seconds: float = 0.0) -> None:
        """One heartbeat answered: its ``PHASES``' seconds, and the collections' pauses that ended within it."""
        total = sum(phases)
        with self._lock:
            self.timed += 1
            seconds = self.seconds
            for index, value in enumerate(phases):
                seconds[index] += value
            if total < SLOW_SECONDS:
                return
            self.slow += 1
            slow = self.slow_seconds
            for index, value in enumerate(phases):
                slow[index] += value
            self.slow_gc_seconds += gc_seconds
        self.recent.append((time.time(), address, total, tuple(phases), gc_seconds))

    def report(self, stalls: dict[str, Iterable[Stall]], since: float = 0.0) -> dict[str, Any]:
        """The counters, the slow heartbeats answered after ``since`` (wall clock) with their phases, and
        ``stalls`` (kind → the ring's stalls) that ended after it."""
        with self._lock:
            counters = {
                "heartbeats": self.timed,
                "phase_seconds": dict(zip(PHASES, self.seconds, strict=True)),
                "slow_heartbeats": self.slow,
                "slow_phase_seconds": dict(zip(PHASES, self.slow_seconds, strict=True)),
                "slow_gc_seconds": self.slow_gc_seconds,
            }
        slow = [
            {
                "answered": round(answered, 4),
                "address": address,
                "ms": round(1000 * total, 2),
                "phases_ms": {
                    name: round(1000 * value, 2) for name, value in zip(PHASES, phases, strict=True)
                },
                "gc_ms": round(1000 * gc, 2),
            }
            for answered, address, total, phases, gc in list(self.recent)
            if answered >= since
        ]
        kept = {
            kind: [
                {"began": round(began, 4), "ms": round(1000 * seconds, 2), "what": what}
                for began, seconds, what in ring
                if began + seconds >= since
            ]
            for kind, ring in stalls.items()
        }
        return {
            "slow_seconds": SLOW_SECONDS,
            "stall_seconds": STALL_SECONDS,
            **counters,
            "slow": slow,
            "stalls": kept,
        }


class TailCollector(Collector):
    """``pooltree_scheduler_heartbeat_phase_seconds`` (every heartbeat) and ``..._slow_heartbeat_*`` families."""

    def __init__(self, tail: Callable[[], HeartbeatTail]) -> None:
        self.tail = tail

    def collect(self) -> Iterator[Metric]:
        tail = self.tail()
        every = CounterMetricFamily(
            "pooltree_scheduler_heartbeat_phase_seconds",
            "Seconds node heartbeats spent per phase (queued, decode, lock_wait, processing, commit, wake, answer)",
            labels=["phase"],
        )
        slow = CounterMetricFamily(
            "pooltree_scheduler_slow_heartbeat_phase_seconds",
            f"Seconds heartbeats slower than {int(SLOW_SECONDS * 1000)} ms spent per phase",
            labels=["phase"],
        )
        for name, total, slow_total in zip(PHASES, tail.seconds, tail.slow_seconds, strict=True):
            every.add_metric([name], total)
            slow.add_metric([name], slow_total)
        timed = CounterMetricFamily("pooltree_scheduler_heartbeats_timed", "Node heartbeats timed by phase")
        timed.add_metric([], float(tail.timed))
        count = CounterMetricFamily(
            "pooltree_scheduler_slow_heartbeats",
            f"Node heartbeats slower than {int(SLOW_SECONDS * 1000)} ms from arrival to answer",
        )
        count.add_metric([], float(tail.slow))
        gc = CounterMetricFamily(
            "pooltree_scheduler_slow_heartbeat_gc_seconds",
            "Garbage collection pauses that ended inside slow heartbeats, seconds",
        )
        gc.add_metric([], tail.slow_gc_seconds)
        yield from (every, slow, timed, count, gc)
