"""The strategy alone at a steady turnover: what a finish and a start cost in `TreeScheduler`; prints one JSON object.

``bench/scheduling.py``'s cluster (``--nodes`` 16-cpu nodes, ``--operations`` map operations in ``--pools`` pools,
``--jobs`` pending jobs each) is filled by one heartbeat per node; then each of ``--steps`` steps finishes one
allocation of a random node (``TreeScheduler.finish_allocation``) and heartbeats that node, which starts one
allocation in its place (``TreeScheduler.process_heartbeat``: the regular pass, the preemptive stages when due,
node overcommit). Reported: the CPU microseconds per step (one finish, one heartbeat, one start, the map
controllers' own work included) and a digest of the operations started (``decisions_sha256``: equal between two
builds that decide alike). No store, no wire, no live shell (``heartbeat_profile.py`` measures those around the
same strategy). CPU time moves with the machine's load; for A/B of small cuts run it under valgrind and compare
instructions per step (``bench/RESULTS.md``, "The strategy per start and finish, session 31").

Usage: .venv/bin/python bench/strategy_turnover.py [--nodes 300] [--operations 200] [--pools 1] [--jobs 2000]
       [--steps 20000] [--seed 7]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import scheduling

from pooltree.strategy import FinishedAllocation, NodeHeartbeat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--pools", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    task_spec = scheduling.TaskSpec
    scheduling.TaskSpec = lambda name, _count, resources: task_spec(name, args.jobs, resources)  # type: ignore[misc]
    built = scheduling.build(args.nodes, args.operations, args.pools, 0)
    scheduler, node_limits, addresses = built[0], built[3], built[4]
    for address in addresses:
        scheduler.process_heartbeat(NodeHeartbeat(address, node_limits), 0.0)
    rng = random.Random(args.seed)
    digest = hashlib.sha256()
    started = 0
    now = 1.0
    began = time.process_time()
    for _ in range(args.steps):
        address = addresses[rng.randrange(len(addresses))]
        running = sorted(scheduler.nodes[address].allocations)
        if running:
            finished = FinishedAllocation(running[rng.randrange(len(running))], "completed")
            scheduler.finish_allocation(finished, now)
        result = scheduler.process_heartbeat(NodeHeartbeat(address, node_limits), now)
        started += len(result.allocations_to_start)
        digest.update(repr([a.operation_id for a in result.allocations_to_start]).encode())
        now += 0.001
    cpu = time.process_time() - began
    print(
        json.dumps(
            {
                "bench": "strategy_turnover",
                "parameters": vars(args),
                "steps": args.steps,
                "started": started,
                "cpu_us_per_step": round(1e6 * cpu / max(args.steps, 1), 2),
                "decisions_sha256": digest.hexdigest()[:16],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
