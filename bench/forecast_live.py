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

Rounds alternate the ``--modes`` (``off``, ``on``, ``base``: on, in the ``--base`` tree's code) ``--rounds`` times
each; reported per mode: medians over its rounds of heartbeat p50 / p99, API p50 / p99 (client-side, send to
answer), answered heartbeats/s, the scheduler process's own CPU share and its forecast worker's (children), the
refreshes made in the window (distinct ``computed_at`` the reader saw) and the worker's CPU seconds per refresh.
Per round also: the code it ran, the scheduler's garbage collections in the window (``/metrics``), the refresh
phases' mean wall milliseconds in the window (``phase_metrics``: ``pooltree_forecast_refresh_phase_seconds`` of
``/metrics``; none in code older than that metric), and the heartbeats by the refresh phase they overlapped
(``attribution``: the copy's holds of the lock, the pickling, the worker's run, the unpickling, none; from the
``forecast phases:`` lines of the scheduler's log, logged at DEBUG: the bench sets ``POOLTREE_DEBUG_LOGGERS``;
older code logged them at INFO).

    flock -w 1800 /work/bench.lock .venv/bin/python bench/forecast_live.py --nodes 300 --rounds 3 --modes off,base,on
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
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

from pooltree.cli.processes import DEBUG_LOGGERS

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


PHASES = ("copy", "pickle", "worker", "unpickle")


def _phases(log: str) -> dict[str, list[tuple[float, float]]]:
    """The refreshes' phases from the scheduler's log (``forecast phases:`` lines, wall-clock intervals)."""
    found: dict[str, list[tuple[float, float]]] = {name: [] for name in PHASES}
    for line in log.splitlines():
        if "forecast phases:" not in line:
            continue
        for word in line.split("forecast phases:", 1)[1].split():
            name, _, value = word.partition("=")
            if name in PHASES:
                for interval in value.split(","):
                    begin, _, end = interval.partition("-")
                    found[name].append((float(begin), float(end)))
    return found


def _attribution(
    drivers: list[Any], window: tuple[float, float], phases: dict[str, list[tuple[float, float]]]
) -> dict[str, Any]:
    """Heartbeats sent in the window, by the refresh phase their [sent, answered] overlaps (the first in
    ``PHASES`` order; ``none``: no phase): count, p50 and p99 per class, and the p99 of the window without each."""
    begin, finish = window
    beats = [
        (sent, got)
        for records, _ in drivers
        for sent, got, status, _ in records
        if begin <= sent < finish and status == 200
    ]

    def overlapping(sent: float, got: float) -> str:
        for name in PHASES:
            if any(sent < end and got > start for start, end in phases[name]):
                return name
        return "none"

    classes: dict[str, list[float]] = {}
    for sent, got in beats:
        classes.setdefault(overlapping(sent, got), []).append(got - sent)
    return {
        "by_phase": {
            name: {
                "count": len(values),
                "p50_ms": quantile_ms(values, 0.5),
                "p99_ms": quantile_ms(values, 0.99),
            }
            for name, values in sorted(classes.items())
        },
        "p99_ms_without": {
            name: quantile_ms([v for other, values in classes.items() if other != name for v in values], 0.99)
            for name in classes
            if name != "none"
        },
        "phase_ms": {
            name: [round(1000 * (end - start), 1) for start, end in intervals]
            for name, intervals in phases.items()
        },
    }


def _metrics_text(scheduler: Scheduler) -> str:
    """The scheduler's ``/metrics`` ("" : no answer in time)."""
    request = urllib.request.Request(
        scheduler.url + "/metrics", headers={"Authorization": f"OAuth {scheduler.token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _phase_sums(text: str) -> dict[str, tuple[float, float]]:
    """Refresh phase → (seconds, refreshes) so far, from ``pooltree_forecast_refresh_phase_seconds``."""
    found: dict[str, list[float]] = {}
    for line in text.splitlines():
        for suffix, column in (("_sum{", 0), ("_count{", 1)):
            if line.startswith("pooltree_forecast_refresh_phase_seconds" + suffix):
                phase = line.split('phase="', 1)[1].split('"', 1)[0]
                found.setdefault(phase, [0.0, 0.0])[column] = float(line.rsplit(" ", 1)[1])
    return {phase: (values[0], values[1]) for phase, values in found.items()}


def _phase_metrics(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, Any]:
    """Per phase, the refreshes in the window and their mean wall milliseconds."""
    found: dict[str, Any] = {}
    for phase, (seconds, count) in sorted(after.items()):
        was_seconds, was_count = before.get(phase, (0.0, 0.0))
        refreshes = count - was_count
        found[phase] = {
            "refreshes": int(refreshes),
            "mean_ms": round(1000 * (seconds - was_seconds) / refreshes, 1) if refreshes else None,
        }
    return found


def _gc_pauses(text: str) -> dict[str, float]:
    """The scheduler's garbage collections so far (its ``/metrics`` ``text``): per generation the count and
    seconds, and the longest pause."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        for prefix, name in (
            ("pooltree_gc_pause_seconds_count{", "count"),
            ("pooltree_gc_pause_seconds_sum{", "seconds"),
            ("pooltree_gc_pause_max_seconds{", "max_seconds"),
        ):
            if line.startswith(prefix):
                generation = line.split('generation="', 1)[1].split('"', 1)[0]
                found[f"gen{generation}_{name}"] = float(line.rsplit(" ", 1)[1])
    return found


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


def _scheduler(data: Path, args: argparse.Namespace, mode: str) -> tuple[Scheduler, str]:
    """The scheduler of a round: forecasts off (``off``), on (``on``), or on in the ``--base`` tree's code
    (``base``: its ``pooltree`` first on the scheduler's PYTHONPATH, e.g. a worktree of the session's start); and
    where its ``pooltree`` was imported from. It starts in ``data`` (``-m`` puts the working directory first on
    the path: a bench run from a source tree would run that tree's code in every mode)."""
    budget = 0.0 if mode == "off" else args.budget
    before, directory = os.environ.get("PYTHONPATH"), os.getcwd()
    if mode == "base":
        os.environ["PYTHONPATH"] = str(Path(args.base).resolve())
    os.environ[DEBUG_LOGGERS] = "pooltree.forecast"  # the ``forecast phases:`` lines (`_phases`)
    os.chdir(data)
    try:
        code = subprocess.run(
            [sys.executable, "-c", "import pooltree; print(pooltree.__file__)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return Scheduler(data, args.period, ("--forecast-budget", str(budget))), code
    finally:
        os.chdir(directory)
        os.environ.pop(DEBUG_LOGGERS, None)
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def run_round(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pooltree-forecast-live-") as tmp:
        scheduler, code = _scheduler(Path(tmp), args, mode)
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
            metrics_before = _metrics_text(scheduler)
            time.sleep(args.seconds)
            finish = time.time()
            metrics_after = _metrics_text(scheduler)
            gc_before, gc_after = _gc_pauses(metrics_before), _gc_pauses(metrics_after)
            total, worker = scheduler.cpu_seconds() - total_before, _worker_cpu(scheduler) - worker_before
            end.value = finish
            results = [queue.get(timeout=120) for _ in range(min(args.drivers, args.nodes))]
            calls, seen = reader_queue.get(timeout=120)
            heartbeats = _phase(mode, results, (begin, finish), total - worker, args)
            log = (Path(tmp) / "scheduler.log").read_text(errors="replace")
            attribution = _attribution(results, (begin, finish), _phases(log))
            window = [(sent, got) for sent, got, _ in calls if begin <= sent < finish]
            latencies = [got - sent for sent, got in window]
            refreshes = max(len(seen) - 1, 0)  # the first was made before the window
            return {
                "mode": mode,
                "code": code,
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
                    for line in log.splitlines()
                    if "pooltree.forecast" in line and "forecast phases:" not in line
                ][-args.log_lines :],
                "attribution": attribution,
                "phase_metrics": _phase_metrics(_phase_sums(metrics_before), _phase_sums(metrics_after)),
                "gc_in_window": {
                    key: round(value - gc_before.get(key, 0.0), 4) if "max" not in key else round(value, 4)
                    for key, value in gc_after.items()
                },
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
    parser.add_argument(
        "--modes",
        default="off,on",
        help="modes of each round, in order: off, on, base (on, in --base's code)",
    )
    parser.add_argument("--base", default="/work/wt/s22base", help="the tree whose code mode base runs")
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
