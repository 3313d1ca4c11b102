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
