"""The per-period step when operations arrive and leave under unchanged pools (issue 16's general path); prints
one JSON object.

The snapshot is `bench/update_step.py`'s (``--pools`` pools in three levels, ``--operations`` running
operations with usage and demand). Between two steps ``--arrivals`` new operations start in random leaf pools
(with pending jobs) and ``--departures`` random running ones finish, through the tree's API as the simulator and
the live service do it. Two trees with the same changes run side by side in this process, their steps
alternating: ``incremental`` (today's path: the input, the build and publish re-make only the changed
operations, see ``PoolTree.operations_changed_since``) and ``walk`` (the same code with the operation journal
answering "unknown", so every such step walks the whole tree, builds a new `SchedulingTree` and publishes every
element anew, as before the incremental path). Both publish the same shares (checked). Reported: CPU time
(``time.process_time``) per step, median over ``--steps``, for each and their ratio; the split into input,
fair share and publish as `pooltree fair-share --timings` reports it (wall time).

Usage: .venv/bin/python bench/operation_changes.py [--pools 1110] [--operations 10000] [--arrivals 3]
       [--departures 3] [--steps 10]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def _walking(tree: Any) -> None:
    """Make ``tree``'s journal answer "unknown": every period with a change walks the whole tree."""
    tree.operations_changed_since = lambda revision: None


def run(pools: int, operations: int, arrivals: int, departures: int, steps: int, seed: int) -> dict[str, Any]:
    import numpy as np
    from update_step import snapshot_document

    from pooltree.cli.fair_share import _register, _TreeStep
    from pooltree.config import OperationSpec, load_snapshot
    from pooltree.gc_policy import survivors_frozen

    document = snapshot_document(pools, operations, seed)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "snapshot.json"
        path.write_text(json.dumps(document))
        snapshot = load_snapshot(path)
        runs = {}
        for mode in ("incremental", "walk"):
            trees = _register(snapshot)
            step = _TreeStep(snapshot, trees, "physical")
            if mode == "walk":
                _walking(step.tree)
            runs[mode] = step
    leaves = sorted(
        name
        for name, pool in runs["incremental"].tree.pools.items()
        if not pool.children and not pool.is_root
    )
    rng = random.Random(seed)
    needed = np.array([5.0, 5.0, 0.0, 20 * 1024.0**3, 0.0])
    cpu: dict[str, list[float]] = {mode: [] for mode in runs}
    split: dict[str, dict[str, list[float]]] = {}
    counter = 0
    with survivors_frozen():
        for step_index in range(steps + 1):
            if step_index:
                running = [op_id for op_id, op in runs["incremental"].tree.operations.items() if op.running]
                leaving = rng.sample(running, min(departures, len(running)))
                arriving = []
                for _ in range(arrivals):
                    counter += 1
                    arriving.append((f"arrival-{counter}", rng.choice(leaves)))
                for step in runs.values():
                    for op_id in leaving:
                        step.tree.unregister_operation(op_id)
                        del step.resources[op_id]
                    for op_id, pool in arriving:
                        step.tree.register_operation(
                            op_id,
                            user="bench",
                            pool=pool,
                            spec=OperationSpec.model_validate({"pool": pool}),
                            now=float(operations + step_index),
                        )
                        step.resources[op_id] = (np.zeros(5), needed)
            for mode, step in runs.items():
                begin = time.process_time()
                step.run()
                cpu[mode].append(time.process_time() - begin)
            shares = [
                {key: spec.fair_share.tolist() for key, spec in step.strategy.tree.elements.items()}
                for step in runs.values()
            ]
            if shares[0] != shares[1]:
                raise SystemExit("the two paths published different shares")
        for mode, step in runs.items():
            split[mode] = {key: statistics.median(values[1:]) for key, values in step.split.items()}
    medians = {mode: statistics.median(values[1:]) for mode, values in cpu.items()}  # the first step is cold
    return {
        "pools": len(runs["incremental"].tree.pools) - 1,
        "running_operations": operations,
        "arrivals_per_step": arrivals,
        "departures_per_step": departures,
        "steps": steps,
        "incremental_cpu_s": medians["incremental"],
        "walk_cpu_s": medians["walk"],
        "speedup": medians["walk"] / medians["incremental"] if medians["incremental"] else None,
        "split_wall_s": split,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=1110)
    parser.add_argument("--operations", type=int, default=10_000, help="running operations")
    parser.add_argument("--arrivals", type=int, default=3)
    parser.add_argument("--departures", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    result = run(args.pools, args.operations, args.arrivals, args.departures, args.steps, args.seed)
    result["python"] = platform.python_version()
    result["load_average"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
