"""What-if: a GPU cluster with scheduling segments off (baseline), on, and the GPU policy; prints one JSON object.

The cluster: ``--nodes`` hosts of 8 GPUs (default 500, 4,000 GPUs) split evenly into two data centers
(``dc-a``, ``dc-b``), one pool tree ``gpu`` (``main_resource: gpu``) with two pools of equal weight: ``small`` gets
operations of 1-GPU jobs (Poisson arrivals, lognormal job counts and durations), ``large`` gets gang operations of
full-host (8-GPU) jobs (``is_gang``). The load is sized so the 1-GPU work alone stays below its fair share: its
jobs are not preemptible by the fair-share rules, which is where a full-host gang waits behind fragmentation.
The variant ``segments`` sets ``scheduling_segments`` (``large_gpu``, modules = the two data centers, YTsaurus's
defaults except ``initialization_timeout`` 1 min so the first minutes count); ``gpu_policy`` sets ``policy_kind:
gpu`` with ``gpu_scheduling_policy: {mode: allocating, modules: the two data centers}`` (pooltree's defaults).

Both runs go through the simulator's what-if comparison (``pooltree.sim.compare``: the same workload, seed and
nodes; ``comparison.json`` / ``.html`` are written under ``--out``). Reported per run: for each gang the time from
submit until all its jobs ran at once (p50, p95, mean, max; gangs never complete by the end are counted apart),
GPU utilisation, preempted allocations (total and by reason), completed operations, and the run's CPU seconds.

Usage: .venv/bin/python bench/gpu_segments.py [--nodes 500] [--hours 6] [--seed 1] [--out DIR]
       [--variants segments,gpu_policy]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pooltree.sim import parse_scenario, run_to_directory
from pooltree.sim.compare import BASELINE, compare, write_comparison

NODE = {"user_slots": 16, "cpu": 64, "gpu": 8, "memory": "512Gi", "network": 100}
SMALL_JOB = {"gpu": 1, "cpu": 4, "memory": "16Gi", "user_slots": 1}
GANG_JOB = {"gpu": 8, "cpu": 32, "memory": "128Gi", "user_slots": 1}
POOL_LIMITS = {"max_running_operation_count": 10000, "max_operation_count": 10000}
"""Operation count limits out of the way: the figures are about GPUs, not about queues of operations."""
SEGMENTS = {
    "mode": "large_gpu",
    "data_centers": ["dc-a", "dc-b"],
    "initialization_timeout": "1m",
}
GPU_POLICY = {"mode": "allocating", "module_type": "data_center", "modules": ["dc-a", "dc-b"]}
"""The GPU scheduling policy (``policy_kind: gpu``), pooltree's defaults for its durations."""
VARIANTS = ("segments", "gpu_policy")


def workload(nodes: int, hours: float, seed: int) -> list[dict[str, Any]]:
    """1-GPU operations filling ~75% of the GPUs and full-host gangs asking ~20% of them, over ``hours``."""
    rng = random.Random(seed)
    gpus = nodes * 8
    horizon = hours * 3600.0
    operations: list[dict[str, Any]] = []
    small_median_jobs, small_median_duration = 40, 1800.0  # seconds; written "1800s" (bare numbers are ms)
    small_mean_gpu_seconds = (
        small_median_jobs * math.exp(0.5**2 / 2) * small_median_duration * math.exp(0.4**2 / 2)
    )
    small_rate = 0.75 * gpus / small_mean_gpu_seconds  # operations per second
    t = 0.0
    index = 0
    while True:
        t += rng.expovariate(small_rate)
        if t >= horizon:
            break
        jobs = max(1, round(rng.lognormvariate(math.log(small_median_jobs), 0.5)))
        operations.append(
            {
                "id": f"small-{index:05d}",
                "submit_time": round(t, 3),
                "spec": {"pool": "small"},
                "tasks": [
                    {
                        "job_count": jobs,
                        "resources": SMALL_JOB,
                        "duration": {
                            "distribution": "lognormal",
                            "median": f"{small_median_duration:g}s",
                            "sigma": 0.4,
                        },
                    }
                ],
            }
        )
        index += 1
    gang_hosts, gang_duration = (4, 16), 3600.0
    gang_rate = 0.20 * gpus / (8 * sum(gang_hosts) / 2 * gang_duration)
    t, index = 600.0, 0  # the first gang once the 1-GPU work has spread over the cluster
    while t < horizon:
        hosts = rng.randint(*gang_hosts)
        operations.append(
            {
                "id": f"gang-{index:04d}",
                "submit_time": round(t, 3),
                "type": "vanilla",
                "spec": {"pool": "large", "is_gang": True},
                "tasks": [{"job_count": hosts, "resources": GANG_JOB, "duration": f"{gang_duration:g}s"}],
            }
        )
        index += 1
        t += rng.expovariate(gang_rate)
    operations.sort(key=lambda op: (op["submit_time"], op["id"]))
    return operations


def scenario(nodes: int, hours: float, seed: int, variant: str) -> dict[str, Any]:
    config: dict[str, Any] = {"main_resource": "gpu"}
    if variant == "segments":
        config["scheduling_segments"] = SEGMENTS
    elif variant == "gpu_policy":
        config["policy_kind"] = "gpu"
        config["gpu_scheduling_policy"] = GPU_POLICY
    half = nodes // 2
    return {
        "seed": seed,
        "until": f"{hours}h",
        "scheduler": {"fair_share_update_period": "1s", "node_heartbeat_period": "1s"},
        "cluster": {
            "nodes": [
                {"address": "a", "count": half, "tags": ["gpu", "dc-a"], "resource_limits": NODE},
                {"address": "b", "count": nodes - half, "tags": ["gpu", "dc-b"], "resource_limits": NODE},
            ]
        },
        "pool_trees": {"gpu": {"config": config, "pools": {"small": POOL_LIMITS, "large": POOL_LIMITS}}},
        "operations": workload(nodes, hours, seed),
    }


def _quantile(values: list[float], q: float) -> float | None:
    """Linear-interpolation quantile (numpy's default), None for no values."""
    return float(np.quantile(values, q)) if values else None


ENDED = ("allocation_finished", "allocation_aborted", "allocation_failed", "allocation_preempted")
"""A preempted allocation no longer counts as running (the node stops it; its usage is released at once)."""


def gang_waits(out: Path, operations: list[dict[str, Any]]) -> dict[str, Any]:
    """Submit → the first moment all of a gang's jobs run at once, from the run's events."""
    gangs = {op["id"]: op for op in operations if op["id"].startswith("gang-")}
    running: Counter[str] = Counter()
    live: dict[str, tuple[str, str]] = {}
    full: dict[str, float] = {}
    modules: dict[str, set[str]] = {}
    with (out / "events.jsonl").open() as handle:
        for line in handle:
            event = json.loads(line)
            kind = event.get("event")
            op = event.get("operation_id")
            if op not in gangs:
                continue
            if kind == "allocation_started":
                live[event["allocation_id"]] = (op, event["node"])
                running[op] += 1
                if op not in full and running[op] >= gangs[op]["tasks"][0]["job_count"]:
                    full[op] = event["time"]
                    modules[op] = {node.split("-")[0] for owner, node in live.values() if owner == op}
            elif kind in ENDED and (live.pop(event.get("allocation_id"), None) is not None):
                running[op] -= 1
    waits = [full[op] - gangs[op]["submit_time"] for op in sorted(full)]
    return {
        "gangs_submitted": len(gangs),
        "gangs_fully_running": len(full),
        "gang_wait_p50_s": _quantile(waits, 0.5),
        "gang_wait_p95_s": _quantile(waits, 0.95),
        "gang_wait_mean_s": sum(waits) / len(waits) if waits else None,
        "gang_wait_max_s": max(waits) if waits else None,
        "gangs_spanning_both_data_centers": sum(1 for hosts in modules.values() if len(hosts) > 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated: segments, gpu_policy"
    )
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    if not set(variants) <= set(VARIANTS):
        parser.error(f"--variants: known are {', '.join(VARIANTS)}")
    out = args.out or Path(tempfile.mkdtemp(prefix="gpu-segments-"))
    runs: dict[str, Any] = {}
    results = {}
    for name in (BASELINE, *variants):
        document = scenario(args.nodes, args.hours, args.seed, name)
        loaded = parse_scenario(document, source=f"bench/gpu_segments.py:{name}")
        cpu0, wall0 = time.process_time(), time.monotonic()
        result = run_to_directory(loaded, out / name, plots=False)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        results[name] = result
        glob = result.summary["global"]
        reasons: Counter[str] = Counter()
        for operation in result.summary["operations"]:
            for reason, count in operation.get("aborted_job_count_by_reason", {}).items():
                reasons[reason] += count
        states = Counter(operation["state"] for operation in result.summary["operations"])
        runs[name] = {
            **gang_waits(out / name, document["operations"]),
            "gpu_utilization": glob["utilization"].get("gpu"),
            "preempted_allocation_count": glob["preempted_allocation_count"],
            "aborted_jobs_by_reason": dict(sorted(reasons.items())),
            "completed_operations": states.get("completed", 0),
            "operations": len(document["operations"]),
            "cpu_seconds": round(cpu, 1),
            "wall_seconds": round(wall, 1),
        }
    write_comparison(compare(results), out)
    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "gpus": args.nodes * 8,
                "hours": args.hours,
                "seed": args.seed,
                "load_average": os.getloadavg(),
                "out": str(out),
                "runs": runs,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
