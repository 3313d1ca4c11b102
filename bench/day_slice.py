"""Checkpoint the simulated day mid-run and measure or profile a slice of it; prints one JSON object.

The 10,000-node day (``bench/simulate.py --nodes 10000 --hours 24 --operations 20000 --pools 1000``) takes ~80
minutes, and its costly hours (10,000-12,000 running operations) come after the first half hour. This tool runs
the day's exact workload (the scenario of ``bench/simulate.py``, same arguments and defaults as that day) up to
simulated hour H, pickles the whole `Simulation` there, and later loads it to run M simulated minutes of the
real day at that load, timed or under cProfile, in a minute or two instead of an hour.

Usage:

    # run the day to 6 h and 12 h (one process), writing a checkpoint at each (with their git revision)
    .venv/bin/python bench/day_slice.py checkpoint --at-hours 6,12 --out /tmp/day-h{hours}.pkl
    # continue an existing checkpoint to 16 h
    .venv/bin/python bench/day_slice.py checkpoint --from /tmp/day-h12.pkl --at-hours 16 --out /tmp/day-h{hours}.pkl
    # 10 simulated minutes from the checkpoint: wall/CPU, the per-period update split, arrival/departure periods
    .venv/bin/python bench/day_slice.py slice --checkpoint /tmp/day-h12.pkl --minutes 10
    # the same under cProfile (timers off), pstats written, top functions in the JSON
    .venv/bin/python bench/day_slice.py slice --checkpoint /tmp/day-h12.pkl --minutes 10 --profile /tmp/h12.pstats
    # no checkpoint that loads on this code: run the day to 4 h in the process first (minutes of CPU), then slice
    .venv/bin/python bench/day_slice.py slice --run-to-hours 4 --minutes 5
    # write an older checkpoint again with the tolerant state setter (run on a revision it loads on)
    .venv/bin/python bench/day_slice.py resave --checkpoint old.pkl --out new.pkl

The stop is exact and deterministic: the engine's progress callback (called at the first event at or after each
simulated minute) raises once the target time is reached, so the run loop leaves between two events with the
state consistent; the end-of-run sampling and the result are never built. A loaded checkpoint continues exactly
as the uninterrupted run would (the same events and summary: checked on a small day, see `--verify`).

What cannot be pickled as is: `SchedulingTree.respecced` holds a ``weakref.ref`` (a hint for `publish`). The
bench module ``day_checkpoint`` registers a ``copyreg`` reducer for weak references (only there, never in the
core): a live reference is rebuilt to the same unpickled object, a dead one as a dead reference; the hint's
meaning is unchanged. Other scripts load a checkpoint with ``import day_checkpoint`` (bench/ on sys.path), then
``pickle.load``.

Pickles hold the classes' instances by attribute: a checkpoint made on one revision may not load (or may not run)
on code whose classes gained or renamed attributes. Each checkpoint records the git revision it was made on
(``meta.revision``; printed by ``slice``). Checkpoints are written with a tolerant state setter: attributes the
loading code's classes no longer have are dropped (listed in ``dropped_attributes``); attributes they gained are
missing, and code reading them fails: rebuild the checkpoint then, or use ``--run-to-hours``.

``slice`` timing (without ``--profile``) reads the phase timers of the core and the simulator
(`pooltree.phases.PhaseTimes`, given with `Simulation.time_phases`): the core's fair-share step ``update`` and its
parts ``unregister`` (completed operations), ``input`` (the fair-share input), ``fair_share`` (the pure update),
``build`` (the strategy's tree), ``publish`` (the strategy's publish); ``sim_period`` is the rest of the
simulator's own period work (its ``period`` phase minus the core's update: time limits, pending publication,
recording, sampling, timeline). Periods are split into those in which an operation was registered
or unregistered since the previous update (``with_op_changes``) and the others. The clock is process CPU time
by default (``--clock wall`` for wall time): on a shared machine wall time counts other processes' turns.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pickle
import pstats
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import day_checkpoint
from simulate import ProgressLines, _rss_mib, scenario_document

from pooltree.phases import PhaseTimes
from pooltree.sim import Simulation, parse_scenario

FORMAT = 1
"""Version of this tool's checkpoint layout (``{"meta": ..., "simulation": Simulation}``)."""


# the pickling helpers live in their own module so that checkpoints name them ``day_checkpoint.X`` (importable by
# any script that puts bench/ on sys.path); checkpoints written before name them ``__main__.X``: aliases below
_dead_ref = day_checkpoint._dead_ref
_tolerant_setstate = day_checkpoint._tolerant_setstate
DROPPED = day_checkpoint.DROPPED


class _Stop(Exception):
    """Raised by the progress callback to leave the run loop between two events."""


class _StopAt:
    """The engine's progress callback: stops the loop at the first event at or after ``at`` (simulated s)."""

    def __init__(self, at: float, lines: ProgressLines | None = None) -> None:
        self.at = at
        self.lines = lines

    def __call__(self, now: float, horizon: float, finished: int, total: int) -> None:
        if self.lines is not None:
            self.lines(now, horizon, finished, total)
        if now >= self.at:
            raise _Stop


def run_until(simulation: Simulation, at: float, lines: ProgressLines | None = None) -> bool:
    """Run ``simulation`` until the first event at or after ``at``; whether it stopped there (else it ended)."""
    simulation.progress = _StopAt(at, lines)
    simulation.progress_interval = 60.0
    try:
        simulation.run()
    except _Stop:
        return True
    finally:
        simulation.progress = None
        simulation.progress_interval = None
    return False


def git_revision() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        revision = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return revision + ("+dirty" if dirty else "")


def save(simulation: Simulation, meta: dict[str, Any], path: str) -> dict[str, Any]:
    start = time.perf_counter()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 200_000))
    temporary = path + ".tmp"
    with open(temporary, "wb") as out:
        day_checkpoint.Pickler(out, protocol=5).dump(
            {"format": FORMAT, "meta": meta, "simulation": simulation}
        )
    os.replace(temporary, path)
    return {"path": path, "bytes": os.path.getsize(path), "save_s": round(time.perf_counter() - start, 1)}


def load(path: str) -> tuple[Simulation, dict[str, Any], float]:
    """The checkpoint's simulation and meta; the collector is off while loading, then the survivors frozen."""
    start = time.perf_counter()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 200_000))
    gc.disable()
    try:
        with open(path, "rb") as source:
            data = pickle.load(source)
    finally:
        gc.enable()
    if data.get("format") != FORMAT:
        raise SystemExit(f"{path}: checkpoint format {data.get('format')!r}, this tool reads {FORMAT}")
    # what the long run has at this point: everything alive was frozen by the run loop's gc policy
    gc.collect()
    gc.freeze()
    return data["simulation"], data["meta"], time.perf_counter() - start


def _scenario_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--operations", type=int, default=20_000)
    parser.add_argument("--jobs", type=int, default=None, help="default: 25 jobs per operation")
    parser.add_argument("--pools", type=int, default=1_000)
    parser.add_argument("--fair-share-period", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)


def _build(args: argparse.Namespace) -> tuple[Simulation, dict[str, Any]]:
    jobs = args.jobs or args.operations * 25
    document = scenario_document(
        args.nodes, args.hours, args.operations, jobs, args.pools, args.fair_share_period, args.seed
    )
    scenario = parse_scenario(document, source="bench")
    parameters = {
        "nodes": args.nodes,
        "hours": args.hours,
        "operations": args.operations,
        "jobs": jobs,
        "pools": args.pools,
        "fair_share_period": args.fair_share_period,
        "seed": args.seed,
    }
    return Simulation(scenario), parameters


def _running(simulation: Simulation) -> dict[str, int]:
    running = sum(1 for op in simulation.ops if op.state == "running")
    pending = sum(1 for op in simulation.ops if op.state == "pending")
    return {"running_ops": running, "pending_ops": pending, "running_jobs": len(simulation.jobs)}


def checkpoint(args: argparse.Namespace) -> dict[str, Any]:
    marks = sorted(float(hours) for hours in args.at_hours.split(","))
    started = time.perf_counter()
    cpu_started = time.process_time()
    if args.from_checkpoint:
        simulation, meta, load_s = load(args.from_checkpoint)
        parameters = meta["parameters"]
        history = [*meta.get("history", []), {"revision": meta["revision"], "until_h": meta["simulated_h"]}]
    else:
        simulation, parameters = _build(args)
        history, load_s = [], 0.0
    lines = ProgressLines(args.progress_minutes) if args.progress else None
    if lines is not None:
        lines.simulation = simulation
        lines.last_simulated = lines.next_mark = simulation.now
    written = []
    revision = git_revision()
    for hours in marks:
        if not run_until(simulation, hours * 3600.0, lines):
            print(f"the run ended at {simulation.now / 3600:.3f} h before {hours} h", file=sys.stderr)
            break
        meta = {
            "parameters": parameters,
            "revision": revision,
            "history": history,
            "simulated_h": simulation.now / 3600.0,
            "made_wall_s": round(time.perf_counter() - started, 1),
            "made_cpu_s": round(time.process_time() - cpu_started, 1),
            **_running(simulation),
            "rss_mib": round(_rss_mib()),
        }
        path = args.out.format(hours=f"{hours:g}")
        saved = save(simulation, meta, path)
        print(f"checkpoint {path}: {json.dumps(meta | saved)}", file=sys.stderr, flush=True)
        written.append(meta | saved)
    return {"name": "day_slice checkpoint", "load_s": round(load_s, 1), "checkpoints": written}


# ---------------------------------------------------------------------- timing a slice


class _PeriodTimes(PhaseTimes):
    """The core's and the simulator's phase timers (`pooltree.phases`) closed into one record per fair-share
    period: the seconds of each phase that ran in it, the period's own, and the operations registered or
    unregistered since the previous period ended (``op_changes``)."""

    PARTS = ("unregister", "input", "fair_share", "build", "publish")
    """Parts of the core's update (inside its ``update`` phase)."""

    def __init__(self, clock: Callable[[], float], simulation: Simulation) -> None:
        super().__init__(clock)
        self.simulation = simulation
        self.current: dict[str, float] = {}
        self.periods: list[dict[str, Any]] = []
        self.changes_before = 0

    def changes(self) -> int:
        return self.counts.get("register_operation", 0) + self.counts.get("unregister_operation", 0)

    def add(self, name: str, seconds: float) -> None:
        super().add(name, seconds)
        if name == "heartbeat":
            return
        if name != "period":
            self.current[name] = self.current.get(name, 0.0) + seconds
            return
        changes = self.changes()
        record = self.current | {"period": seconds, "op_changes": changes - self.changes_before}
        self.periods.append(record | {"now": self.simulation.now})
        self.current = {}
        self.changes_before = changes


class _SplitProfiler(PhaseTimes):
    """cProfile of each fair-share period alone, merged into two buckets: periods with operation arrivals or
    departures since the previous update and the others (``--profile-periods``)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock)
        self.stats: dict[str, pstats.Stats] = {}
        self.periods = {"with_op_changes": 0, "without_op_changes": 0}
        self.changes_before = 0

    def phase(self, name: str) -> AbstractContextManager[None]:
        return self._profiled() if name == "period" else super().phase(name)

    @contextmanager
    def _profiled(self) -> Iterator[None]:
        profiler = cProfile.Profile(self.clock)  # type: ignore[arg-type]
        profiler.enable()
        try:
            yield
        finally:
            profiler.disable()
            changes = self.counts.get("register_operation", 0) + self.counts.get("unregister_operation", 0)
            key = "with_op_changes" if changes != self.changes_before else "without_op_changes"
            self.changes_before = changes
            self.periods[key] += 1
            if key in self.stats:
                self.stats[key].add(profiler)
            else:
                self.stats[key] = pstats.Stats(profiler, stream=io.StringIO())


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    ordered = sorted(values)
    return {
        "count": len(values),
        "mean_ms": round(1000 * statistics.fmean(values), 2),
        "median_ms": round(1000 * statistics.median(values), 2),
        "p90_ms": round(1000 * ordered[int(0.9 * (len(ordered) - 1))], 2),
        "total_s": round(sum(values), 3),
    }


def _period_report(periods: list[dict[str, Any]]) -> dict[str, Any]:
    def split(selected: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"periods": len(selected)}
        if not selected:
            return out
        out["period"] = _summary([p["period"] for p in selected])
        out["update"] = _summary([p.get("update", 0.0) for p in selected])
        for part in _PeriodTimes.PARTS:
            out[part + "_mean_ms"] = round(1000 * statistics.fmean(p.get(part, 0.0) for p in selected), 2)
        out["sim_period_mean_ms"] = round(
            1000 * statistics.fmean(p["period"] - p.get("update", 0.0) for p in selected), 2
        )
        out["op_changes_per_period"] = round(statistics.fmean(p["op_changes"] for p in selected), 2)
        return out

    updated = [p for p in periods if "update" in p]
    by_minute: dict[int, list[float]] = {}
    if updated:
        first = updated[0]["now"]
        for p in updated:
            by_minute.setdefault(int((p["now"] - first) // 60), []).append(p["period"])
    republished = [p["republish"] for p in periods if "republish" in p and "update" not in p]
    return {
        "all": split(updated),
        "with_op_changes": split([p for p in updated if p["op_changes"]]),
        "without_op_changes": split([p for p in updated if not p["op_changes"]]),
        "republished": _summary(republished),
        "periods_without_core_update": len(periods) - len(updated),
        # drift along the slice (a freshly loaded heap is compact in memory: watch the first minutes)
        "period_mean_ms_by_minute": [
            round(1000 * statistics.fmean(v), 2) for _m, v in sorted(by_minute.items())
        ],
    }


def _top(stats: pstats.Stats, key: str, count: int, periods: int) -> list[dict[str, Any]]:
    rows = []
    entries = stats.stats  # type: ignore[attr-defined]
    for function, (_cc, ncalls, tottime, cumtime, _callers) in sorted(
        entries.items(), key=lambda item: item[1][2 if key == "tottime" else 3], reverse=True
    )[:count]:
        filename, line, name = function
        rows.append(
            {
                "function": f"{_short(filename)}:{line}:{name}",
                "ncalls": ncalls,
                "calls_per_period": round(ncalls / max(1, periods), 1),
                "tottime_s": round(tottime, 3),
                "cumtime_s": round(cumtime, 3),
            }
        )
    return rows


def _short(filename: str) -> str:
    marker = "pooltree/"
    index = filename.rfind(marker)
    if index >= 0:
        return filename[index:]
    return filename if len(filename) < 60 else "..." + filename[-57:]


def slice_run(args: argparse.Namespace) -> dict[str, Any]:
    if args.checkpoint is not None:
        simulation, meta, load_s = load(args.checkpoint)
    else:
        # no checkpoint (e.g. the code changed the state's classes): run the day to the hour in this process
        started = time.perf_counter()
        simulation, parameters = _build(args)
        run_until(simulation, args.run_to_hours * 3600.0)
        meta = {"parameters": parameters, "revision": git_revision()}
        load_s = time.perf_counter() - started
        gc.collect()
        gc.freeze()
    warmup_start = time.process_time()
    if args.warmup_minutes > 0:
        # unmeasured: caches a checkpoint from another revision lacks are rebuilt in its first period
        run_until(simulation, simulation.now + args.warmup_minutes * 60.0)
    warmup_cpu = time.process_time() - warmup_start
    start_time = simulation.now
    until = start_time + args.minutes * 60.0
    stats_before = dict(simulation.stats)
    state_before = _running(simulation)
    out: dict[str, Any] = {
        "name": "day_slice slice",
        "checkpoint": args.checkpoint,
        "checkpoint_revision": meta["revision"],
        "revision": git_revision(),
        "parameters": meta["parameters"],
        "from_h": round(start_time / 3600.0, 4),
        "minutes": args.minutes,
        "warmup_minutes": args.warmup_minutes,
        "warmup_cpu_s": round(warmup_cpu, 2),
        "load_s": round(load_s, 1),
        "dropped_attributes": sorted(DROPPED),
        "at_start": state_before,
        "clock": args.clock,
        "load_average_before": os.getloadavg(),
    }
    # on a shared machine wall time counts other processes' turns: the split and profile use CPU time by default
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    split = _SplitProfiler(clock) if args.profile and args.profile_periods else None
    profiler = cProfile.Profile(clock) if args.profile and split is None else None
    timers = _PeriodTimes(clock, simulation)
    simulation.time_phases(split if split is not None else PhaseTimes() if profiler is not None else timers)
    try:
        wall_start = time.perf_counter()
        cpu_start = time.process_time()
        if profiler is not None:
            profiler.enable()
        stopped = run_until(simulation, until)
        if profiler is not None:
            profiler.disable()
        wall = time.perf_counter() - wall_start
        cpu = time.process_time() - cpu_start
    finally:
        simulation.time_phases(PhaseTimes())
    simulated = simulation.now - start_time
    stats_after = dict(simulation.stats)
    delta = {
        key: stats_after.get(key, 0) - stats_before.get(key, 0)
        for key in sorted(set(stats_after) | set(stats_before))
        if key != "events"
    }
    periods = delta.get("fair_share_updates", 0) + delta.get("fair_share_republished", 0)
    out |= {
        "stopped_at_target": stopped,
        "simulated_s": round(simulated, 3),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "speedup": round(simulated / wall, 2) if wall > 0 else None,
        "speedup_cpu": round(simulated / cpu, 2) if cpu > 0 else None,
        "engine_counts": delta,
        "at_end": _running(simulation),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "load_average_after": os.getloadavg(),
    }
    if split is not None:
        out["profile_periods"] = {}
        for key, stats in split.stats.items():
            stats.dump_stats(f"{args.profile}.{key}")
            count = split.periods[key]
            out["profile_periods"][key] = {
                "periods": count,
                "pstats": f"{args.profile}.{key}",
                "cpu_ms_per_period" if args.clock == "cpu" else "wall_ms_per_period": round(
                    1000 * stats.total_tt / max(1, count),
                    2,  # type: ignore[attr-defined]
                ),
                "top_tottime": _top(stats, "tottime", args.top, count),
                "top_cumtime": _top(stats, "cumtime", args.top, count),
            }
    elif profiler is None:
        out["periods"] = _period_report(timers.periods)
        # on the split's clock: the heartbeats the core processed, the fair-share periods, everything else
        total = cpu if args.clock == "cpu" else wall
        out["heartbeats_s"] = round(timers.seconds.get("heartbeat", 0.0), 3)
        out["fair_share_periods_s"] = round(sum(p["period"] for p in timers.periods), 3)
        out["rest_s"] = round(total - out["heartbeats_s"] - out["fair_share_periods_s"], 3)
    else:
        profiler.dump_stats(args.profile)
        stats = pstats.Stats(profiler, stream=io.StringIO())
        out["profile"] = args.profile

        out["top_tottime"] = _top(stats, "tottime", args.top, periods)
        out["top_cumtime"] = _top(stats, "cumtime", args.top, periods)
    return out


def verify(args: argparse.Namespace) -> dict[str, Any]:
    """A small day: checkpoint at half-time, load, finish; the summary must equal the uninterrupted run's."""
    args.nodes, args.hours, args.operations, args.pools = 200, 1.0, 400, 50
    half = args.hours * 1800.0

    def finish(simulation: Simulation) -> str:
        result = simulation.run()
        summary = result.summary
        summary["global"].pop("wall_time", None)
        summary["engine"].pop("events", None)  # counted per call of run(): the resumed run calls it twice
        return json.dumps(summary, sort_keys=True, default=str)

    whole, _ = _build(args)
    reference = finish(whole)
    interrupted, _ = _build(args)
    run_until(interrupted, half)
    path = args.out
    save(interrupted, {"parameters": {}, "revision": git_revision(), "simulated_h": half / 3600}, path)
    resumed, _meta, _load_s = load(path)
    os.unlink(path)
    return {
        "name": "day_slice verify",
        "identical": finish(resumed) == reference,
        "summary_chars": len(reference),
    }


def resave(args: argparse.Namespace) -> dict[str, Any]:
    """Load a checkpoint (on the revision it loads on) and write it again with the tolerant state setter."""
    simulation, meta, load_s = load(args.checkpoint)
    meta = meta | {"resaved_on": git_revision()}
    return {"name": "day_slice resave", "load_s": round(load_s, 1), **save(simulation, meta, args.out)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("checkpoint", help="run the day to the given hours, pickling it at each")
    _scenario_args(made)
    made.add_argument("--at-hours", required=True, help="comma-separated simulated hours, e.g. 6,12")
    made.add_argument(
        "--out", required=True, help="path; {hours} is replaced by the mark, e.g. day-h{hours}.pkl"
    )
    made.add_argument("--from", dest="from_checkpoint", default=None, help="continue this checkpoint")
    made.add_argument("--progress", action="store_true", help="bench/simulate.py's progress lines on stderr")
    made.add_argument("--progress-minutes", type=float, default=15.0)
    sliced = commands.add_parser("slice", help="load a checkpoint and run --minutes of simulated time")
    source = sliced.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="a checkpoint made by this tool")
    source.add_argument(
        "--run-to-hours",
        type=float,
        help="no checkpoint: run the day (the scenario arguments below) to this hour first, then the slice",
    )
    _scenario_args(sliced)
    sliced.add_argument("--minutes", type=float, default=10.0)
    sliced.add_argument(
        "--warmup-minutes",
        type=float,
        default=0.0,
        help="simulated minutes run first, unmeasured (a checkpoint made on another revision may rebuild caches "
        "in its first period: e.g. 1)",
    )
    sliced.add_argument("--profile", default=None, help="run under cProfile and write pstats here")
    sliced.add_argument(
        "--profile-periods",
        action="store_true",
        help="with --profile: profile only the fair-share periods, in two buckets (with and without operation "
        "arrivals or departures), written to PROFILE.with_op_changes and PROFILE.without_op_changes",
    )
    sliced.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="the timer of the per-period split and of cProfile (default: process CPU time; wall counts other "
        "processes' turns on a shared machine)",
    )
    sliced.add_argument("--top", type=int, default=30, help="functions listed by tottime and cumtime")
    checked = commands.add_parser("verify", help="a small day resumed from a checkpoint equals the whole run")
    _scenario_args(checked)
    checked.add_argument("--out", default="/tmp/day_slice_verify.pkl")
    again = commands.add_parser("resave", help="write a checkpoint again with the tolerant state setter")
    again.add_argument("--checkpoint", required=True)
    again.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.command == "resave":
        output = resave(args)
    elif args.command == "checkpoint":
        output = checkpoint(args)
    elif args.command == "slice":
        output = slice_run(args)
    else:
        output = verify(args)
    print(json.dumps(output, indent=1))


if __name__ == "__main__":
    main()
