"""How long the forecast's copy of a live scheduler stalls others, in one process; prints one JSON object.

A `LiveScheduler` in this process holds ``--operations`` running operations of ``--jobs`` jobs (``--queued`` more
wait in a pool at its running-operation limit) on ``--nodes`` nodes of ``--slots`` slots, with jobs running and
completed (real heartbeats processed in-process). A probe thread stands in for the heartbeats: every
``--probe-period`` seconds it takes and releases the scheduler's lock, noting how late it got it (its wait for
the lock, and for the interpreter after its sleep). Meanwhile the refresher's server side runs, alternately:

- ``single``: the copy in one hold of the lock (``take_state(hold=inf)``, as before session 22) and the state
  pickled in one ``pickle.dumps`` (as the process pool's feeder thread did);
- ``sliced``: the copy in 2 ms holds (``COPY_HOLD``) with unchanged operations reused (`OperationCopies`), and
  the state pickled operation by operation (`state_parcel`), as the service does now.

Before each refresh every node heartbeats once (a job completed, another started), so the running operations
change between two copies as they do live (the queued ones do not); those heartbeats' own holds count in
``none``.

Per mode, over ``--rounds`` refreshes: the probe's lateness (p50, p99, max) while a refresh ran and while none
did, the refresher's CPU seconds, and the longest hold of the lock. The machine's load is noted; the probe's
lateness grows with it (a thread holding the lock can be preempted), so compare the modes of one run.

    flock -w 1800 /work/bench.lock .venv/bin/python bench/forecast_copy.py
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import pickle
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_common import machine, quantile_ms, uptime

from pooltree.config import parse_pool_trees
from pooltree.forecast.live import CopyCost, DurationHistory, OperationCopies, SubmissionHistory, take_state
from pooltree.forecast.process import state_parcel
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store


def _heartbeat(live: LiveScheduler, node: str, slots: int, now: float, finished: int) -> None:
    running = [
        {"job_id": job.id, "operation_id": job.operation_id, "resource_usage": {"user_slots": 1, "cpu": 1}}
        for job in live.jobs.values()
        if job.state == "running" and job.address == node
    ]
    body = {
        "node_address": node,
        "resource_limits": {"user_slots": slots, "cpu": slots, "memory": slots << 30},
        "running_jobs": running[finished:],
        "finished_jobs": [{**job, "state": "completed"} for job in running[:finished]],
    }
    live.process_heartbeat(parse_heartbeat(body), now)


def cluster(args: argparse.Namespace, data: Path) -> tuple[LiveScheduler, list[str]]:
    live = LiveScheduler(open_store(f"sqlite:///{data / 'db.sqlite'}"))
    many = {"max_operation_count": 100_000, "max_running_operation_count": 100_000}
    queue = {"max_operation_count": 100_000, "max_running_operation_count": 1}
    trees = {"default": {"config": {}, "pools": {"work": many, "queued": queue}}}
    live.apply_pool_trees(parse_pool_trees(trees), None, 0.0)
    for index in range(args.operations + args.queued):
        pool = "work" if index < args.operations else "queued"
        spec = {"pool": pool, "tasks": {"main": {"command": "true", "job_count": args.jobs, "cpu_limit": 1}}}
        live.start_operation("vanilla", spec, "alice", 1.0 + index * 0.001)
    nodes = [f"n{index:04d}" for index in range(args.nodes)]
    for step in range(3):
        for node in nodes:
            _heartbeat(live, node, args.slots, 10.0 + step * 10, finished=2 if step else 0)
    return live, nodes


class Probe:
    """The stand-in for heartbeats (see the module docstring)."""

    def __init__(self, live: LiveScheduler, period: float) -> None:
        self.live = live
        self.period = period
        self.samples: list[tuple[float, float]] = []
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while self.running:
            due = time.perf_counter() + self.period
            time.sleep(self.period)
            with self.live.lock:
                got = time.perf_counter()
            self.samples.append((due, got - due))


def refresh(live: LiveScheduler, mode: str, state: dict[str, Any]) -> dict[str, float]:
    cost = CopyCost()
    cpu = time.thread_time()
    if mode == "single":
        found = take_state(live, DurationHistory(), 100.0, SubmissionHistory(0.0), cost, hold=math.inf)
        pickle.dumps(found, pickle.HIGHEST_PROTOCOL)
    else:
        found = take_state(live, state["history"], 100.0, state["submissions"], cost, copies=state["copies"])
        state_parcel(found, state["pickled"])
    return {"cpu": time.thread_time() - cpu, "longest_hold": cost.longest_hold, "holds": len(cost.holds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--operations", type=int, default=100)
    parser.add_argument("--queued", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--probe-period", type=float, default=0.001)
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between two refreshes")
    args = parser.parse_args()
    load_before = uptime()
    with tempfile.TemporaryDirectory(prefix="pooltree-forecast-copy-") as tmp:
        live, nodes = cluster(args, Path(tmp))
        gc.collect()
        gc.freeze()  # as the service settles after start-up (`pooltree.server.gc_tuning`)
        sliced_state = {
            "history": DurationHistory(),
            "submissions": SubmissionHistory(0.0),
            "copies": OperationCopies(),
            "pickled": {},
        }
        refresh(live, "sliced", sliced_state)  # the first copy fills the caches
        probe = Probe(live, args.probe_period)
        probe.thread.start()
        windows: dict[str, list[tuple[float, float]]] = {"single": [], "sliced": []}
        costs: dict[str, list[dict[str, float]]] = {"single": [], "sliced": []}
        now = 40.0
        for _ in range(args.rounds):
            for mode in ("single", "sliced"):
                now += 10.0
                for (
                    node
                ) in nodes:  # every node reports a job completed and is given another: operations change
                    _heartbeat(live, node, args.slots, now, finished=1)
                time.sleep(args.gap)
                begin = time.perf_counter()
                costs[mode].append(refresh(live, mode, sliced_state))
                windows[mode].append((begin, time.perf_counter()))
        time.sleep(args.gap)
        probe.running = False
        probe.thread.join()
        running_jobs = sum(1 for job in live.jobs.values() if job.state == "running")
    inside: dict[str, list[float]] = {"single": [], "sliced": [], "none": []}
    for due, late in probe.samples:
        mode = next(
            (m for m, spans in windows.items() if any(a <= due + late and due <= b for a, b in spans)), "none"
        )
        inside[mode].append(late)
    result = {
        "parameters": vars(args),
        "machine": machine(),
        "running_jobs": running_jobs,
        "load_before": load_before,
        "load_after": uptime(),
        "modes": {
            mode: {
                "probes": len(values),
                "late_p50_ms": quantile_ms(values, 0.5),
                "late_p99_ms": quantile_ms(values, 0.99),
                "late_max_ms": quantile_ms(values, 1.0),
                **(
                    {
                        "refresh_cpu_ms_median": round(
                            1000 * statistics.median(c["cpu"] for c in costs[mode]), 2
                        ),
                        "longest_hold_ms_median": round(
                            1000 * statistics.median(c["longest_hold"] for c in costs[mode]), 2
                        ),
                        "longest_hold_ms_max": round(1000 * max(c["longest_hold"] for c in costs[mode]), 2),
                        "holds_median": statistics.median(c["holds"] for c in costs[mode]),
                    }
                    if mode in costs
                    else {}
                ),
            }
            for mode, values in inside.items()
        },
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
