"""Where the slow heartbeats' time went, for ``bench/live_nodes.py``: the scheduler's ``GET /internal/heartbeat_tail``
(``pooltree/server/live/tail.py``) read at a phase's start and end, and the drivers' own latencies.

``tail_figures`` gives, for a phase:

* ``driver_over_ms`` / ``scheduler_over_ms``: heartbeats slower than the scheduler's slow bound (50 ms) seen by
  the drivers (send to whole answer) and by the scheduler (arrival to answer encoded); the difference is time
  outside the scheduler's handler (the kernel, the answer's way back, the drivers' own loops);
* ``slow_phase_ms``: the mean milliseconds a slow heartbeat spent per phase (queued, decode, lock_wait,
  processing, commit, wake, answer) and ``slow_gc_ms``: of that, garbage collections' pauses;
* ``slow_overlapping``: the share of the slow heartbeats kept (the latest 256) whose span overlapped a stall of
  each kind (a lock hold, a group-commit transaction, a store ``COMMIT``, a collection, a fair-share update of at
  least 10 ms);
* ``stalls``: per kind, the count, the longest and the total milliseconds in the phase (``gc_by_generation``:
  the collections' by generation), and ``lock_holders``: the functions that held the scheduling lock longest in
  total (their long holds' count, longest and total).
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

TIMEOUT = 10.0


def read_tail(url: str, token: str, since: float = 0.0) -> dict[str, Any] | None:
    """The scheduler's heartbeat tail report (stalls and slow heartbeats that ended after ``since``), None when
    the build has none or it did not answer in time."""
    request = urllib.request.Request(
        f"{url}/internal/heartbeat_tail?since={since}", headers={"Authorization": f"OAuth {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


def tail_figures(
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    window: tuple[float, float],
    latencies: list[float],
) -> dict[str, Any]:
    """A phase's figures (see the module docstring) from the reports at its start and end; ``latencies``: the
    drivers' latencies (seconds) of the heartbeats sent in ``window``."""
    if before is None or after is None:
        return {}
    bound = after["slow_seconds"]
    slow = after["slow_heartbeats"] - before["slow_heartbeats"]
    figures: dict[str, Any] = {
        "slow_ms": round(1000 * bound),
        "driver_over_ms": sum(1 for latency in latencies if latency >= bound),
        "scheduler_over_ms": slow,
        "heartbeats_timed": after["heartbeats"] - before["heartbeats"],
    }
    if slow > 0:
        figures["slow_phase_ms"] = {
            phase: round(1000 * (seconds - before["slow_phase_seconds"][phase]) / slow, 2)
            for phase, seconds in after["slow_phase_seconds"].items()
        }
        figures["slow_gc_ms"] = round(1000 * (after["slow_gc_seconds"] - before["slow_gc_seconds"]) / slow, 2)
    timed = figures["heartbeats_timed"]
    if timed > 0:
        figures["phase_ms"] = {
            phase: round(1000 * (seconds - before["phase_seconds"][phase]) / timed, 3)
            for phase, seconds in after["phase_seconds"].items()
        }
    begin, finish = window
    stalls = {
        kind: [s for s in kept if begin <= s["began"] <= finish] for kind, kept in after["stalls"].items()
    }
    figures["stalls"] = {
        kind: {
            "count": len(kept),
            "max_ms": max((s["ms"] for s in kept), default=0.0),
            "total_ms": round(sum(s["ms"] for s in kept), 1),
        }
        for kind, kept in stalls.items()
    }
    collections: dict[str, list[float]] = {}
    for pause in stalls.get("gc", []):
        collections.setdefault(pause["what"], []).append(pause["ms"])
    figures["gc_by_generation"] = {
        what: {"count": len(ms), "max_ms": max(ms), "total_ms": round(sum(ms), 1)}
        for what, ms in sorted(collections.items())
    }
    batches = [s for s in stalls.get("commit_batches", []) if s["what"].split(" ", 1)[0].isdigit()]
    if batches:  # "N records, M submissions": how big the long transactions were
        figures["long_commit_records_mean"] = round(
            sum(int(s["what"].split(" ", 1)[0]) for s in batches) / len(batches), 1
        )
    updates = [s["what"].rsplit(": ", 1)[-1] for s in stalls.get("fair_share_updates", [])]
    cpu = [float(what.split(" ", 1)[0]) for what in updates if what.endswith(" ms of CPU")]
    if cpu:  # the update thread's CPU per update (its wall time is the stall's)
        figures["fair_share_update_cpu_ms_mean"] = round(sum(cpu) / len(cpu), 1)
    holders: dict[str, list[float]] = {}
    for hold in stalls.get("lock_holds", []):
        holders.setdefault(hold["what"], []).append(hold["ms"])
    figures["lock_holders"] = {
        name: {"count": len(ms), "max_ms": max(ms), "total_ms": round(sum(ms), 1)}
        for name, ms in sorted(holders.items(), key=lambda item: -sum(item[1]))[:6]
    }
    kept_slow = [s for s in after["slow"] if begin <= s["answered"] <= finish]
    figures["slow_kept"] = len(kept_slow)
    if kept_slow:
        figures["slow_overlapping"] = {
            kind: round(sum(1 for s in kept_slow if _overlaps(s, spans)) / len(kept_slow), 3)
            for kind, spans in stalls.items()
        }
        figures["slow_max_ms"] = max(s["ms"] for s in kept_slow)
    return figures


def _overlaps(slow: dict[str, Any], stalls: list[dict[str, Any]]) -> bool:
    """Whether a slow heartbeat's span (its answer time back by its milliseconds) overlaps one of ``stalls``."""
    end = slow["answered"]
    start = end - slow["ms"] / 1000
    return any(s["began"] < end and s["began"] + s["ms"] / 1000 > start for s in stalls)


PHASES = ("queued", "decode", "lock_wait", "processing", "commit", "wake", "answer")
"""``pooltree/server/live/tail.py``'s phases, in the order the trace lists them."""


def trace_figures(after: dict[str, Any] | None, window: tuple[float, float]) -> dict[str, Any]:
    """A phase's attribution from the scheduler's trace (``pooltree/server/heartbeat_trace.py``, on with
    ``POOLTREE_HEARTBEAT_TRACE``): for the heartbeats answered in ``window`` that took the trace's bound or
    longer, the mean milliseconds per phase; of their lock wait, the holders whose holds (1 ms or more)
    overlapped it, and the rest (no hold that long: the loop's wake after the release, or holds under 1 ms);
    the collections' pauses overlapping their span; their span split into their loop thread's CPU (the loop's
    own work: other heartbeats, their commits' wake-ups), the other threads' CPU (the update's computation,
    the group commit's thread, the API) and the rest (``off_cpu``: the process had no core). Beside them, the
    window's holds by holder (count, wall and the holder's CPU: long in work or long in waiting) and its
    collections by generation (count, wall, CPU) and its group-commit transactions (``commit_batches``, and those of
    ``LONG_BATCH_MS`` or more apart: records, wall, the committing thread's CPU, the other threads' and the time
    without a core); ``rings_cut`` names the rings that had dropped entries of the window (full: the figures from
    them cover its later part only). Empty when the build or the run has no trace."""
    trace = (after or {}).get("trace")
    if not trace:
        return {}
    begin, finish = window
    slow = [h for h in trace["heartbeats"] if begin <= h["answered"] <= finish]
    holds = [h for h in trace["holds"] if begin <= h["began"] <= finish]
    collections = [c for c in trace["collections"] if begin <= c["began"] <= finish]
    figures: dict[str, Any] = {"bound_ms": round(1000 * trace["seconds"], 1), "heartbeats": len(slow)}
    cut = sorted(
        ring for ring, kept_from in trace.get("kept_from", {}).items() if kept_from and kept_from > begin
    )
    if cut:  # those rings dropped entries of the window (``KEPT``): their figures cover only its later part
        figures["rings_cut"] = cut
    by_holder: dict[str, list[dict[str, Any]]] = {}
    for hold in holds:
        by_holder.setdefault(hold["what"], []).append(hold)
    figures["holds"] = {
        name: {
            "count": len(kept),
            "total_ms": round(sum(h["ms"] for h in kept), 1),
            "cpu_ms": round(sum(h["cpu_ms"] for h in kept), 1),
            "max_ms": max(h["ms"] for h in kept),
        }
        for name, kept in sorted(by_holder.items(), key=lambda item: -sum(h["ms"] for h in item[1]))[:8]
    }
    by_generation: dict[int, list[dict[str, Any]]] = {}
    for pause in collections:
        by_generation.setdefault(pause["generation"], []).append(pause)
    figures["collections"] = {
        str(generation): {
            "count": len(kept),
            "total_ms": round(sum(c["ms"] for c in kept), 1),
            "cpu_ms": round(sum(c["cpu_ms"] for c in kept), 1),
            "max_ms": max(c["ms"] for c in kept),
        }
        for generation, kept in sorted(by_generation.items())
    }
    batches = [b for b in trace.get("batches", []) if begin <= b["began"] <= finish]
    if batches:
        figures["commit_batches"] = _batch_figures(batches)
        long = [b for b in batches if b["ms"] >= LONG_BATCH_MS]
        if long:
            figures["commit_batches_long"] = _batch_figures(long)
    if not slow:
        return figures
    count = len(slow)
    phases = [sum(h["phases_ms"][index] for h in slow) / count for index in range(len(PHASES))]
    figures["mean_ms"] = round(sum(h["ms"] for h in slow) / count, 1)
    figures["phase_ms"] = {name: round(value, 1) for name, value in zip(PHASES, phases, strict=True)}
    waited: dict[str, float] = {}
    unheld = gc_in = loop_cpu = others = off_cpu = 0.0
    for heartbeat in slow:
        end = heartbeat["answered"]
        start = end - heartbeat["ms"] / 1000
        queued, decode, lock_wait = heartbeat["phases_ms"][:3]
        wait_start = start + (queued + decode) / 1000
        wait_end = wait_start + lock_wait / 1000
        covered = 0.0
        for hold in holds:
            overlap = _overlap(hold, wait_start, wait_end)
            if overlap > 0:
                waited[hold["what"]] = waited.get(hold["what"], 0.0) + overlap
                covered += overlap
        unheld += max(lock_wait - covered, 0.0)
        gc_in += sum(_overlap(pause, start, end) for pause in collections)
        loop_cpu += heartbeat["loop_cpu_ms"]
        others += max(heartbeat["process_cpu_ms"] - heartbeat["loop_cpu_ms"], 0.0)
        off_cpu += max(heartbeat["ms"] - heartbeat["process_cpu_ms"], 0.0)
    figures["lock_wait_by_holder_ms"] = {
        name: round(ms / count, 1) for name, ms in sorted(waited.items(), key=lambda item: -item[1])[:8]
    }
    figures["lock_wait_unheld_ms"] = round(unheld / count, 1)
    figures["gc_overlap_ms"] = round(gc_in / count, 1)
    figures["span_ms"] = {
        "loop_cpu": round(loop_cpu / count, 1),
        "other_threads_cpu": round(others / count, 1),
        "off_cpu": round(off_cpu / count, 1),
    }
    return figures


LONG_BATCH_MS = 20.0
"""Group-commit transactions this long or longer are summed apart in ``trace_figures`` (``commit_batches_long``)."""


def _batch_figures(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """Group-commit transactions' count and means: records, wall, the committing thread's CPU, the other threads'
    CPU meanwhile and the rest (the process without a core), milliseconds."""
    count = len(batches)
    wall = sum(b["ms"] for b in batches)
    cpu = sum(b["cpu_ms"] for b in batches)
    process = sum(b["process_cpu_ms"] for b in batches)
    return {
        "count": count,
        "records_mean": round(sum(b["records"] for b in batches) / count, 1),
        "ms_mean": round(wall / count, 2),
        "max_ms": max(b["ms"] for b in batches),
        "thread_cpu_ms_mean": round(cpu / count, 2),
        "other_threads_cpu_ms_mean": round(max(process - cpu, 0.0) / count, 2),
        "off_cpu_ms_mean": round(max(wall - process, 0.0) / count, 2),
        "thread_cpu_us_per_record": round(1000 * cpu / max(sum(b["records"] for b in batches), 1), 1),
    }


def _overlap(stall: dict[str, Any], start: float, end: float) -> float:
    """Milliseconds of ``stall`` (``began``, ``ms``) inside [``start``, ``end``] (wall clock)."""
    began = stall["began"]
    return max(0.0, min(end, began + stall["ms"] / 1000) - max(start, began)) * 1000
