"""Back-test and cost of the forecast (pooltree/forecast); prints one JSON object.

``backtest``: replay a recorded run. The workload runs in the simulator (the "cluster"); at every ``--every``
simulated seconds its state is taken the way the live service takes it (`pooltree.forecast.replay.state_of`:
running jobs with nodes and start times, completed run times, starvation clocks; not the workload's duration
distributions, not future submissions), and forecast. Each operation that had been submitted but had not
started at that moment is one sample: its actual first job start (from the same run) against the forecast's
p10 / p50 / p90, where "after the horizon" is later than any time on both sides (the recording goes on one
horizon past the last moment, so an operation that had not started by then started after the horizon). The
headline figures count the samples that started within the horizon; ``inside_p10_p90_with_those`` adds those
that started after it (inside when the range reaches past the horizon); ``..._forecast_within_horizon`` counts
the samples whose forecast p50 was within the horizon, wherever their actual start fell (chosen by what was
known when forecasting: choosing by the outcome, as the headline does, keeps a long wait's early starts and
drops its late ones, and leans towards "below p10", even for a perfect forecast: see bench/RESULTS.md, seventh
round); ``..._range_within_horizon`` counts the samples whose forecast p90 was within the horizon, every outcome
scored (a start after the horizon is above p90): chosen by the forecast, and nothing left to guess. Reported: samples, median and p90 of
|p50 - actual|, the share of actual starts inside the published [p10, p90] (which reaches out by the fork's timing resolution, one heartbeat plus one update period:
the forecast and the cluster beat at different phases), inside the seeds' own p10-p90 without that margin,
and inside it widened by one more period, how many were forecast after the horizon, and the CPU seconds per
forecast (each run stops once the operations waiting at that moment have started).

    .venv/bin/python bench/forecast_backtest.py backtest --workload project-root --every 5
    .venv/bin/python bench/forecast_backtest.py backtest --workload day --nodes 1000 --hours 1 --every 600

``--oracle`` forecasts the same moments with the workload's true run-time distributions instead of the learned
ones: what the forecast scores when its duration model is perfect, and so which part of a miss is the
duration model's and which is the rest (the runs, the hand-over, the ranges, and the counting itself).

``--ideal N`` (``day`` with ``--pool-running-limit``) scores beside it, with the same counting, the ideal forecast
of every sample (`bench/forecast_ideal.py`: N draws of the workload's true run times, each pool a queue under
its running-operation limit): what a perfect forecast scores on that recorded day, so which part of a miss is
the counting and the day's own draw. ``--samples PATH`` writes one JSON line per sample (moment, operation,
pool, place in its pool's queue, seconds it had waited, actual start, the forecast's range and verdict, where
its run times came from; the ideal range with ``--ideal``), and the summary breaks the verdicts down by place in
the queue and by how long the operation then still waited (``breakdown``; the ideal's beside it). A breakdown
by the outcome (how long it still waited) leans even for a perfect forecast: its "< 300 s" row holds the early
starts and misses below p10 by its choice; read it against the ideal's. ``--ideal-only`` scores the ideal
alone (no forecast: a recorded day's reference in the recording's time).

``cost``: one forecast of a synthetic state (``--nodes`` nodes of 16 cpu, ``--running`` running operations
filling them, ``--pending`` operations queued behind the pools' running-operation limits), timed in CPU seconds
(the state copy is not included: it is taken on the scheduler's side, see ``pooltree.forecast.live``).

    .venv/bin/python bench/forecast_backtest.py cost --nodes 1000 --running 200 --pending 2000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from forecast_ideal import ideal_range, ideal_starts  # noqa: E402

from pooltree.config import load_document  # noqa: E402
from pooltree.config.pool_trees import parse_pool_trees  # noqa: E402
from pooltree.forecast import (  # noqa: E402
    ClusterState,
    ForecastSettings,
    NodeState,
    OperationState,
    RunningJob,
    TaskState,
    forecast,
)
from pooltree.forecast.arrivals import ArrivalSettings  # noqa: E402
from pooltree.forecast.durations import DurationFit  # noqa: E402
from pooltree.forecast.replay import SimulationRecorder, state_of  # noqa: E402
from pooltree.forecast.state import Submission, SubmittedTask  # noqa: E402
from pooltree.resources import vector  # noqa: E402
from pooltree.sim import Simulation  # noqa: E402
from pooltree.sim.scenario import parse_scenario  # noqa: E402


def _load() -> float:
    return os.getloadavg()[0]


def _workload(args: argparse.Namespace) -> Any:
    if args.workload == "project-root":
        path = ROOT / "examples" / "sim-project-root.yaml"
        return parse_scenario(load_document(path), base_dir=path.parent, source=str(path))
    from simulate import scenario_document

    document = scenario_document(
        args.nodes, args.hours, args.operations, args.jobs, args.pools, args.period, args.seed
    )
    if args.pool_running_limit is not None:  # operations queue in their pools: waits of minutes to forecast
        for pool in document["pool_trees"]["physical"]["pools"].values():
            pool["max_running_operation_count"] = args.pool_running_limit
    if args.squeeze != 1.0:  # fewer nodes for the same work: the cluster saturates and operations queue
        group = document["cluster"]["nodes"][0]
        group["count"] = max(1, round(group["count"] * args.squeeze))
    return parse_scenario(document, source="day")


def _record(args: argparse.Namespace, scenario: Any) -> tuple[list[ClusterState], SimulationRecorder, float]:
    """The workload run in the simulator, its states taken every ``--every`` seconds; the CPU seconds it took."""
    until = args.until if args.until is not None else scenario.horizon()
    recorder = SimulationRecorder()
    states: list[ClusterState] = []
    record_cpu = time.process_time()
    # the recording goes on for one horizon past the last forecast moment: a sample is an operation waiting at a
    # moment, and its actual start must be seen whenever it comes within the horizon (a recording that ended at
    # the last moment would keep only the late forecasts' early starts: a bias towards "before p10")
    simulation = Simulation(
        scenario,
        until=until + (args.horizon if args.drain else 0.0),
        event_sink=recorder,
        progress=lambda *_: (
            states.append(state_of(simulation, recorder)) if args.start <= simulation.now <= until else None
        ),
        progress_interval=args.every,
    )
    recorder.simulation = simulation
    simulation.run()
    return states, recorder, time.process_time() - record_cpu


class _Scores:
    """Every forecast's samples scored against what then happened (see the module docstring)."""

    def __init__(self, horizon: float, period: float, drain: bool) -> None:
        self.horizon = horizon
        self.period = period
        self.drain = drain
        self.tally = _Tally()
        self.later = _Tally()
        """Samples whose actual start came after the horizon ("after the horizon" is then right)."""
        self.dated = _Tally()
        """Samples chosen by what the forecast said (its p50 within the horizon), every actual start counted:
        choosing by the outcome (started within the horizon) keeps the early starts of long waits and drops
        their late ones."""
        self.ranged = _Tally()
        """Samples whose whole forecast range lay within the horizon (p90 known), every actual start counted (one
        after the horizon is above p90): chosen by what the forecast said, and every outcome can be scored
        without a guess. The headline's choice by the outcome (started within the horizon) drops the late
        starts of long waits and so leans towards "below p10" even for a perfect forecast."""
        self.costs: list[float] = []
        self.runs: list[int] = []
        """Runs summed up per forecast (more than --seeds when --max-seeds lets the budget pay them)."""
        self.reaches: list[float] = []
        self.waits: list[float] = []
        self.per_forecast: list[dict[str, Any]] = []

    def score(
        self, state: ClusterState, found: Any, waiting: list[str], first_start: dict[str, float]
    ) -> dict[str, str]:
        """Each sample's verdict (``inside``, ``below``, ``above``; ``after_horizon``: it started after it)."""
        verdicts: dict[str, str] = {}
        moment = {"at": state.now, "samples": 0, "inside": 0, "below": 0, "above": 0, "after_horizon": 0}
        self.per_forecast.append(moment)
        for operation_id in waiting:
            actual = first_start.get(operation_id)
            start = found.operations[operation_id].start
            if actual is None and not self.drain:
                continue  # the recording ended before it started: no truth to compare with
            late = actual is None or actual - state.now > self.horizon
            if start["p50"] is not None:
                self.dated.add(math.inf if late else actual, start, found.resolution, self.period)
            if start["p90"] is not None:
                self.ranged.add(math.inf if late else actual, start, found.resolution, self.period)
            if late:
                # it started after the horizon (the recording covers one horizon past every moment)
                self.later.add(math.inf, start, found.resolution, self.period)
                moment["after_horizon"] += 1
                verdicts[operation_id] = "after_horizon"
                continue
            assert actual is not None
            self.waits.append(actual - state.now)
            verdict = self.tally.add(actual, start, found.resolution, self.period)
            moment["samples"] += 1
            moment[verdict] += 1
            verdicts[operation_id] = verdict
        return verdicts


def backtest(args: argparse.Namespace) -> dict[str, Any]:
    scenario = _workload(args)
    states, recorder, record_cpu = _record(args, scenario)
    # the forecast's seeds are kept apart from the recorded run's: the simulator derives heartbeat phases from
    # the seed, and a fork with the recorded run's own seed would beat exactly when the "cluster" did
    settings = ForecastSettings(
        seeds=args.seeds,
        horizon=args.horizon,
        fair_share_update_period=args.forecast_period,
        first_seed=scenario.seed + 1000,
        cpu_budget=args.cpu_budget,
        arrivals=ArrivalSettings(enabled=args.arrival_window > 0, window=max(args.arrival_window, 60.0)),
        max_seeds=args.max_seeds,
    )
    period = args.forecast_period or scenario.scheduler.fair_share_update_period
    scores = _Scores(args.horizon, period, args.drain)
    truth = _true_run_times(scenario) if args.oracle else None
    ideal = _Ideal(args, scenario, period) if args.ideal else None
    breakdown = _Breakdown()
    ideal_breakdown = _Breakdown()
    samples = open(args.samples, "w") if args.samples else None  # noqa: SIM115 (closed below)
    for state in states[: args.max_forecasts]:
        waiting = [op.id for op in state.operations if op.first_job_time is None]
        if not waiting:
            continue
        known = None
        if truth is not None:
            known = {
                (op.id, task.name): truth[(op.id, task.name)] for op in state.operations for task in op.tasks
            }
        if ideal is not None and args.ideal_only:
            resolution = (args.forecast_period or state.fair_share_update_period) + state.heartbeat_period
            ideal.score(state, resolution, waiting, recorder.first_start)
            continue
        started = time.process_time()
        oracle = {} if known is None else {"fits": known}  # (a forecast before `fits` runs without it)
        found = forecast(state, settings, only=waiting, starts_only=True, **oracle)
        scores.costs.append(time.process_time() - started)
        scores.runs.append(found.seeds)
        scores.reaches.append(found.horizon if found.simulated is None else found.simulated)
        verdicts = scores.score(state, found, waiting, recorder.first_start)
        ideal_verdicts: dict[str, str] = {}
        if ideal is not None:
            ideal_verdicts = ideal.score(state, found.resolution, waiting, recorder.first_start)
        places = _queue_places(state)
        for operation_id, verdict in verdicts.items():
            actual = recorder.first_start.get(operation_id)
            wait = None if actual is None else actual - state.now
            breakdown.add(places[operation_id], wait, verdict)
            if operation_id in ideal_verdicts:
                ideal_breakdown.add(places[operation_id], wait, ideal_verdicts[operation_id])
        if samples is not None:
            _write_samples(
                samples, state, found, verdicts, ideal, ideal_verdicts, places, recorder.first_start
            )
    if samples is not None:
        samples.close()
    result = _summary(args, scores, record_cpu)
    result["breakdown"] = breakdown.summary()
    if ideal is not None:
        result["ideal"] = ideal.summary()
        if not args.ideal_only:
            result["ideal"]["breakdown"] = ideal_breakdown.summary()
    return result


def _queue_places(state: ClusterState) -> dict[str, int]:
    """Operation id → how many operations of its pool that had not started were registered before it."""
    found: dict[str, int] = {}
    ahead: dict[tuple[str, str], int] = {}
    for op in state.operations:
        if op.first_job_time is None:
            key = (op.tree, op.pool)
            found[op.id] = ahead.get(key, 0)
            ahead[key] = found[op.id] + 1
    return found


class _Breakdown:
    """Verdicts by place in the pool's queue and by how long the operation then still waited."""

    WAITS = (60.0, 300.0, 900.0, 1800.0, math.inf)

    def __init__(self) -> None:
        self.by_place: dict[str, dict[str, int]] = {}
        self.by_wait: dict[str, dict[str, int]] = {}

    def add(self, place: int, wait: float | None, verdict: str) -> None:
        if verdict == "after_horizon":
            return
        assert wait is not None
        place_key = str(place) if place < 5 else "5+"
        wait_key = next(f"<{bound:g}s" for bound in self.WAITS if wait < bound)
        for table, key in ((self.by_place, place_key), (self.by_wait, wait_key)):
            counts = table.setdefault(key, {"samples": 0, "inside": 0, "below": 0, "above": 0})
            counts["samples"] += 1
            counts[verdict] += 1

    def summary(self) -> dict[str, Any]:
        def shares(table: dict[str, dict[str, int]]) -> dict[str, Any]:
            return {
                key: {
                    "samples": counts["samples"],
                    **{v: _share(counts[v], counts["samples"]) for v in ("inside", "below", "above")},
                }
                for key, counts in table.items()
            }

        return {
            "by_queue_place": shares(dict(sorted(self.by_place.items()))),
            "by_wait_until_start": shares(
                dict(sorted(self.by_wait.items(), key=lambda item: float(item[0][1:-1])))
            ),
        }


class _Ideal:
    """``--ideal``: every sample's ideal range (`forecast_ideal`), scored as the forecast is."""

    def __init__(self, args: argparse.Namespace, scenario: Any, period: float) -> None:
        if args.workload != "day" or args.pool_running_limit is None:
            raise SystemExit("--ideal: the day workload with --pool-running-limit (its only queue model)")
        self.truth = {(op.id, task.name): task.duration for op in scenario.operations for task in op.tasks}
        self.limit = args.pool_running_limit
        self.draws = args.ideal
        self.horizon = args.horizon
        self.seed = scenario.seed + 2000
        self.scores = _Scores(args.horizon, period, args.drain)
        self.ranges: dict[str, dict[str, float | None]] = {}

    def score(
        self, state: ClusterState, resolution: float, waiting: list[str], first_start: dict[str, float]
    ) -> dict[str, str]:
        starts = ideal_starts(state, self.truth, self.limit, self.draws, self.seed + round(state.now))
        self.ranges = {
            operation_id: ideal_range(starts[operation_id], state.now, resolution, self.horizon)
            for operation_id in waiting
        }
        found = _IdealRanges({key: _IdealRange(value) for key, value in self.ranges.items()}, resolution)
        return self.scores.score(state, found, waiting, first_start)

    def summary(self) -> dict[str, Any]:
        tally, ranged = self.scores.tally, self.scores.ranged
        everything = tally.samples + self.scores.later.samples
        return {
            "draws": self.draws,
            "samples": tally.samples,
            "inside_p10_p90": _share(tally.inside, tally.samples),
            "below_p10": _share(tally.below, tally.samples),
            "above_p90": _share(tally.above, tally.samples),
            "start_abs_error_median_s": _round(statistics.median(tally.errors)) if tally.errors else None,
            "inside_p10_p90_with_those": _share(tally.inside + self.scores.later.inside, everything),
            "samples_range_within_horizon": ranged.samples,
            "inside_p10_p90_range_within_horizon": _share(ranged.inside, ranged.samples),
            "below_p10_range_within_horizon": _share(ranged.below, ranged.samples),
            "above_p90_range_within_horizon": _share(ranged.above, ranged.samples),
        }


class _IdealRange(NamedTuple):
    start: dict[str, float | None]


class _IdealRanges(NamedTuple):
    operations: dict[str, _IdealRange]
    resolution: float


def _write_samples(
    out: Any,
    state: ClusterState,
    found: Any,
    verdicts: dict[str, str],
    ideal: _Ideal | None,
    ideal_verdicts: dict[str, str],
    places: dict[str, int],
    first_start: dict[str, float],
) -> None:
    """``--samples``: one JSON line per sample (see the module docstring)."""
    ops = {op.id: op for op in state.operations}
    for operation_id, verdict in verdicts.items():
        op = ops[operation_id]
        forecast_of = found.operations[operation_id]
        line = {
            "at": state.now,
            "operation": operation_id,
            "pool": op.pool,
            "queue_place": places[operation_id],
            "waited": state.now - op.start_time,
            "actual_start": first_start.get(operation_id),
            "start": forecast_of.start,
            "verdict": verdict,
            "sources": sorted({task["source"] for task in forecast_of.durations.values()}),
        }
        if ideal is not None:
            line["ideal_start"] = ideal.ranges.get(operation_id)
            line["ideal_verdict"] = ideal_verdicts.get(operation_id)
        out.write(json.dumps(line) + "\n")


def _true_run_times(scenario: Any) -> dict[tuple[str, str], DurationFit]:
    """``--oracle``: (operation id, task) → the workload's own run-time distribution, known exactly (no doubt of
    the median): what the same forecast scores when its duration model is perfect, the rest as it is (the fork,
    the runs, the hand-over, the ranges). Lognormal and fixed run times only (what a `DurationFit` states)."""
    found = {}
    for op in scenario.operations:
        for task in op.tasks:
            distribution = task.duration
            if distribution is None or distribution.kind not in ("lognormal", "fixed"):
                raise SystemExit(f"--oracle: {op.id}/{task.name} has no lognormal or fixed run time")
            sigma = distribution.b if distribution.kind == "lognormal" else 0.0
            found[(op.id, task.name)] = DurationFit(distribution.a, sigma, 1, "operation", 0.0)
    return found


def _summary(args: argparse.Namespace, scores: _Scores, record_cpu: float) -> dict[str, Any]:
    """The back-test's JSON: the figures over every sample, and each forecast's own counts."""
    tally, later, dated = scores.tally, scores.later, scores.dated
    costs, reaches, waits, per_forecast = scores.costs, scores.reaches, scores.waits, scores.per_forecast
    errors = tally.errors
    finite = sorted(errors)
    samples = tally.samples
    everything = tally.samples + later.samples
    return {
        "workload": args.workload,
        "parameters": {
            key: getattr(args, key)
            for key in (
                "every",
                "start",
                "seeds",
                "max_seeds",
                "horizon",
                "forecast_period",
                "cpu_budget",
                "nodes",
                "hours",
                "operations",
                "jobs",
                "pools",
                "until",
                "squeeze",
                "pool_running_limit",
                "drain",
                "arrival_window",
                "oracle",
                "ideal",
                "ideal_only",
                "seed",
            )
        },
        "forecasts": len(costs),
        "samples": samples,
        "start_abs_error_median_s": _round(statistics.median(finite)) if finite else None,
        "start_abs_error_p90_s": _round(finite[int(0.9 * (len(finite) - 1))]) if finite else None,
        "inside_p10_p90": _round(tally.inside / samples) if samples else None,
        "below_p10": _round(tally.below / samples) if samples else None,
        "above_p90": _round(tally.above / samples) if samples else None,
        "start_error_signed_median_s": _round(statistics.median(tally.signed)) if tally.signed else None,
        "inside_p10_p90_widened_by_one_period": _round(tally.widened / samples) if samples else None,
        "inside_seed_p10_p90_without_resolution_margin": _round(tally.raw / samples) if samples else None,
        "forecast_after_horizon": tally.after,
        "samples_started_after_horizon": later.samples,
        "inside_p10_p90_with_those": _round((tally.inside + later.inside) / everything)
        if everything
        else None,
        "above_p90_of_those": _round(later.above / later.samples) if later.samples else None,
        "samples_forecast_within_horizon": dated.samples,
        "inside_p10_p90_forecast_within_horizon": _round(dated.inside / dated.samples)
        if dated.samples
        else None,
        "below_p10_forecast_within_horizon": _round(dated.below / dated.samples) if dated.samples else None,
        "samples_range_within_horizon": scores.ranged.samples,
        "inside_p10_p90_range_within_horizon": _share(scores.ranged.inside, scores.ranged.samples),
        "below_p10_range_within_horizon": _share(scores.ranged.below, scores.ranged.samples),
        "above_p90_range_within_horizon": _share(scores.ranged.above, scores.ranged.samples),
        "start_abs_error_median_s_range_within_horizon": _round(statistics.median(scores.ranged.errors))
        if scores.ranged.errors
        else None,
        "wait_until_start_median_s": _round(statistics.median(waits)) if waits else None,
        "wait_until_start_p90_s": _round(sorted(waits)[int(0.9 * (len(waits) - 1))]) if waits else None,
        "simulated_horizon_median_s": _round(statistics.median(reaches)) if reaches else None,
        "forecast_cpu_seconds_median": _round(statistics.median(costs)) if costs else None,
        "forecast_cpu_seconds_max": _round(max(costs)) if costs else None,
        "runs_per_forecast_min_median_max": [
            min(scores.runs),
            statistics.median(scores.runs),
            max(scores.runs),
        ]
        if scores.runs
        else None,
        "record_cpu_seconds": _round(record_cpu),
        "per_forecast": per_forecast,
        "load_average": _round(_load()),
    }


class _Tally:
    """Samples compared with their forecast ranges (times after the horizon are +inf on both sides)."""

    def __init__(self) -> None:
        self.samples = self.inside = self.below = self.above = self.widened = self.raw = self.after = 0
        self.errors: list[float] = []
        self.signed: list[float] = []

    def add(self, actual: float, start: dict[str, float | None], resolution: float, period: float) -> str:
        low, mid, high = (math.inf if start[key] is None else start[key] for key in ("p10", "p50", "p90"))
        assert low is not None and mid is not None and high is not None
        self.samples += 1
        if math.isinf(mid):
            self.after += 1
        if math.isfinite(actual):
            self.errors.append(abs(mid - actual))
            if math.isfinite(mid):
                self.signed.append(actual - mid)
        self.widened += low - period <= actual <= high + period
        self.raw += low + resolution <= actual <= high - resolution
        if actual < low:
            self.below += 1
            return "below"
        if actual > high:
            self.above += 1
            return "above"
        self.inside += 1
        return "inside"


def _share(part: int, whole: int) -> float | None:
    return _round(part / whole) if whole else None


def _round(value: float) -> float:
    return round(value, 3) if math.isfinite(value) else value


def _cost_trees(running: int, pools: int) -> Any:
    """One tree of ``pools`` pools (weights 1-3), each running ``running / pools`` operations at most."""
    return parse_pool_trees(
        {
            "physical": {
                "config": {
                    "fair_share_starvation_timeout": "30s",
                    "max_running_operation_count": running + pools,
                    "max_operation_count": 100_000,
                },
                "pools": {
                    f"pool-{i:03d}": {
                        "weight": 1 + i % 3,
                        "max_running_operation_count": max(1, running // pools),
                        "max_operation_count": 10_000,
                    }
                    for i in range(pools)
                },
            }
        }
    )


def cost_state(
    nodes: int, running: int, pending: int, pools: int, seed: int, submitted_per_hour: int = 0
) -> ClusterState:
    """A full cluster: ``running`` operations fill every node's 16 slots, ``pending`` wait behind limits;
    ``submitted_per_hour`` operations like the pending ones were submitted over the last hour (what the arrival
    model draws future submissions from)."""
    rng = random.Random(seed)
    trees = _cost_trees(running, pools)
    job = vector(user_slots=1, cpu=1, memory=4 << 30)
    node_states = tuple(
        NodeState(f"node-{i:04d}", vector(user_slots=16, cpu=16, memory=64 << 30)) for i in range(nodes)
    )
    slots = [(node.address, k) for node in node_states for k in range(16)]
    per_op = len(slots) // running
    now = 10_000.0
    operations = []
    for index in range(running):
        placed = slots[index * per_op : (index + 1) * per_op]
        median = rng.uniform(120, 1800)
        durations = tuple(median * math.exp(0.5 * rng.gauss(0, 1)) for _ in range(20))
        jobs = tuple(RunningJob(address, now - rng.uniform(0, median)) for address, _ in placed)
        operations.append(
            OperationState(
                f"run-{index:04d}",
                f"user-{index % 37}",
                "vanilla",
                {"pool": f"pool-{index % pools:03d}"},
                "physical",
                f"pool-{index % pools:03d}",
                now - 3600,
                (TaskState("main", job, per_op * rng.randint(1, 4), jobs, 20, durations=durations),),
                first_job_time=now - 3600,
            )
        )
    for index in range(pending):
        operations.append(
            OperationState(
                f"wait-{index:05d}",
                f"user-{index % 37}",
                "vanilla",
                {"pool": f"pool-{index % pools:03d}"},
                "physical",
                f"pool-{index % pools:03d}",
                now - 60,
                (TaskState("main", job, rng.randint(1, 64)),),
                state="pending",
            )
        )
    history = tuple(
        Submission(
            now - 3600.0 + 3600.0 * i / max(submitted_per_hour, 1),
            "physical",
            f"pool-{i % pools:03d}",
            f"user-{i % 37}",
            "vanilla",
            (SubmittedTask("main", job, rng.randint(1, 64)),),
        )
        for i in range(submitted_per_hour)
    )
    pool_durations = {f"pool-{i:03d}": operations[i % running].tasks[0].durations for i in range(pools)}
    return ClusterState(
        now,
        trees,
        "physical",
        node_states,
        tuple(operations),
        pool_durations=pool_durations if submitted_per_hour else {},
        submissions=history,
        submissions_since=now - 3600.0 if submitted_per_hour else None,
    )


def cost(args: argparse.Namespace) -> dict[str, Any]:
    state = cost_state(args.nodes, args.running, args.pending, args.pools, args.seed, args.submitted_per_hour)
    settings = ForecastSettings(
        seeds=args.seeds,
        horizon=args.horizon,
        fair_share_update_period=args.forecast_period,
        cpu_budget=args.cpu_budget,
        max_seeds=args.max_seeds,
    )
    runs = []
    covered = []
    seeds = []
    found = None
    for _ in range(args.repeat):
        started = time.process_time()
        found = forecast(state, settings)
        runs.append(time.process_time() - started)
        covered.append(round(found.horizon, 1))
        seeds.append(found.seeds)
    assert found is not None
    waiting = [f for f in found.operations.values() if not f.started]
    dated = [f for f in waiting if f.start["p50"] is not None]
    running = [f for f in found.operations.values() if f.started]
    finishing = [f for f in running if f.finish["p50"] is not None]
    return {
        "mode": "cost",
        "parameters": {
            key: getattr(args, key)
            for key in (
                "nodes",
                "running",
                "pending",
                "pools",
                "seeds",
                "max_seeds",
                "horizon",
                "forecast_period",
                "cpu_budget",
                "repeat",
                "submitted_per_hour",
            )
        },
        "cpu_seconds_per_refresh": [round(r, 3) for r in runs],
        "cpu_seconds_per_refresh_median": round(statistics.median(runs), 3),
        "cpu_seconds_per_seed_median": round(statistics.median(runs) / args.seeds, 3),
        "simulator_events": found.events,
        "horizon_covered_s": round(found.horizon, 1),
        "horizon_covered_s_per_refresh": covered,
        "runs_per_refresh": seeds,
        "pending_with_start_in_horizon": len(dated),
        "pending": len(waiting),
        "running_with_finish_p50": len(finishing),
        "running": len(running),
        "assumed_arrivals": found.arrivals,
        "load_average": _round(_load()),
        "numpy_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "rss_note": "one process; the live service runs this in its worker process",
        "array_check": float(np.sum([1.0])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    back = sub.add_parser("backtest")
    back.add_argument("--workload", choices=("project-root", "day"), default="project-root")
    back.add_argument("--every", type=float, default=5.0, help="simulated seconds between forecasts")
    back.add_argument("--start", type=float, default=0.0, help="first forecast at or after this time")
    back.add_argument("--until", type=float, default=None)
    back.add_argument("--max-forecasts", type=int, default=1000)
    back.add_argument(
        "--arrival-window",
        type=float,
        default=3600.0,
        help="seconds of submissions the arrival model draws from (0: no arrivals, the cluster left alone)",
    )
    back.add_argument(
        "--oracle",
        action="store_true",
        help="forecast with the workload's true run-time distributions (what a perfect duration model scores)",
    )
    back.add_argument(
        "--ideal",
        type=int,
        default=0,
        help="score the ideal forecast too with this many draws (day with --pool-running-limit; 0: not)",
    )
    back.add_argument(
        "--ideal-only", action="store_true", help="with --ideal: score the ideal forecast alone (no forecast)"
    )
    back.add_argument("--samples", default=None, help="write one JSON line per sample to this file")
    back.add_argument(
        "--no-drain",
        dest="drain",
        action="store_false",
        help="end the recording at --until (late forecasts then see only their early starts)",
    )
    for target in (back, sub.add_parser("cost")):
        target.add_argument("--seeds", type=int, default=8)
        target.add_argument(
            "--max-seeds",
            type=int,
            default=None,
            help="runs at most: more than --seeds while the CPU budget left pays them (default: --seeds)",
        )
        target.add_argument("--horizon", type=float, default=3600.0)
        target.add_argument("--forecast-period", type=float, default=None)
        target.add_argument("--cpu-budget", type=float, default=None, help="CPU seconds per forecast")
        target.add_argument("--nodes", type=int, default=1000)
        target.add_argument("--pools", type=int, default=100)
        target.add_argument("--seed", type=int, default=1)
    back.add_argument("--hours", type=float, default=1.0)
    back.add_argument("--operations", type=int, default=2000)
    back.add_argument("--jobs", type=int, default=100_000)
    back.add_argument("--period", type=float, default=1.0)
    back.add_argument("--squeeze", type=float, default=1.0, help="day: keep this share of the nodes")
    back.add_argument(
        "--pool-running-limit", type=int, default=None, help="day: every pool's max_running_operation_count"
    )
    costs = sub.choices["cost"]
    costs.add_argument("--running", type=int, default=200)
    costs.add_argument("--pending", type=int, default=2000)
    costs.add_argument("--repeat", type=int, default=3)
    costs.add_argument(
        "--submitted-per-hour",
        type=int,
        default=2000,
        help="operations submitted over the last hour (the arrival model's history; 0: none, no arrivals)",
    )
    args = parser.parse_args()
    result = backtest(args) if args.mode == "backtest" else cost(args)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
