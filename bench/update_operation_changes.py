"""The pure fair-share update in periods where operations arrive and leave, against periods where nothing but
usage moves; prints one JSON object.

The snapshot is `bench/update_step.py`'s (``--pools`` pools in three levels, ``--operations`` running operations).
One tree runs the per-period step (input, update, publish) ``--steps`` times after two warm steps; before every
``--every``-th step ``--arrivals`` new operations start in random leaf pools and ``--departures`` random running
ones finish, through the tree's API as the simulator does it (the other steps change nothing). Reported: medians of
the CPU time (``time.process_time``) of `update_fair_share` and of the whole step, for the steps with operation
changes (``change``) and the others (``same``). Unlike `bench/operation_changes.py` only one tree runs, so the two
kinds of periods are compared in one process without a second tree between them.

``--profile N`` prints (to stderr) the N functions whose own time per update differs most between the two kinds.

Usage: .venv/bin/python bench/update_operation_changes.py [--pools 1110] [--operations 12000] [--arrivals 1]
       [--departures 1] [--steps 40] [--every 2] [--profile 0]
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
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def run(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    from update_step import snapshot_document

    import pooltree.cli.fair_share as cli
    from pooltree.config import OperationSpec, load_snapshot
    from pooltree.gc_policy import survivors_frozen

    document = snapshot_document(args.pools, args.operations, args.seed)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "snapshot.json"
        path.write_text(json.dumps(document))
        snapshot = load_snapshot(path)
        step = cli._TreeStep(snapshot, cli._register(snapshot), "physical")
    leaves = sorted(name for name, pool in step.tree.pools.items() if not pool.children and not pool.is_root)
    rng = random.Random(args.seed)
    needed = np.array([5.0, 5.0, 0.0, 20 * 1024.0**3, 0.0])
    update = cli.update_fair_share
    kind = ["same"]
    update_cpu: dict[str, list[float]] = {"change": [], "same": []}
    step_cpu: dict[str, list[float]] = {"change": [], "same": []}
    profiles = {"change": cProfile.Profile(), "same": cProfile.Profile()} if args.profile else None

    def timed(*call: Any, **named: Any) -> Any:
        profile = profiles[kind[0]] if profiles else None
        begin = time.process_time()
        if profile is not None:
            profile.enable()
        try:
            return update(*call, **named)
        finally:
            if profile is not None:
                profile.disable()
            update_cpu[kind[0]].append(time.process_time() - begin)

    cli.update_fair_share = timed
    counter = 0
    try:
        with survivors_frozen():
            step.run()
            step.run()
            update_cpu = {"change": [], "same": []}
            if profiles:
                profiles = {"change": cProfile.Profile(), "same": cProfile.Profile()}
            for index in range(args.steps):
                if index % args.every == 0:
                    kind[0] = "change"
                    running = [op_id for op_id, op in step.tree.operations.items() if op.running]
                    for op_id in rng.sample(running, min(args.departures, len(running))):
                        step.tree.unregister_operation(op_id)
                        del step.resources[op_id]
                    for _ in range(args.arrivals):
                        counter += 1
                        pool = rng.choice(leaves)
                        op_id = f"arrival-{counter}"
                        step.tree.register_operation(
                            op_id,
                            user="bench",
                            pool=pool,
                            spec=OperationSpec.model_validate({"pool": pool}),
                            now=float(args.operations + index),
                        )
                        step.resources[op_id] = (np.zeros(5), needed)
                else:
                    kind[0] = "same"
                begin = time.process_time()
                step.run()
                step_cpu[kind[0]].append(time.process_time() - begin)
    finally:
        cli.update_fair_share = update
    if profiles:
        _print_profile_difference(profiles, update_cpu, args.profile)
    return {
        "pools": args.pools,
        "running_operations": args.operations,
        "arrivals": args.arrivals,
        "departures": args.departures,
        "steps": args.steps,
        "every": args.every,
        "update_cpu_s": {key: statistics.median(values) for key, values in update_cpu.items() if values},
        "step_cpu_s": {key: statistics.median(values) for key, values in step_cpu.items() if values},
        "periods": {key: len(values) for key, values in update_cpu.items()},
        "profiled": bool(profiles),
    }


def _print_profile_difference(
    profiles: dict[str, cProfile.Profile], update_cpu: dict[str, list[float]], top: int
) -> None:
    rows: dict[tuple[str, int, str], dict[str, float]] = {}
    for key, profile in profiles.items():
        count = max(1, len(update_cpu[key]))
        for (filename, line, name), (_, _, own, _, _) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
            rows.setdefault((Path(filename).name, line, name), {})[key] = own / count * 1e3
    ranked = sorted(rows.items(), key=lambda item: item[1].get("same", 0.0) - item[1].get("change", 0.0))
    print("own ms per update: change - same, change, same", file=sys.stderr)
    for (filename, line, name), own in ranked[:top]:
        change, same = own.get("change", 0.0), own.get("same", 0.0)
        print(f"{change - same:7.3f} {change:7.3f} {same:7.3f}  {filename}:{line} {name}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=1110)
    parser.add_argument("--operations", type=int, default=12_000, help="running operations")
    parser.add_argument("--arrivals", type=int, default=1)
    parser.add_argument("--departures", type=int, default=1)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=2, help="operations change before every k-th step")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", type=int, default=0, help="print the N most different functions")
    args = parser.parse_args()
    result = run(args)
    result["python"] = platform.python_version()
    result["load_average"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
