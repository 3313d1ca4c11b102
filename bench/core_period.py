"""The per-period step through `SchedulerCore` at the 10,000-node day's density (issue 16); prints one JSON object.

`bench/update_step.py` runs the CLI's step on a snapshot map; this runs the step the simulator and the live service
pay: ``SchedulerCore.update_fair_share`` (completed operations, the fair-share input from the core's operations,
the update, the build and the publish) with real controllers (`MapController`) and allocations started by node
heartbeats. ``--operations`` operations run in a tree of ``--pools`` pools (10 x 10 x leaves, no running limit),
their jobs placed by heartbeats of ``--nodes`` nodes; between two periods ``--changed`` random allocations finish
and the nodes that held them heartbeat (starting pending jobs), as in a period of the day where ~10-20 jobs start
or end. Reported: CPU time (``time.process_time``) per period, median over ``--periods``, and from a cProfile of
``--profiled`` more periods the calls per period of the input's and the publish's per-operation functions
(`InputResources.resources`, `_refresh_resources`, `heap_changes.requeue`, and the controllers'
``pending_allocation_count``, which a poll reads for every operation) with their cumulative milliseconds.

Usage: .venv/bin/python bench/core_period.py [--operations 6000] [--pools 1110] [--nodes 1000] [--changed 20]
       [--periods 20] [--profiled 10] [--seed 1]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pooltree.config import parse_pool_trees  # noqa: E402
from pooltree.controllers.operations import MapController, TaskSpec  # noqa: E402
from pooltree.resources import vector  # noqa: E402
from pooltree.strategy.core import SchedulerCore  # noqa: E402
from pooltree.strategy.model import FinishedAllocation, NodeHeartbeat  # noqa: E402
from pooltree.tree import PoolTree  # noqa: E402

GiB = 1024.0**3
WATCHED = ("resources", "_refresh_resources", "requeue", "pending_allocation_count")


def _tree(pools: int, operations: int, rng: random.Random) -> tuple[PoolTree, list[str]]:
    leaves_per_mid = max(1, (pools - 110) // 100)
    unlimited = {"max_running_operation_count": operations, "max_operation_count": operations * 2}
    document: dict[str, Any] = {}
    leaves = []
    for top in range(10):
        mids: dict[str, Any] = {}
        for mid in range(10):
            grand = {}
            for leaf in range(leaves_per_mid):
                name = f"p{top}-{mid}-{leaf}"
                grand[name] = {"weight": rng.choice([1, 1, 2, 3]), **unlimited}
                leaves.append(name)
            mids[f"p{top}-{mid}"] = {"weight": rng.choice([1, 2]), "pools": grand, **unlimited}
        document[f"p{top}"] = {"weight": rng.choice([1, 2, 3]), "pools": mids, **unlimited}
    config = unlimited
    trees = parse_pool_trees({"physical": {"config": config, "pools": document}})
    return PoolTree(trees["physical"]), leaves


def build(operations: int, pools: int, nodes: int, seed: int) -> tuple[SchedulerCore, random.Random]:
    rng = random.Random(seed)
    tree, leaves = _tree(pools, operations, rng)
    core = SchedulerCore(tree)
    limits = vector(user_slots=64, cpu=64, memory=256 * GiB)
    for index in range(nodes):
        core.add_node(f"n{index}", limits)
    job = vector(user_slots=1, cpu=1, memory=2 * GiB)
    for index in range(operations):
        op_id = f"op{index}"
        controller = MapController(op_id, [TaskSpec("main", rng.randint(5, 35), job)])
        core.register_operation(op_id, controller, user=f"u{index % 50}", pool=rng.choice(leaves), now=0.0)
    core.update_fair_share(0.0)
    for address in list(core.node_limits):  # one round of heartbeats places the first jobs
        core.process_heartbeat(NodeHeartbeat(address, limits), 0.0)
    core.update_fair_share(1.0)
    return core, rng


def period(core: SchedulerCore, rng: random.Random, changed: int, now: float) -> None:
    """``changed`` random allocations finish, their nodes heartbeat, then the fair-share period runs."""
    strategy = core.strategy
    ids = rng.sample(sorted(strategy.allocations), min(changed, len(strategy.allocations)))
    nodes = set()
    for allocation_id in ids:
        allocation = strategy.allocations[allocation_id]
        nodes.add(allocation.node_address)
        core.on_allocation_finished(FinishedAllocation(allocation_id, "completed"), now)
    for address in sorted(nodes):
        core.process_heartbeat(NodeHeartbeat(address, core.node_limits[address]), now)
    core.update_fair_share(now)


def run(
    operations: int, pools: int, nodes: int, changed: int, periods: int, profiled: int, seed: int
) -> dict:
    begin = time.process_time()
    core, rng = build(operations, pools, nodes, seed)
    setup = time.process_time() - begin
    now = 2.0
    for _ in range(3):  # warm the caches
        period(core, rng, changed, now)
        now += 1.0
    cpu = []
    for _ in range(periods):
        start = time.process_time()
        period(core, rng, changed, now)
        cpu.append(time.process_time() - start)
        now += 1.0
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(profiled):
        period(core, rng, changed, now)
        now += 1.0
    profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    calls: dict[str, Any] = {}
    for (_file, _line, name), (_cc, count, _tt, cumulative, _callers) in stats.items():
        if name in WATCHED:
            calls[name] = {
                "calls_per_period": count / profiled,
                "cumulative_ms_per_period": round(1000 * cumulative / profiled, 3),
            }
    running = sum(1 for op in core.pool_tree.operations.values() if op.running)
    return {
        "running_operations": running,
        "allocations": len(core.strategy.allocations),
        "setup_cpu_s": round(setup, 2),
        "period_cpu_median_s": round(statistics.median(cpu), 5),
        "period_cpu_min_s": round(min(cpu), 5),
        "profiled": calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=6000)
    parser.add_argument("--pools", type=int, default=1110)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--changed", type=int, default=20, help="allocations finishing per period")
    parser.add_argument("--periods", type=int, default=20)
    parser.add_argument("--profiled", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    load_before = os.getloadavg()
    result = run(
        args.operations, args.pools, args.nodes, args.changed, args.periods, args.profiled, args.seed
    )
    print(
        json.dumps(
            {
                "name": "core_period",
                "parameters": vars(args),
                "result": result,
                "load_average": [load_before, os.getloadavg()],
                "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
