"""Fit a live scheduler's CPU to issue 25's model, CPU = a x heartbeats + b x started allocations; prints one JSON.

Issue 25 states the scheduler's cost as so much CPU per heartbeat plus so much per allocation it starts (its
"today" figures, ~1.5 and ~0.9 ms, came from runs of different sizes). ``live_nodes.py`` reports a marginal cost
per start, (loaded CPU - the quiet heartbeat's cost x loaded heartbeats) / starts, which charges to the starts
everything a busy heartbeat costs beyond an empty one: the running jobs it reports (a full 16-cpu node reports
12-16 each heartbeat, each confirmed against the node's jobs), a scheduling pass on a full node of a tree of
running operations, the fair-share update and the read snapshot of a loaded tree. Those are paid per heartbeat
(or per period) whether allocations start or not.

This bench separates the two parts by running the same cluster (``live_nodes.run_once``: the same nodes, period,
operations, scheduler) with jobs of different lengths (``--lengths``, 10 and 30 s): the nodes are full in each run,
so a heartbeat reports as many running jobs, while starts per heartbeat fall with the length. Per round (the
lengths interleaved, so each sees the same machine), a least-squares line through the loaded phases' points
(starts per heartbeat, scheduler CPU ms per heartbeat): its intercept ``a_ms_per_heartbeat`` is what a busy
heartbeat costs without a start, its slope ``b_ms_per_start`` what a start adds (the start, the finish that
follows it, their job rows and acknowledgements). Reported: each run's point, each round's fit, the medians, and
beside them the quiet heartbeat's cost and ``live_nodes``' marginal per start of each run, for comparison.

The line's intercept is not a heartbeat without turnover: the cost is concave in the turnover (a start costs more
where fewer heartbeats carry one: the group commit's transaction, the wait for it and the wake-up it brings are
shared by fewer starts), so a third run is made with jobs that outlast it (``--busy-seconds`` of warm-up fill
every node, then nothing starts or finishes): ``busy_ms_per_heartbeat``, a full node's heartbeat reporting its
running jobs and starting nothing; and per length ``ms_per_start_over_busy``, (CPU ms per heartbeat - the busy
one's) / starts per heartbeat, each start's whole cost at that turnover (``--busy-seconds 0``: no such run).

A length's warm-up is ``--warmup-jobs`` times the length (the first jobs, started together, must have turned over
before the window: they last up to 1 + ``--job-jitter`` times it); the operations must hold enough jobs for the
first fill and the turnover of the warm-up and the window (checked: ``--jobs``). Every other option is
``live_nodes.py``'s (one ``--shards`` setting).

Usage: .venv/bin/python bench/start_cost_fit.py --nodes 1000 --period 1 --jobs 400 [--lengths 10,30]
       [--warmup-jobs 2] [--busy-seconds 10] [--seconds 10] [--quiet-seconds 3] [--repeat 3] [--threads]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_common import machine
from live_nodes import build_parser, check_arguments, run_once

BUSY_LENGTH_RUNS = 100
"""The busy run's jobs last this many times its warm-up and window: none finishes in it."""


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """The least-squares line y = a + b x through ``points`` as (a, b); None when the x do not differ."""
    count = len(points)
    if count < 2:
        return None
    mean_x = sum(x for x, _ in points) / count
    mean_y = sum(y for _, y in points) / count
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread <= 0:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
    return mean_y - slope * mean_x, slope


def jobs_needed(args: argparse.Namespace, length: float, warmup: float) -> float:
    """Jobs a run of jobs of ``length`` seconds starts: the first fill of every slot, then a slot's turnover
    every ``length`` on average through the warm-up and the window."""
    slots = args.nodes * args.node_cpu
    return slots * (1 + (warmup + args.seconds) / length)


def point(length: float, run: dict[str, Any]) -> dict[str, Any]:
    """A run's loaded point and what beside it is worth reading."""
    quiet, loaded = run["phases"][0], run["phases"][-1]
    answered, started = loaded["answered"], loaded["started"]
    return {
        "job_seconds": length,
        "starts_per_heartbeat": round(started / answered, 4) if answered else None,
        "cpu_ms_per_heartbeat": loaded["scheduler_cpu_ms_per_heartbeat"],
        "quiet_cpu_ms_per_heartbeat": quiet["scheduler_cpu_ms_per_heartbeat"]
        if quiet is not loaded
        else None,
        "marginal_ms_per_started_allocation": loaded.get("marginal_ms_per_started_allocation"),
        "answered_heartbeats_per_second": loaded["answered_heartbeats_per_second"],
        "offered_heartbeats_per_second": loaded["offered_heartbeats_per_second"],
        "errors": loaded["errors"],
        "heartbeat_p50_ms": loaded["heartbeat_p50_ms"],
        "heartbeat_p99_ms": loaded["heartbeat_p99_ms"],
        "allocations_started_per_second": loaded["allocations_started_per_second"],
        "scheduler_cpu_share": loaded["scheduler_cpu_share"],
        "driver_cpu_share": loaded["driver_cpu_share"],
        "thread_cpu_seconds": loaded.get("thread_cpu_seconds"),
    }


def fit_round(points: list[dict[str, Any]], busy: dict[str, Any] | None) -> dict[str, Any]:
    """A round's figures: the line through its turnover runs' points, the busy heartbeat (its run's CPU per
    heartbeat; None without one) and each length's start cost over it."""
    line = fit_line(
        [(p["starts_per_heartbeat"], p["cpu_ms_per_heartbeat"]) for p in points if p["cpu_ms_per_heartbeat"]]
    )
    busy_ms = None if busy is None else busy["cpu_ms_per_heartbeat"]
    return {
        "points": points,
        "busy": busy,
        "a_ms_per_heartbeat": None if line is None else round(line[0], 4),
        "b_ms_per_start": None if line is None else round(line[1], 4),
        "busy_ms_per_heartbeat": busy_ms,
        "ms_per_start_over_busy": [
            round((p["cpu_ms_per_heartbeat"] - busy_ms) / p["starts_per_heartbeat"], 4)
            if busy_ms is not None and p["cpu_ms_per_heartbeat"] and p["starts_per_heartbeat"]
            else None
            for p in points
        ],
    }


def _median(values: list[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return round(statistics.median(present), 4) if present else None


def _by_length(rounds: list[dict[str, Any]], lengths: list[float], key: str) -> dict[str, float | None]:
    """Each length's median over the rounds of its runs' ``key``."""
    return {str(length): _median([r["points"][i][key] for r in rounds]) for i, length in enumerate(lengths)}


def main() -> None:
    parser = build_parser()
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument("--lengths", default="10,30", help="job lengths in seconds, at least two, e.g. 10,30")
    parser.add_argument(
        "--busy-seconds",
        type=float,
        default=10.0,
        help="warm-up of the run whose jobs outlast it (every node full, nothing turning over); 0: no such run",
    )
    parser.add_argument(
        "--warmup-jobs",
        type=float,
        default=2.0,
        help="each length's warm-up, in job lengths (--warmup-seconds is not read)",
    )
    args = parser.parse_args()
    shards = check_arguments(parser, args)
    try:
        lengths = [float(part) for part in args.lengths.split(",")]
    except ValueError:
        parser.error(f"--lengths must be seconds separated by commas, got {args.lengths!r}")
    if len(set(lengths)) < 2 or min(lengths) <= 0:
        parser.error(f"--lengths must be at least two different positive lengths, got {args.lengths!r}")
    if args.warmup_jobs < 1 + args.job_jitter:
        parser.error(
            f"--warmup-jobs must be at least 1 + --job-jitter ({1 + args.job_jitter}): the first jobs turn over"
        )
    if len(shards) != 1:
        parser.error("--shards must be one setting here (the fit compares job lengths, not shard counts)")
    for length in lengths:
        needed = jobs_needed(args, length, args.warmup_jobs * length)
        if args.operations * args.jobs < 1.1 * needed:
            parser.error(
                f"--jobs: {args.operations} operations of {args.jobs} jobs run out before the window ends for jobs "
                f"of {length:g} s (about {needed:,.0f} start); give at least {int(1.1 * needed / args.operations) + 1}"
            )
    args.shards_now = shards[0]
    before = machine()
    busy_length = BUSY_LENGTH_RUNS * (args.busy_seconds + args.seconds)
    rounds: list[dict[str, Any]] = []
    for _ in range(args.repeat):  # the runs interleaved in each round: the same machine load for each
        points = []
        for length in lengths:
            args.job_seconds, args.warmup_seconds = length, args.warmup_jobs * length
            points.append(point(length, run_once(args)))
        busy = None
        if args.busy_seconds > 0:
            args.job_seconds, args.warmup_seconds = busy_length, args.busy_seconds
            busy = point(busy_length, run_once(args))
        rounds.append(fit_round(points, busy))
    quiet = [p["quiet_cpu_ms_per_heartbeat"] for r in rounds for p in r["points"]]
    if rounds and rounds[0]["busy"] is not None:
        quiet += [r["busy"]["quiet_cpu_ms_per_heartbeat"] for r in rounds]
    result = {
        "bench": "start_cost_fit",
        "parameters": {
            key: value
            for key, value in vars(args).items()
            if key not in ("job_seconds", "warmup_seconds", "shards_now")
        },
        "median": {
            "a_ms_per_heartbeat": _median([r["a_ms_per_heartbeat"] for r in rounds]),
            "b_ms_per_start": _median([r["b_ms_per_start"] for r in rounds]),
            "busy_ms_per_heartbeat": _median([r["busy_ms_per_heartbeat"] for r in rounds]),
            "quiet_cpu_ms_per_heartbeat": _median(quiet),
            "ms_per_start_over_busy": {
                str(length): _median([r["ms_per_start_over_busy"][i] for r in rounds])
                for i, length in enumerate(lengths)
            },
            "starts_per_heartbeat": _by_length(rounds, lengths, "starts_per_heartbeat"),
            "heartbeat_p99_ms": _by_length(rounds, lengths, "heartbeat_p99_ms"),
            "marginal_ms_per_started_allocation": _by_length(
                rounds, lengths, "marginal_ms_per_started_allocation"
            ),
        },
        "rounds": rounds,
        "machine_before": before,
        "machine_after": machine(),
        "pid": os.getpid(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
