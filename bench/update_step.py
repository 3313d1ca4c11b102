"""The per-period step (input from the tree runtime, fair-share update, publish) as `pooltree fair-share
SNAPSHOT --timings --repeat K` reports it, on a synthetic snapshot; prints one JSON object.

The snapshot: ``--pools`` pools in three levels (10 top pools with guarantees, 10 children each, leaves
under them; default 1,110 pools), ``--operations`` running operations (default 10,000) spread over the leaves
with usage and demand, on a cluster of 16-cpu nodes sized so the tree is oversubscribed about twice. The CLI runs
in a subprocess ``--runs`` times (default 3); each run reports the median of ``--repeat`` steps (the first step of
a run is cold: the input and publish caches are empty) and the split into input, fair share and publish.

``--pending N`` adds N operations waiting in the root's queue (the tree's running limit is ``--operations``):
issue 13's variant is ``--operations 500 --pending 10000``, whose step should cost what 500 running operations
cost (pending operations are not elements of the fair-share update or the snapshot).

``--changed F`` runs the same step in this process with a fraction F of the running operations changing usage
between steps (what the live service and the simulator see), so the cost of what changed shows; it also reports,
averaged over the runs, the mean wall and CPU time of the changed steps (the first, cold step left out), the time
spent in CPython's collector per changed step and the full collections per run (``changed_steps``): on a shared
machine the CPU time and the collector's share compare better than wall medians of 5 steps.

Both modes run under the process's garbage-collector policy as the CLI does (``pooltree/gc_policy.py``: the
survivors of each full collection are frozen); ``POOLTREE_GC_TUNING=0`` in the environment turns it off, for A/B.

``--discretized`` turns on the tree's ``enable_discretized_fair_share`` (its cost: every operation's function a
staircase of its 1-20 pending jobs, built anew every step).

Usage: .venv/bin/python bench/update_step.py [--changed F] [--pools 1110] [--operations 10000] [--pending 0] [--repeat 5] [--runs 3] [--discretized]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def snapshot_document(
    pools: int, operations: int, seed: int = 1, pending: int = 0, discretized: bool = False
) -> dict[str, Any]:
    """The synthetic snapshot; with ``pending`` > 0 the tree's running limit is ``operations`` and ``pending``
    more operations (no usage, only pending jobs) wait in the root's queue; ``discretized``: the tree sets
    ``enable_discretized_fair_share`` (every operation's job group gives it a per-job vector)."""
    rng = random.Random(seed)
    top = 10
    mid = 10
    leaves_per_mid = max(1, (pools - top - top * mid) // (top * mid))
    nodes = max(1, operations * 10 // 16 // 2)
    tree: dict[str, Any] = {}
    leaves: list[str] = []
    for t in range(top):
        children: dict[str, Any] = {}
        for m in range(mid):
            grand = {}
            for leaf in range(leaves_per_mid):
                name = f"p{t}-{m}-{leaf}"
                grand[name] = {"weight": rng.choice([1, 1, 2, 3])}
                leaves.append(name)
            children[f"p{t}-{m}"] = {"weight": rng.choice([1, 2]), "pools": grand}
        tree[f"p{t}"] = {
            "weight": rng.choice([1, 2, 3]),
            "strong_guarantee_resources": {"cpu": round(16 * nodes * 0.06, 2)},
            "pools": children,
        }
    ops = []
    for index in range(operations + pending):
        jobs = rng.randint(1, 20)
        running = rng.randint(0, jobs) if index < operations else 0
        ops.append(
            {
                "id": f"op-{index:05d}",
                "type": "map",
                "user": f"user-{index % 50}",
                "start_time": index,
                "spec": {"pool": rng.choice(leaves)},
                "jobs": [
                    {
                        "resources": {"cpu": 1, "memory": "4Gi", "user_slots": 1},
                        "running": running,
                        "pending": jobs - running,
                    }
                ],
            }
        )
    return {
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
                "config": {
                    "max_running_operation_count": operations,
                    "max_operation_count": operations + pending,
                    "max_running_operation_count_per_pool": operations + pending,
                    "max_operation_count_per_pool": operations + pending,
                    **({"enable_discretized_fair_share": True} if discretized else {}),
                },
                "pools": tree,
            }
        },
        "operations": ops,
        "fair_share_update": {
            "now": operations + pending + 10,
            "previous_update_time": operations + pending + 9,
        },
    }


def changed_step_timings(path: Path, repeat: int, fraction: float, seed: int) -> dict[str, float]:
    """The CLI's step (`pooltree.cli.fair_share._TreeStep`) in this process, with ``fraction`` of the running
    operations changing usage between steps (one pending job starts, or one running job ends), as periods of the
    live service see them; timings as ``--timings`` reports them. The process's gc policy applies as in the CLI
    (``pooltree.gc_policy``; ``POOLTREE_GC_TUNING=0`` turns it off)."""
    from pooltree.gc_policy import survivors_frozen

    with survivors_frozen():
        return _changed_steps(path, repeat, fraction, seed)


def _changed_steps(path: Path, repeat: int, fraction: float, seed: int) -> dict[str, float]:
    import numpy as np

    from pooltree.cli.fair_share import _register, _TreeStep
    from pooltree.config import load_snapshot

    snapshot = load_snapshot(path)
    trees = _register(snapshot)
    step = _TreeStep(snapshot, trees, "physical")
    tree = trees.tree("physical")
    running = [op_id for op_id in step.resources if tree.operation(op_id).running]
    rng = random.Random(seed)
    job = np.array([1.0, 1.0, 0.0, 4 * 1024.0**3, 0.0])
    durations = []
    cpu: list[float] = []
    collector = _CollectorTime()
    for index in range(repeat):
        if index:
            for op_id in rng.sample(running, int(len(running) * fraction)):
                usage, needed = step.resources[op_id]
                if needed[0] >= 1 and (usage[0] < 1 or rng.random() < 0.5):
                    step.resources[op_id] = (usage + job, needed - job)
                elif usage[0] >= 1:
                    step.resources[op_id] = (usage - job, needed)
        if index == 1:
            collector.start()
        begin = time.perf_counter()
        begin_cpu = time.process_time()
        step.run()
        cpu.append(time.process_time() - begin_cpu)
        durations.append(time.perf_counter() - begin)
    collector.stop()
    changed = max(1, repeat - 1)
    return {
        "pool_count": len(tree.pools) - 1,
        "update_s": statistics.median(durations),
        "update_first_s": durations[0],
        **{key: statistics.median(values) for key, values in step.split.items()},
        "changed_mean_s": statistics.mean(durations[1:] or durations),
        "changed_cpu_mean_s": statistics.mean(cpu[1:] or cpu),
        "changed_gc_mean_s": collector.seconds / changed,
        "changed_full_collections": collector.full,
    }


class _CollectorTime:
    """Time in CPython's collector (``gc.callbacks``) and the full collections, from ``start`` to ``stop``."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._began = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._began
        self.full += info["generation"] == 2

    def start(self) -> None:
        gc.callbacks.insert(0, self._callback)

    def stop(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=1110)
    parser.add_argument("--operations", type=int, default=10_000, help="running operations")
    parser.add_argument(
        "--pending",
        type=int,
        default=0,
        help="operations waiting in the queue (the tree's running limit is --operations; issue 13: 10,000)",
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="also write the snapshot here")
    parser.add_argument(
        "--changed",
        type=float,
        default=None,
        help="run the step in this process with this fraction of running operations changing usage between steps",
    )
    parser.add_argument(
        "--discretized", action="store_true", help="the tree sets enable_discretized_fair_share (its on path)"
    )
    args = parser.parse_args()
    document = snapshot_document(
        args.pools, args.operations, pending=args.pending, discretized=args.discretized
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "snapshot.json"
        path.write_text(json.dumps(document))
        if args.keep is not None:
            args.keep.write_text(json.dumps(document))
        runs = []
        for run in range(args.runs):
            if args.changed is not None:
                timings = changed_step_timings(path, args.repeat, args.changed, seed=run)
                pool_count = int(timings.pop("pool_count"))
                runs.append(timings)
                continue
            output = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "from pooltree.cli import main; main()",
                    "fair-share",
                    str(path),
                    "--timings",
                    "--repeat",
                    str(args.repeat),
                ],
                check=True,
                capture_output=True,
                text=True,
                cwd=ROOT,
            ).stdout
            view = json.loads(output)
            runs.append(view["timings"])
            pool_count = view["pool_trees"]["physical"]["pool_count"]
    keys = ("update_s", "update_first_s", "input_s", "fair_share_s", "publish_s")
    print(
        json.dumps(
            {
                "name": "update_step",
                "parameters": {
                    "pools": pool_count,
                    "operations": args.operations,
                    "pending": args.pending,
                    "changed": args.changed,
                    "discretized": args.discretized,
                    "repeat": args.repeat,
                    "runs": args.runs,
                },
                "median": {key: round(statistics.median(run[key] for run in runs), 4) for key in keys},
                "min": {key: round(min(run[key] for run in runs), 4) for key in keys},
                "max": {key: round(max(run[key] for run in runs), 4) for key in keys},
                **(
                    {}
                    if args.changed is None
                    else {
                        "changed_steps": {
                            key: round(statistics.mean(run[key] for run in runs), 4)
                            for key in (
                                "changed_mean_s",
                                "changed_cpu_mean_s",
                                "changed_gc_mean_s",
                                "changed_full_collections",
                            )
                        }
                    }
                ),
                "gc_tuning": os.environ.get("POOLTREE_GC_TUNING", "1"),
                "load_average": os.getloadavg(),
                "machine": {
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                    "cpus": os.cpu_count(),
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
