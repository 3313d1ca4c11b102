"""An off-by-default trace of what made each slow heartbeat slow: who held the lock, the collector, the CPU.

``live/tail.py`` times every heartbeat's phases and keeps the stalls of 10 ms or more; it cannot say whether a
heartbeat that waited 100 ms for its loop waited behind the loop's own work (other heartbeats), behind another
thread of the process holding the interpreter (the fair-share update's computation, the group commit's thread),
or for a core the machine did not give the process, nor who held the lock in the holds shorter than 10 ms. With
``POOLTREE_HEARTBEAT_TRACE=S`` in the scheduler's environment (S: seconds, e.g. ``0.1``; unset or ``0``: off,
nothing is measured beyond the tail's own marks) the process also keeps, in bounded rings (``KEPT`` each, the
latest):

* every heartbeat of S seconds or more: its phases, the collections' pauses inside it, its loop thread's CPU
  and the process's CPU (every thread) from its arrival to its answer;
* every hold of the scheduling lock of ``HOLD_SECONDS`` or more: when, how long, the holder's function and the
  holder thread's CPU during the hold;
* every garbage collection: when, how long, its generation and the collecting thread's CPU during it;
* every group-commit transaction (``live/commit.py``): when, how long, its job records and the committing thread's
  CPU and the process's during it (wall past the thread's CPU: the interpreter held by other threads, or no core).

``GET /internal/heartbeat_tail`` adds them (``trace``) when on; ``bench/heartbeat_tail.py`` (``trace_figures``)
attributes each slow heartbeat's time: lock waits by the holders that overlapped them, collections, the group
commit, and its span split into its loop's CPU (the loop's own work, other heartbeats first), the other threads'
CPU (the interpreter held elsewhere) and the time the process had no core. Its cost when on: two clock reads per
hold of the lock and per collection, four per heartbeat (~2 us a heartbeat).
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from pooltree.errors import ConfigError

ENVIRONMENT = "POOLTREE_HEARTBEAT_TRACE"
KEPT = 8192
"""Entries kept per ring (the latest): ~8 s of collections and of lock holds at 1,000 loaded heartbeats/s."""
HOLD_SECONDS = 0.001
"""Holds of the scheduling lock this long or longer are traced (shorter ones are a heartbeat's own)."""


def trace_seconds(environ: Mapping[str, str] | None = None) -> float:
    """``POOLTREE_HEARTBEAT_TRACE``: the slow bound in seconds, 0.0 when off; a value that is not a non-negative
    number is a ``ConfigError`` naming the variable."""
    value = (os.environ if environ is None else environ).get(ENVIRONMENT, "").strip()
    if not value:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigError(ENVIRONMENT, f"must be seconds (e.g. 0.1) or 0, got {value!r}") from None
    if not seconds >= 0.0 or seconds == float("inf"):
        raise ConfigError(ENVIRONMENT, f"must be seconds (e.g. 0.1) or 0, got {value!r}")
    return seconds


class HeartbeatTrace:
    """The rings (see the module docstring); ``enabled`` is fixed when made. Appended by the threads that
    measured (a deque's append is atomic), read as a copy."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        """Heartbeats this long or longer are kept (0: the trace is off)."""
        self.enabled = seconds > 0.0
        self.heartbeats: deque[tuple[float, str, float, tuple[float, ...], float, float, float]] = deque(
            maxlen=KEPT
        )
        """(answered, wall clock; address; total seconds; the ``tail.PHASES``' seconds; collections' seconds
        inside; the loop thread's CPU seconds and the process's over its span)."""
        self.holds: deque[tuple[float, float, str, float]] = deque(maxlen=KEPT)
        """(began, wall clock; seconds; the holder's function; the holder thread's CPU seconds)."""
        self.collections: deque[tuple[float, float, int, float]] = deque(maxlen=KEPT)
        """(began, wall clock; seconds; generation; the collecting thread's CPU seconds)."""
        self.batches: deque[tuple[float, float, int, float, float]] = deque(maxlen=KEPT)
        """(began, wall clock; seconds; job records; the committing thread's CPU seconds and the process's)."""

    def heartbeat(self, address: str, phases: tuple[float, ...], gc_seconds: float, span: SpanCpu) -> None:
        """One heartbeat answered (its ``tail.PHASES``' seconds, the collections' pauses inside it, the CPU
        clocks at its arrival): kept when it took ``seconds`` or more."""
        total = sum(phases)
        if total < self.seconds:
            return
        loop_cpu, process_cpu = span.since()
        self.heartbeats.append((time.time(), address, total, phases, gc_seconds, loop_cpu, process_cpu))

    def report(self, since: float) -> dict[str, Any]:
        """The rings' entries that ended after ``since`` (wall clock), as JSON-ready lists."""
        return {
            "seconds": self.seconds,
            "hold_seconds": HOLD_SECONDS,
            "heartbeats": [
                {
                    "answered": round(answered, 4),
                    "address": address,
                    "ms": round(1000 * total, 2),
                    "phases_ms": [round(1000 * value, 2) for value in phases],
                    "gc_ms": round(1000 * gc, 2),
                    "loop_cpu_ms": round(1000 * loop_cpu, 2),
                    "process_cpu_ms": round(1000 * process_cpu, 2),
                }
                for answered, address, total, phases, gc, loop_cpu, process_cpu in list(self.heartbeats)
                if answered >= since
            ],
            "holds": _spans(self.holds, "what", since),
            "collections": _spans(self.collections, "generation", since),
            "batches": [
                {
                    "began": round(began, 5),
                    "ms": round(1000 * seconds, 3),
                    "records": records,
                    "cpu_ms": round(1000 * cpu, 3),
                    "process_cpu_ms": round(1000 * process_cpu, 3),
                }
                for began, seconds, records, cpu, process_cpu in list(self.batches)
                if began + seconds >= since
            ],
            "kept_from": {
                "heartbeats": _kept_from(self.heartbeats),
                "holds": _kept_from(self.holds),
                "collections": _kept_from(self.collections),
                "batches": _kept_from(self.batches),
            },
        }


def _kept_from(ring: deque[Any]) -> float | None:
    """When a full ring's oldest entry was taken (wall clock; entries before it were dropped to keep ``KEPT``),
    None while the ring has dropped nothing: a window that begins earlier is not whole in that ring."""
    if len(ring) < KEPT:
        return None
    try:
        return round(float(ring[0][0]), 5)
    except IndexError:  # emptied meanwhile (never, today: nothing pops)
        return None


def _spans(ring: Iterable[tuple[float, float, Any, float]], label: str, since: float) -> list[dict[str, Any]]:
    """The spans of ``ring`` (began, seconds, what, thread CPU) that end at ``since`` or later, as the report's
    maps; ``label`` names the third field."""
    return [
        {
            "began": round(began, 5),
            "ms": round(1000 * seconds, 3),
            label: what,
            "cpu_ms": round(1000 * cpu, 3),
        }
        for began, seconds, what, cpu in list(ring)
        if began + seconds >= since
    ]


TRACE = HeartbeatTrace(trace_seconds())
"""The process's trace (the collector and the lock are per process), off unless ``POOLTREE_HEARTBEAT_TRACE``."""


class SpanCpu:
    """The loop thread's and the process's CPU clocks at a heartbeat's arrival (made only when tracing)."""

    __slots__ = ("process", "thread")

    def __init__(self) -> None:
        self.thread = time.thread_time()
        self.process = time.process_time()

    def since(self) -> tuple[float, float]:
        """(the thread's, the process's) CPU seconds since made."""
        return time.thread_time() - self.thread, time.process_time() - self.process
