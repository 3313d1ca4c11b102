"""Benchmark a loaded scheduler's kill -9 and restart under many nodes; prints one JSON object.

A real ``pooltree scheduler`` (SQLite store, a fixed port) holds ``--nodes`` simulated exec nodes (``bench/
live_nodes.py``'s drivers: the real wire format, a connection per node kept as the node agent keeps it, back to the
scheduler's port when the heartbeat listener or shard does not answer, the agent's backoff when the scheduler does
not either). Operations are started, the cluster fills and turns over for ``--warmup-seconds``, ``--seconds`` are
measured, then the scheduler is killed (SIGKILL, its shard processes end with it) and started again at once on the
same data and port, as a supervisor restarts it, and the nodes go on for ``--after-seconds``.

Reported, in seconds from the kill: ``listening_s`` (the new process prints its address), ``first_answer_s`` (a
heartbeat answered 200), ``answered_again_s`` (the first second from which every later one answered at least 95%
of the offered heartbeats), ``starting_again_s`` (the first allocation started again); heartbeats that failed
(``errors``: refused or reset connections, non-200 answers) from the kill on; ``before``/``after``: heartbeats
answered per second, p50/p99, allocations started per second and the scheduler's CPU in a window of
``--seconds`` before the kill and in the last ``--seconds`` of the run (``live_nodes``' phase figures);
``revival``: the jobs running on the nodes at the kill, and how many of them the restarted scheduler aborted (it
keeps the jobs its store holds); and the
guarantees over the whole run (``jobs_run_twice``: a job index of an operation started again after it completed, or
while another start of it still ran: must be 0), from every node's job events.

Usage: .venv/bin/python bench/live_restart.py [--nodes 1000] [--period 1] [--drivers 3] [--operations 200]
       [--jobs 1000] [--job-seconds 10] [--seconds 10] [--warmup-seconds 15] [--after-seconds 30] [--shards 1]
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import signal
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))  # loopback.free_port

from live_common import join_processes, machine
from live_nodes import (
    REQUEST_TIMEOUT,
    Scheduler,
    _phase,
    _start_operations,
    add_driver_arguments,
    start_node_drivers,
)
from loopback import free_port

RECOVERED_SHARE = 0.95
"""A second counts as recovered when its answered heartbeats reach this share of the offered rate."""

Record = tuple[float, float, int, int]
JobEvent = tuple[str, str, float, str, int]


def recovery(records: list[Record], killed: float, finish: float, offered: float) -> dict[str, Any]:
    """The seconds after ``killed`` until heartbeats are answered, at the offered rate, and start allocations."""
    after = [r for r in records if killed <= r[1] < finish]
    answered = sorted(r[1] for r in after if r[2] == 200)
    starting = sorted(r[1] for r in after if r[2] == 200 and r[3] > 0)
    per_second: dict[int, int] = defaultdict(int)
    for at in answered:
        per_second[int(at - killed)] += 1
    seconds = int(finish - killed)
    recovered = None
    for second in range(seconds - 1, -1, -1):  # the first second from which every later one is recovered
        if per_second.get(second, 0) < RECOVERED_SHARE * offered:
            break
        recovered = second
    return {
        "first_answer_s": round(answered[0] - killed, 2) if answered else None,
        "answered_again_s": recovered,
        "starting_again_s": round(starting[0] - killed, 2) if starting else None,
        "errors": sum(1 for r in after if r[2] != 200),
        "answered_per_second": [per_second.get(s, 0) for s in range(seconds)],
    }


def jobs_run_twice(events: list[JobEvent], killed: float) -> dict[str, Any]:
    """From every node's job events: job indexes of an operation started again after a start of them completed,
    or while another start of them still ran (not aborted or completed first); and the jobs running at ``killed``
    with how many of them were aborted after it (by the restarted scheduler)."""
    by_job: dict[str, list[JobEvent]] = defaultdict(list)
    starts: dict[tuple[str, int], list[JobEvent]] = defaultdict(list)
    for event in events:
        by_job[event[1]].append(event)
        if event[0] == "start":
            starts[(event[3], event[4])].append(event)

    def ended(job_id: str) -> tuple[str, float] | None:
        for kind, _, at, _, _ in by_job[job_id]:
            if kind in ("completed", "aborted"):
                return kind, at
        return None

    twice: list[dict[str, Any]] = []
    for (operation, index), runs in starts.items():
        runs.sort(key=lambda event: event[2])
        for earlier, later in itertools.pairwise(runs):
            end = ended(earlier[1])
            if end is None or end[1] > later[2] or end[0] == "completed":
                twice.append(
                    {
                        "operation": operation,
                        "job_index": index,
                        "first": earlier[1],
                        "then": later[1],
                        "first_end": end[0] if end else "running",
                    }
                )
    running_at_kill = [
        job_id
        for job_id, job_events in by_job.items()
        if any(kind == "start" and at < killed for kind, _, at, _, _ in job_events)
        and (ended(job_id) is None or ended(job_id)[1] >= killed)  # type: ignore[index]
    ]
    aborted_after = sum(1 for job_id in running_at_kill if (end := ended(job_id)) and end[0] == "aborted")
    return {
        "jobs_started": sum(len(runs) for runs in starts.values()),
        "jobs_run_twice": len(twice),
        "examples": twice[:5],
        "revival": {"running_at_kill": len(running_at_kill), "aborted_after_kill": aborted_after},
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    offered = args.nodes / args.period
    with tempfile.TemporaryDirectory(prefix="pooltree-live-restart-") as tmp:
        data, port = Path(tmp), free_port()
        extra = ("--port", str(port))
        scheduler = Scheduler(data, args.period, extra=extra, shards=args.shards)
        context = mp.get_context("spawn")
        end = context.Value("d", float("inf"))
        queue: Any = context.Queue()
        drivers: list[Any] = []
        restarted: Scheduler | None = None
        try:
            start_node_drivers(context, scheduler, args, end, queue, drivers, log_jobs=True)
            time.sleep(2 * args.period + 1.0)  # every node registered by its first heartbeats
            _start_operations(scheduler.url, scheduler.token, args.operations, args.jobs)
            time.sleep(args.warmup_seconds)
            began, cpu_before = time.time(), scheduler.cpu_seconds()
            time.sleep(args.seconds)
            before = (began, time.time(), scheduler.cpu_seconds() - cpu_before)
            killed = time.time()
            scheduler.process.send_signal(signal.SIGKILL)
            scheduler.process.wait(30)
            scheduler.close()
            restarted = Scheduler(data, args.period, extra=extra, shards=args.shards)
            listening = time.time() - killed
            cpu_marks = [(time.time(), restarted.cpu_seconds())]
            while time.time() < killed + args.after_seconds:
                time.sleep(min(1.0, killed + args.after_seconds - time.time()))
                cpu_marks.append((time.time(), restarted.cpu_seconds()))
            finish = time.time()
            end.value = finish
            results = [queue.get(timeout=REQUEST_TIMEOUT + 60) for _ in drivers]
        finally:
            end.value = min(end.value, time.time())
            join_processes(drivers, REQUEST_TIMEOUT + 30)
            if restarted is not None:
                restarted.close()
            scheduler.close()
    records = [r for result in results for r in result[0]]
    drivers_records = [(result[0], result[1]) for result in results]  # `_phase`'s (records, CPU samples)
    events = [e for result in results for e in result[2]]
    last = [(t, c) for t, c in cpu_marks if t >= finish - args.seconds]
    after_cpu = last[-1][1] - last[0][1] if len(last) >= 2 else 0.0
    after_window = (last[0][0] if last else finish - args.seconds, finish)
    return {
        "bench": "live_restart",
        "parameters": vars(args),
        "machine": machine(),
        "listening_s": round(listening, 2),
        **recovery(records, killed, finish, offered),
        "before": _phase("before", drivers_records, before[:2], before[2], args),
        "after": _phase("after", drivers_records, after_window, after_cpu, args),
        "restarted_cpu_seconds_first_10s": round(
            next((c for t, c in cpu_marks if t >= killed + listening + 10), cpu_marks[-1][1])
            - cpu_marks[0][1],
            2,
        ),
        **jobs_run_twice(events, killed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--drivers", type=int, default=3)
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup-seconds", type=float, default=15.0)
    parser.add_argument("--after-seconds", type=float, default=30.0)
    parser.add_argument("--shards", type=int, default=1, help="--node-shards of the scheduler (1: none)")
    add_driver_arguments(parser, job_seconds=10.0)
    args = parser.parse_args()
    if args.after_seconds <= args.seconds:
        parser.error(
            "--after-seconds must exceed --seconds (the last --seconds of it are the 'after' window)"
        )
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
