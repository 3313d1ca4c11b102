"""Benchmark of one full fair-share update on a synthetic 3-level pool tree.

Prints ONE JSON object: parameters, median/min/max seconds per update over the runs, machine info.
``--scales`` runs 100/1,000, 1,000/10,000 and 5,000/50,000 pools/operations and prints them together,
with how the time grows with the number of elements (per step, and the exponent of a fitted power law).

The updates run on the same model objects, as the tree runtime hands them: the update reuses what it derived
from unchanged inputs (pooltree/fairshare/ARCHITECTURE.md, "Updates of the same tree"). ``--changed F``
gives a fraction F of the operations new usage before every update (what a simulator or live period sees);
``--fresh`` updates a deep copy every time (a new tree: nothing reused, the cost before issue 16's reuse).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pooltree.fairshare import (
    IntegralGuarantees,
    Operation,
    Pool,
    UpdateSettings,
    UpdateState,
    update_fair_share,
)
from pooltree.fairshare.functions import compiled_kernels_active, use_compiled_kernels
from pooltree.resources import vector

GIB = 1024.0**3


def build_tree(pools: int, operations: int, seed: int = 1) -> tuple[Pool, np.ndarray]:
    """A 3-level tree (root -> ~√-fanout levels) with mixed weights, guarantees, limits, FIFO and integral pools."""
    rng = np.random.default_rng(seed)
    nodes = max(1, pools // 10)
    total = vector(
        user_slots=nodes * 64, cpu=nodes * 64.0, gpu=nodes * 2, memory=nodes * 256 * GIB, network=nodes * 100
    )
    top_count = max(2, round(pools ** (1 / 3)))
    mid_count = max(2, round((pools / top_count) ** 0.5))
    leaf_per_mid = max(1, pools // (top_count * mid_count) - 1)
    all_leaf: list[Pool] = []
    top_pools: list[Pool] = []
    created = 0
    guarantee_budget = total[1] * 0.8
    for t in range(top_count):
        g = guarantee_budget / top_count
        top = Pool(
            f"t{t}",
            weight=float(rng.choice([1.0, 2.0, 3.0])),
            strong_guarantee_resources=vector(cpu=round(g, 2)),
            specified_guarantee_resources=frozenset({"cpu"}),
        )
        if t == 0:
            top.integral_guarantees = IntegralGuarantees(
                "burst",
                burst_guarantee_resources=vector(cpu=total[1] * 0.05),
                resource_flow=vector(cpu=total[1] * 0.01),
            )
            top.strong_guarantee_resources = vector()
            top.specified_guarantee_resources = frozenset()
        if t == 1:
            top.integral_guarantees = IntegralGuarantees("relaxed", resource_flow=vector(cpu=total[1] * 0.02))
            top.strong_guarantee_resources = vector()
            top.specified_guarantee_resources = frozenset()
        top_pools.append(top)
        created += 1
        for m in range(mid_count):
            mid = Pool(f"t{t}m{m}", weight=float(rng.choice([1.0, 1.0, 2.0])))
            if t > 1:
                mid.strong_guarantee_resources = vector(cpu=round(g / mid_count * 0.9, 2))
                mid.specified_guarantee_resources = frozenset({"cpu"})
            if m % 4 == 1:
                mid.specified_resource_limits = vector(
                    cpu=total[1] * 0.2, memory=total[3] * 0.3, user_slots=np.inf, gpu=np.inf, network=np.inf
                )
            top.children.append(mid)
            created += 1
            for k in range(leaf_per_mid):
                leaf = Pool(f"t{t}m{m}l{k}", weight=float(rng.choice([0.5, 1.0, 2.0, 4.0])))
                if k % 7 == 3:
                    leaf.mode = "fifo"
                if k % 5 == 2:
                    leaf.max_share_ratio = 0.1
                mid.children.append(leaf)
                all_leaf.append(leaf)
                created += 1
    for i in range(operations):
        leaf = all_leaf[int(rng.integers(len(all_leaf)))]
        per_job = np.array(
            [
                1,
                rng.choice([1.0, 2.0, 4.0]),
                0.0 if rng.random() < 0.95 else 1.0,
                rng.choice([2.0, 4.0, 8.0]) * GIB,
                rng.choice([0.0, 1.0]),
            ]
        )
        jobs = int(rng.integers(1, 200))
        running = int(rng.integers(0, jobs + 1))
        leaf.children.append(
            Operation(
                f"op{i}",
                usage=per_job * running,
                demand=per_job * jobs,
                start_time=float(rng.integers(0, 10_000)),
                pending_allocation_count=jobs - running,
                weight=None if rng.random() < 0.8 else float(rng.choice([2.0, 5.0])),
                is_gang=rng.random() < 0.02,
            )
        )
    root = Pool("<Root>", children=top_pools)
    return root, total


def _operations(root: Pool) -> list[Operation]:
    found: list[Operation] = []
    stack: list[Any] = [root]
    while stack:
        element = stack.pop()
        if isinstance(element, Pool):
            stack.extend(element.children)
        else:
            found.append(element)
    return found


def run(
    pools: int,
    operations: int,
    runs: int,
    *,
    improved: bool = False,
    changed: float = 0.0,
    fresh: bool = False,
) -> dict:
    """``runs`` updates of one tree. The same model objects every time (the update reuses what it derived from
    unchanged inputs, as for the tree runtime's input cache); ``changed``: that fraction of the operations gets
    new usage before each update (new vectors, as the runtime writes them); ``fresh``: every update gets a deep
    copy of the tree (nothing to reuse: the cost of an update of a new tree)."""
    root, total = build_tree(pools, operations)
    settings = UpdateSettings(
        enable_step_function_for_gang_operations=True,
        enable_improved_fair_share_by_fit_factor_computation=improved,
    )
    state = UpdateState()
    times = []
    cpu_times = []
    now = 1000.0
    result = None
    rng = np.random.default_rng(7)
    ops = _operations(root)
    for _ in range(runs):
        written = []
        for k in rng.choice(len(ops), int(changed * len(ops)), replace=False).tolist():
            op = ops[k]
            op.usage = op.usage * float(rng.choice([0.5, 1.0]))
            written.append(op)
        tree = copy.deepcopy(root) if fresh else root
        if result is not None and not fresh:  # the caller's delta: these written, no children list replaced
            state = dataclasses.replace(state, written=written, relaid=frozenset())
        start = time.perf_counter()
        cpu_start = time.process_time()
        result = update_fair_share(tree, total, settings, now, state)
        cpu_times.append(time.process_time() - cpu_start)
        times.append(time.perf_counter() - start)
        state = result.state
        now += 5.0
    assert result is not None
    root_fs = result.elements["<Root>"].fair_share
    return {
        "pools": pools,
        "operations": operations,
        "elements": len(result.elements),
        "runs": runs,
        "median_seconds": statistics.median(times),
        "min_seconds": min(times),
        "max_seconds": max(times),
        # CPU time of this process: on a shared machine wall time also counts other processes' slices.
        "median_cpu_seconds": statistics.median(cpu_times),
        "min_cpu_seconds": min(cpu_times),
        "root_fair_share": [round(float(v), 6) for v in root_fs],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--operations", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--scales", action="store_true", help="run 100/1k, 1k/10k and 5k/50k")
    parser.add_argument(
        "--numpy", action="store_true", help="run the numpy reference instead of the compiled function passes"
    )
    parser.add_argument(
        "--improved",
        action="store_true",
        help="with enable_improved_fair_share_by_fit_factor_computation (as YTsaurus's production GPU trees)",
    )
    parser.add_argument(
        "--changed",
        type=float,
        default=0.0,
        help="fraction of the operations whose usage changes before each update (default 0: nothing changes)",
    )
    parser.add_argument(
        "--fresh", action="store_true", help="a deep copy of the tree for every update (nothing to reuse)"
    )
    args = parser.parse_args()
    with use_compiled_kernels(not args.numpy):
        report(args)


def growth(results: list[dict]) -> dict:
    """How the median time grows with the number of elements: per step and as a fitted power law.

    ``exponent`` is the least-squares slope of log(time) over log(elements): 1.0 is linear growth.
    """
    steps = [
        {
            "from_elements": a["elements"],
            "to_elements": b["elements"],
            "elements_ratio": round(b["elements"] / a["elements"], 3),
            "time_ratio": round(b["median_seconds"] / a["median_seconds"], 3),
        }
        for a, b in pairwise(results)
    ]
    x = np.log([r["elements"] for r in results])
    y = np.log([r["median_seconds"] for r in results])
    exponent = float(np.polyfit(x, y, 1)[0]) if len(results) > 1 else float("nan")
    per_element = [round(r["median_seconds"] / r["elements"] * 1e6, 2) for r in results]
    return {"steps": steps, "exponent": round(exponent, 3), "median_microseconds_per_element": per_element}


def report(args: argparse.Namespace) -> None:
    machine = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        # Wall time on a shared machine depends on the others' load; CPU time much less.
        "load_average_before": [round(v, 2) for v in os.getloadavg()],
        # The compiled function passes (pooltree/fairshare/_kernels.c); False: the numpy reference ran.
        "compiled_kernels": compiled_kernels_active(),
    }
    if args.scales:
        results = [
            run(
                p,
                o,
                max(5, args.runs if p <= 1000 else 5),
                improved=args.improved,
                changed=args.changed,
                fresh=args.fresh,
            )
            for p, o in ((100, 1000), (1000, 10000), (5000, 50000))
        ]
        print(
            json.dumps(
                {
                    "name": "fair_share_update",
                    "scales": results,
                    "growth": growth(results),
                    "machine": machine,
                }
            )
        )
    else:
        out = run(
            args.pools,
            args.operations,
            max(5, args.runs),
            improved=args.improved,
            changed=args.changed,
            fresh=args.fresh,
        )
        print(
            json.dumps(
                {
                    "name": "fair_share_update",
                    "parameters": {
                        "pools": args.pools,
                        "operations": args.operations,
                        "runs": out["runs"],
                        "improved": args.improved,
                        "changed": args.changed,
                        "fresh": args.fresh,
                    },
                    **out,
                    "machine": machine,
                }
            )
        )


if __name__ == "__main__":
    main()
