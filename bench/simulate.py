"""Benchmark the simulator end to end; prints one JSON object.

The issue's target size is 1,000 nodes (16 cpu, 64 GiB), 24 simulated hours, ~20,000 operations and ~500,000
jobs in a 100-pool tree with a 1 s fair-share update period and a 1 s heartbeat period. The default here is a
scaled-down slice of that workload (same per-node load, pools and periods) that runs in a few minutes; use
--nodes/--hours/--operations to scale, and --scaling to add 2-3 points along nodes and along jobs.

The workload keeps the cluster about 70% busy on average with Poisson arrivals over 100 pools (weights 1-3,
a third of them with guarantees), lognormal job counts (median ``jobs/operations``) and lognormal durations
sized for that load. Outputs are not written (the engine is measured, not the disk); wall time is split into
the fair-share updates, node heartbeats processed by the core, and the engine itself.

Usage: .venv/bin/python bench/simulate.py [--nodes 100] [--hours 1] [--operations N] [--jobs N] [--scaling]
[--scaling-nodes 100,1000,10000] [--progress [--progress-minutes 15]]

--progress writes one line to stderr each time the run passes another ``--progress-minutes`` of simulated time
(the engine calls it at the first event at or after each mark; a run stopped early still printed its lines) and
one at the end: wall and CPU seconds so far, simulated hours, running / pending / finished operations,
running and completed jobs, current and peak RSS, and the wall seconds per simulated hour (with the speed-up)
over the interval since the previous line. The JSON on stdout is the same with or without it.

The issue's two sizes: ``--shape teams --nodes 1000 --hours 2 --operations 2000`` (1,000 nodes, 20 x 5 pools) and
``--nodes 10000 --pools 1000 --hours 24 --operations 20000`` (lognormal shape, 25 jobs per operation by default).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pooltree.phases import PhaseTimes
from pooltree.sim import Simulation, parse_scenario

TARGET = {"nodes": 1000, "hours": 24.0, "operations": 20_000, "jobs": 500_000, "pools": 100}
LOAD = 0.7


def scenario_document(
    nodes: int, hours: float, operations: int, jobs: int, pools: int, period: float, seed: int
) -> dict:
    """A synthetic scenario at the given scale (deterministic for ``seed``)."""
    import random

    rng = random.Random(seed)
    pool_map: dict[str, Any] = {}
    guarantee_cpu = 16 * nodes * 0.5 / max(1, pools // 3)
    for index in range(pools):
        config: dict[str, Any] = {
            "weight": 1 + index % 3,
            "max_running_operation_count": 50,
            "max_operation_count": 500,
        }
        if index % 3 == 0:
            config["strong_guarantee_resources"] = {"cpu": round(guarantee_cpu, 2)}
        pool_map[f"pool-{index:03d}"] = config
    horizon = hours * 3600.0
    jobs_per_op = max(1.0, jobs / operations)
    mean_duration = LOAD * 16 * nodes * horizon / jobs
    sigma_jobs, sigma_duration = 1.0, 0.6
    ops = []
    for index in range(operations):
        submit = rng.uniform(0, horizon * 0.9)
        count = max(1, round(jobs_per_op * math.exp(sigma_jobs * rng.gauss(0, 1) - sigma_jobs**2 / 2)))
        ops.append(
            {
                "id": f"op-{index:05d}",
                "submit_time": round(submit, 3),
                "user": f"user-{index % 37}",
                "spec": {"pool": f"pool-{rng.randrange(pools):03d}"},
                "tasks": [
                    {
                        "job_count": count,
                        "resources": {"cpu": 1, "memory": "4Gi", "user_slots": 1},
                        "duration": {
                            "distribution": "lognormal",
                            "median": f"{mean_duration * math.exp(-(sigma_duration**2) / 2):.3f}s",
                            "sigma": sigma_duration,
                        },
                    }
                ],
            }
        )
    return {
        "seed": seed,
        "until": f"{horizon:.0f}s",
        "scheduler": {"fair_share_update_period": f"{period:g}s", "node_heartbeat_period": "1s"},
        "report": {"event_log": False, "timeline_operations": False},
        "cluster": {
            "nodes": [
                {
                    "address": "node",
                    "count": nodes,
                    "resource_limits": {"cpu": 16, "memory": "64Gi", "user_slots": 16},
                }
            ]
        },
        "pool_trees": {
            "physical": {
                # the tree's own running limit (the root's, 2,000 by default) would queue most of the day's
                # ~7,000 concurrent operations at 10,000 nodes: the workload must run, not wait at the root
                "config": {
                    "fair_share_starvation_timeout": "30s",
                    "max_running_operation_count": max(2000, operations),
                    "max_operation_count": max(50_000, operations),
                },
                "pools": pool_map,
            }
        },
        "operations": ops,
    }


def teams_scenario_document(
    nodes: int, hours: float, operations: int, teams: int, per_team: int, period: float, seed: int
) -> dict:
    """The issue-16 shape: ``teams`` × ``per_team`` leaf pools, map operations with 5–35 jobs of 60–1,800 s.

    Operations arrive uniformly over the first 90% of the horizon, each in a random leaf pool, with
    ``job_count`` uniform in 5..35 and job durations uniform in 60..1,800 s (1 cpu, 4 GiB, 1 slot each).
    Team pools have weights 1–3, every second team a cpu guarantee (half the cluster spread over them).
    """
    import random

    rng = random.Random(seed)
    guaranteed = max(1, teams // 2)
    pool_map: dict[str, Any] = {}
    for team in range(teams):
        team_pools = {
            f"team-{team:02d}-{leaf}": {
                "weight": 1 + leaf % 2,
                "max_running_operation_count": 50,
                "max_operation_count": 100,
            }
            for leaf in range(per_team)
        }
        # team pools hold every operation of their leaves (the default running limit, 8, would queue most)
        config: dict[str, Any] = {
            "weight": 1 + team % 3,
            "max_running_operation_count": 50 * per_team,
            "max_operation_count": 100 * per_team,
            "pools": team_pools,
        }
        if team % 2 == 0:
            config["strong_guarantee_resources"] = {"cpu": round(16 * nodes * 0.5 / guaranteed, 2)}
        pool_map[f"team-{team:02d}"] = config
    horizon = hours * 3600.0
    ops = []
    for index in range(operations):
        team, leaf = rng.randrange(teams), rng.randrange(per_team)
        ops.append(
            {
                "id": f"op-{index:05d}",
                "submit_time": round(rng.uniform(0, horizon * 0.9), 3),
                "user": f"user-{index % 37}",
                "spec": {"pool": f"team-{team:02d}-{leaf}"},
                "tasks": [
                    {
                        "job_count": rng.randint(5, 35),
                        "resources": {"cpu": 1, "memory": "4Gi", "user_slots": 1},
                        "duration": {"distribution": "uniform", "min": "60s", "max": "1800s"},
                    }
                ],
            }
        )
    return {
        "seed": seed,
        "until": f"{horizon:.0f}s",
        "scheduler": {"fair_share_update_period": f"{period:g}s", "node_heartbeat_period": "1s"},
        "report": {"event_log": False, "timeline_operations": False},
        "cluster": {
            "nodes": [
                {
                    "address": "node",
                    "count": nodes,
                    "resource_limits": {"cpu": 16, "memory": "64Gi", "user_slots": 16},
                }
            ]
        },
        "pool_trees": {"physical": {"config": {"fair_share_starvation_timeout": "30s"}, "pools": pool_map}},
        "operations": ops,
    }


def _rss_mib() -> float:
    """The process's current resident set size in MiB (Linux /proc; the peak where that is unavailable)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class ProgressLines:
    """The engine's progress callback for a long run: one stderr line per ``minutes`` of simulated time.

    The callback only reads the simulation (``simulation`` is set once it is created), so a run with it
    computes exactly what a run without it computes.
    """

    def __init__(self, minutes: float, stream: Any = None) -> None:
        self.interval = max(1.0, minutes * 60.0)
        self.stream = stream if stream is not None else sys.stderr
        self.simulation: Simulation | None = None
        self.started = time.perf_counter()
        self.cpu_started = time.process_time()
        self.next_mark = self.interval
        self.last_wall = 0.0
        self.last_simulated = 0.0

    def __call__(self, now: float, horizon: float, finished: int, total: int) -> None:
        final = finished >= total or now >= horizon  # the engine's last call (the run ended)
        if now < self.next_mark and not final:
            return
        if final and now == self.last_simulated and self.last_wall > 0:
            return  # the run ended on a mark: its line is printed
        self.next_mark = (math.floor(now / self.interval) + 1) * self.interval
        self.line(now, finished, total)

    def line(self, now: float, finished: int, total: int) -> None:
        wall = time.perf_counter() - self.started
        cpu = time.process_time() - self.cpu_started
        running = pending = 0
        completed_jobs = 0
        running_jobs = 0
        simulation = self.simulation
        if simulation is not None:
            for op in simulation.ops:
                if op.state == "running":
                    running += 1
                elif op.state == "pending":
                    pending += 1
                if op.controller is not None:
                    completed_jobs += op.controller.completed_job_count
            running_jobs = len(simulation.jobs)
        simulated_hours = (now - self.last_simulated) / 3600.0
        interval_wall = wall - self.last_wall
        per_hour = interval_wall / simulated_hours if simulated_hours > 0 else float("nan")
        speedup = (now - self.last_simulated) / interval_wall if interval_wall > 0 else float("nan")
        self.last_wall, self.last_simulated = wall, now
        print(
            f"progress wall_s={wall:.1f} cpu_s={cpu:.1f} sim_h={now / 3600.0:.3f} running_ops={running} "
            f"pending_ops={pending} finished_ops={finished}/{total} running_jobs={running_jobs} "
            f"completed_jobs={completed_jobs} rss_mib={_rss_mib():.0f} "
            f"peak_rss_mib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} "
            f"interval_wall_s_per_sim_h={per_hour:.1f} interval_speedup={speedup:.1f}",
            file=self.stream,
            flush=True,
        )


def measure(
    nodes: int,
    hours: float,
    operations: int,
    jobs: int,
    pools: int,
    period: float,
    seed: int,
    *,
    shape: str = "lognormal",
    teams: int = 20,
    per_team: int = 5,
    compare: bool = False,
    progress_minutes: float | None = None,
) -> dict:
    if shape == "teams":
        document = teams_scenario_document(nodes, hours, operations, teams, per_team, period, seed)
    else:
        document = scenario_document(nodes, hours, operations, jobs, pools, period, seed)
    scenario = parse_scenario(document, source="bench")
    # wall time inside the core's fair-share updates (republishes included) and heartbeats: its own phase timers
    times = PhaseTimes(time.perf_counter)
    start = time.perf_counter()
    cpu_start = time.process_time()
    progress = ProgressLines(progress_minutes) if progress_minutes is not None else None
    simulation = Simulation(
        scenario,
        progress=progress,
        progress_interval=progress.interval if progress is not None else None,
        phase_times=times,
    )
    if progress is not None:
        progress.simulation = simulation
    result = simulation.run()
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    update_s = times.seconds.get("update", 0.0) + times.seconds.get("republish", 0.0)
    heartbeat_s = times.seconds.get("heartbeat", 0.0)
    summary = result.summary
    simulated = summary["global"]["simulated_time"]
    started_jobs = sum(op["completed_job_count"] for op in summary["operations"])
    engine = summary["engine"]
    out = {
        "shape": shape,
        "nodes": nodes,
        "hours": hours,
        "operations": operations,
        "jobs": sum(op.job_count for op in scenario.operations),
        "completed_jobs": started_jobs,
        "pools": len(scenario.snapshot.pool_trees["physical"].pools),
        "fair_share_update_period_s": period,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "simulated_s": simulated,
        "speedup": round(simulated / wall, 1),
        "speedup_cpu": round(simulated / cpu, 1),
        "wall_fair_share_update_s": round(update_s, 2),
        "wall_heartbeats_s": round(heartbeat_s, 2),
        "wall_engine_s": round(wall - update_s - heartbeat_s, 2),
        "fair_share_update_ms": round(1000 * update_s / max(1, engine["fair_share_updates"]), 2),
        # growth should follow the events that change something: CPU per processed event (the run's events are
        # fair-share periods, job ends and peaks, arrivals, node events and the heartbeats that were processed)
        "cpu_ms_per_event": round(1000 * cpu / max(1, engine["events"]), 3),
        "engine_wall_ms_per_event": round(
            1000 * (wall - update_s - heartbeat_s) / max(1, engine["events"]), 4
        ),
        "utilization_cpu": summary["global"]["utilization"]["cpu"],
        **engine,
    }
    if compare:
        # a what-if comparison of the same run: every team's weight doubled in the variant
        from pooltree.sim.compare import BASELINE
        from pooltree.sim.compare import compare as compare_runs

        variant = dict(document)
        trees = json.loads(json.dumps(document["pool_trees"]))
        for config in trees["physical"]["pools"].values():
            config["weight"] = config.get("weight", 1) * 2
        variant["pool_trees"] = trees
        start = time.perf_counter()
        cpu_start = time.process_time()
        other = Simulation(parse_scenario(variant, source="bench variant")).run()
        comparison = compare_runs({BASELINE: result, "weights-x2": other})
        out["compare_wall_s"] = round(wall + time.perf_counter() - start, 2)
        out["compare_cpu_s"] = round(cpu + time.process_time() - cpu_start, 2)
        out["compare_cost_vs_single_cpu"] = round(out["compare_cpu_s"] / cpu, 2)
        out["compare_cost_vs_single_wall"] = round(out["compare_wall_s"] / wall, 2)
        out["compare_pools"] = len(comparison["pools"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument(
        "--operations", type=int, default=None, help="default: the target's rate scaled to nodes and hours"
    )
    parser.add_argument("--jobs", type=int, default=None, help="default: 25 jobs per operation")
    parser.add_argument("--pools", type=int, default=100)
    parser.add_argument("--fair-share-period", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scaling", action="store_true", help="also measure 2-3 points along nodes and jobs")
    parser.add_argument(
        "--scaling-nodes",
        default=None,
        help="with --scaling: the node counts to measure, comma-separated (default: half and twice --nodes); "
        "operations and jobs scale with the nodes",
    )
    parser.add_argument(
        "--shape",
        choices=("lognormal", "teams"),
        default="lognormal",
        help="teams: the issue-16 workload (teams x per-team leaf pools, 5-35 jobs of 60-1,800 s per operation)",
    )
    parser.add_argument("--teams", type=int, default=20)
    parser.add_argument("--per-team", type=int, default=5)
    parser.add_argument(
        "--compare", action="store_true", help="also run a variant (team weights doubled) and report the cost"
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        help="print a progress line to stderr every --progress-minutes of simulated time (see the docstring)",
    )
    parser.add_argument("--progress-minutes", type=float, default=15.0)
    args = parser.parse_args()
    scale = (args.nodes / TARGET["nodes"]) * (args.hours / TARGET["hours"])
    operations = args.operations or max(1, round(TARGET["operations"] * scale))
    jobs = args.jobs or operations * TARGET["jobs"] // TARGET["operations"]
    shape = {"shape": args.shape, "teams": args.teams, "per_team": args.per_team}
    load_before = os.getloadavg()
    base = measure(
        args.nodes,
        args.hours,
        operations,
        jobs,
        args.pools,
        args.fair_share_period,
        args.seed,
        compare=args.compare,
        progress_minutes=args.progress_minutes if args.progress else None,
        **shape,
    )
    output: dict[str, Any] = {
        "name": "simulate",
        "parameters": vars(args) | {"operations": operations, "jobs": jobs},
        "result": base,
    }
    if args.scaling:
        output["scaling_nodes"] = [
            measure(
                n,
                args.hours,
                max(1, round(operations * n / args.nodes)),
                round(jobs * n / args.nodes),
                args.pools,
                args.fair_share_period,
                args.seed,
                **shape,
            )
            for n in (
                [int(n) for n in args.scaling_nodes.split(",")]
                if args.scaling_nodes
                else [args.nodes // 2, args.nodes * 2]
            )
        ]
        output["scaling_jobs"] = [
            measure(
                args.nodes,
                args.hours,
                operations * factor if args.shape == "teams" else operations,
                jobs * factor,
                args.pools,
                args.fair_share_period,
                args.seed,
                **shape,
            )
            for factor in (2, 4)
        ]
    output["load_average_before"] = load_before
    output["load_average_after"] = os.getloadavg()
    output["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    output["machine"] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(output, indent=1))


if __name__ == "__main__":
    main()
