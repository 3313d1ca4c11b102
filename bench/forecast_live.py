"""Heartbeat and API latency of a real scheduler with and without forecast refreshes; prints one JSON object.

Each round starts ``pooltree scheduler`` (``bench/live_nodes.py``'s: a real process, SQLite store) with
``--forecast-budget 0`` (mode ``off``: no forecast is ever made) or ``--forecast-budget B`` (mode ``on``),
simulated exec nodes heartbeating over the real wire format (``live_nodes``' drivers), ``--operations`` vanilla
operations of ``--jobs`` jobs (``--queued`` more of them wait in a pool at its running-operation limit), and
one API reader process that calls ``get_operation`` (rotating over the operations) and ``list_operations``
through ``yt.wrapper`` at ``--api-rate`` calls per second. In mode ``on`` every ``get_operation`` keeps the
forecast refreshing (a refresh every 30 fair-share periods while forecasts are read, the first at once), so
refreshes run throughout the window: the copy of the cluster under the scheduler's lock and the simulation in
the worker process at nice +10.

Rounds alternate off / on ``--rounds`` times each; reported per mode: medians over its rounds of heartbeat p50 /
p99, API p50 / p99 (client-side, send to answer), answered heartbeats/s, the scheduler process's own CPU share
and its forecast worker's (children), the refreshes made in the window (distinct ``computed_at`` the reader saw)
and the worker's CPU seconds per refresh.

    flock -w 1800 /work/bench.lock .venv/bin/python bench/forecast_live.py --nodes 300 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_common import (
    join_processes,
    machine,
    process_cpu_seconds,
    quantile_ms,
    uptime,
    yt_client,
)
from live_nodes import (
    POOL,
    START_TIMEOUT,
    Scheduler,
    _phase,
    _start_operations,
    add_driver_arguments,
    start_node_drivers,
)

QUEUE_POOL = "queued"


def _reader(url: str, token: str, ids: list[str], rate: float, end: Any, out: Any) -> None:
    """API reader process: get_operation / list_operations alternately at ``rate`` per second until ``end``;
    sends back (sent, answered, kind) per call and the forecasts' ``computed_at`` values it saw."""
    client = yt_client(url, token)
    records: list[tuple[float, float, str]] = []
    seen: set[str] = set()
    out.put("ready")
    index = 0
    slot = time.time()
    while slot < end.value:
        time.sleep(max(0.0, slot - time.time()))
        sent = time.time()
        if index % 2 == 0:
            found = client.get_operation(ids[(index // 2) % len(ids)])
            forecast = found.get("scheduling_forecast") or {}
            if forecast.get("computed_at"):
                seen.add(str(forecast["computed_at"]))
            kind = "get_operation"
        else:
            client.list_operations(limit=100)
            kind = "list_operations"
        records.append((sent, time.time(), kind))
        index += 1
        slot += 1.0 / rate
        while slot < time.time():
            slot += 1.0 / rate
    out.put((records, sorted(seen)))


def _worker_cpu(scheduler: Scheduler) -> float:
    """CPU seconds of the scheduler's child processes (its forecast worker): all of it minus its own process's."""
    own = process_cpu_seconds(scheduler.process.pid)
    return scheduler.cpu_seconds() - (own or 0.0)


def _queue_operations(url: str, token: str, count: int, jobs: int) -> list[str]:
    """``count`` operations in pool ``queued`` (one runs at a time: the rest wait in its queue)."""
    from yt.wrapper.driver import make_formatted_request

    client = yt_client(url, token)
    client.create(
        "scheduler_pool",
        attributes={"name": QUEUE_POOL, "pool_tree": "default", "max_running_operation_count": 1},
    )
    spec = {"pool": QUEUE_POOL, "tasks": {"main": {"command": "true", "job_count": jobs, "cpu_limit": 1}}}
    return [
        make_formatted_request(
            "start_operation", {"operation_type": "vanilla", "spec": spec}, format=None, client=client
        )["operation_id"]
        for _ in range(count)
    ]


def run_round(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    budget = args.budget if mode == "on" else 0.0
    with tempfile.TemporaryDirectory(prefix="pooltree-forecast-live-") as tmp:
        scheduler = Scheduler(Path(tmp), args.period, ("--forecast-budget", str(budget)))
        context = mp.get_context("spawn")
        end = context.Value("d", float("inf"))
        queue: Any = context.Queue()
        reader_queue: Any = context.Queue()
        processes: list[Any] = []
        try:
            start_node_drivers(context, scheduler, args, end, queue, processes)
            time.sleep(2 * args.period + 1.0)
            _start_operations(scheduler.url, scheduler.token, args.operations, args.jobs)
            client = yt_client(scheduler.url, scheduler.token)
            ids = [op["id"] for op in client.list_operations(limit=100, pool=POOL)["operations"]]
            ids += _queue_operations(scheduler.url, scheduler.token, args.queued, args.jobs)
            reader = context.Process(
                target=_reader,
                args=(scheduler.url, scheduler.token, ids, args.api_rate, end, reader_queue),
            )
            processes.append(reader)
            reader.start()
            if reader_queue.get(timeout=START_TIMEOUT) != "ready":
                raise RuntimeError("the reader did not start")
            time.sleep(args.warmup_seconds)
            begin, total_before, worker_before = time.time(), scheduler.cpu_seconds(), _worker_cpu(scheduler)
            load_before = uptime()
            time.sleep(args.seconds)
            finish = time.time()
            total, worker = scheduler.cpu_seconds() - total_before, _worker_cpu(scheduler) - worker_before
            end.value = finish
            results = [queue.get(timeout=120) for _ in range(min(args.drivers, args.nodes))]
            calls, seen = reader_queue.get(timeout=120)
            heartbeats = _phase(mode, results, (begin, finish), total - worker, args)
            window = [(sent, got) for sent, got, _ in calls if begin <= sent < finish]
            latencies = [got - sent for sent, got in window]
            refreshes = max(len(seen) - 1, 0)  # the first was made before the window
            return {
                "mode": mode,
                "heartbeat_p50_ms": heartbeats["heartbeat_p50_ms"],
                "heartbeat_p99_ms": heartbeats["heartbeat_p99_ms"],
                "answered_heartbeats_per_second": heartbeats["answered_heartbeats_per_second"],
                "heartbeat_errors": heartbeats["errors"],
                "allocations_started_per_second": heartbeats["allocations_started_per_second"],
                "api_p50_ms": quantile_ms(latencies, 0.5),
                "api_p99_ms": quantile_ms(latencies, 0.99),
                "api_calls": len(window),
                "scheduler_cpu_share": round((total - worker) / (finish - begin), 3),
                "worker_cpu_share": round(worker / (finish - begin), 3),
                "forecasts_seen": len(seen),
                "worker_cpu_seconds_per_refresh": round(worker / refreshes, 2) if refreshes else None,
                "scheduler_log": [
                    line.strip()
                    for line in (Path(tmp) / "scheduler.log").read_text(errors="replace").splitlines()
                    if "pooltree.forecast" in line
                ][-args.log_lines :],
                "load_before": load_before,
                "load_after": uptime(),
            }
        finally:
            end.value = min(end.value, time.time())
            join_processes(processes, 60)
            scheduler.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--drivers", type=int, default=2)
    parser.add_argument("--operations", type=int, default=100)
    parser.add_argument("--queued", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=100)
    add_driver_arguments(parser, job_seconds=30.0)
    parser.add_argument("--api-rate", type=float, default=20.0)
    parser.add_argument("--budget", type=float, default=5.0, help="--forecast-budget of mode on")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--warmup-seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--log-lines", type=int, default=5, help="forecast lines of the scheduler's log kept")
    parser.add_argument("--modes", default="off,on", help="modes of each round, in order")
    args = parser.parse_args()
    rounds = []
    for _ in range(args.rounds):
        for mode in args.modes.split(","):
            rounds.append(run_round(args, mode))
    summary = {}
    for mode in args.modes.split(","):
        mine = [r for r in rounds if r["mode"] == mode]
        summary[mode] = {
            key: statistics.median([r[key] for r in mine if r[key] is not None])
            if any(r[key] is not None for r in mine)
            else None
            for key in mine[0]
            if isinstance(mine[0][key], int | float) or mine[0][key] is None
        }
    print(
        json.dumps(
            {"parameters": vars(args), "machine": machine(), "medians": summary, "rounds": rounds}, indent=1
        )
    )


if __name__ == "__main__":
    main()
