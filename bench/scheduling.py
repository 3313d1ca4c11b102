"""Benchmark the strategy's heartbeat hot path; prints one JSON object.

Phase 1 (fill): NODES nodes, OPERATIONS map operations in POOLS pools; every node sends one heartbeat into an empty
cluster; allocations started per second of heartbeat processing.
Phase 2 (steady state with starving pools): STARVING_POOLS new pools with one operation each get fair share while
the cluster is full; after the starvation timeout every node heartbeats once with the preemptive stages due;
preemptive decisions (allocations started with preemption, and victims preempted) per second.
Rates are reported per second of wall-clock time (the targets) and per second of this process's CPU time (steadier
when other work shares the machine).

Usage: .venv/bin/python bench/scheduling.py [--nodes 5000] [--operations 10000] [--pools 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pooltree.controllers.operations import MapController, TaskSpec
from pooltree.resources import vector
from pooltree.strategy import (
    ROOT_ID,
    ElementSpec,
    HeartbeatResult,
    NodeHeartbeat,
    SchedulingTree,
    StrategyConfig,
    TreeScheduler,
)

GiB = 1024.0**3


def build(nodes: int, operations: int, pools: int, starving_pools: int):
    node_limits = vector(user_slots=16, cpu=16, memory=64 * GiB, network=100)
    total = node_limits * nodes
    per_op = np.array(
        [16 * nodes / operations / total[0]] * 2 + [0.0, 16 * nodes / operations / total[0], 0.0]
    )
    elements = [
        ElementSpec(id=f"pool-{p}", parent=ROOT_ID, fair_share=per_op * (operations // pools))
        for p in range(pools)
    ]
    controllers = {}
    for index in range(operations):
        op_id = f"op-{index}"
        pool = f"pool-{index % pools}"
        elements.append(
            ElementSpec(id=op_id, parent=pool, kind="operation", fair_share=per_op, start_time=index)
        )
        controllers[op_id] = MapController(
            op_id, [TaskSpec("map", 40, vector(user_slots=1, cpu=1, memory=2 * GiB))]
        )
    config = StrategyConfig()
    scheduler = TreeScheduler(SchedulingTree(total, elements, config))
    for op_id, controller in controllers.items():
        scheduler.register_operation(op_id, controller)
    scheduler.publish(SchedulingTree(total, elements, config), now=0.0)
    addresses = [f"node-{i:05d}" for i in range(nodes)]
    return scheduler, elements, total, node_limits, addresses, per_op, config


def phases(
    nodes: int, operations: int, pools: int, starving_pools: int
) -> Iterator[Iterator[HeartbeatResult]]:
    """The two benchmark phases, each a lazy stream of heartbeat results (setup runs before a phase is yielded).

    tests/strategy/test_golden_trace.py replays this at a small scale and compares every decision to a golden file.
    """
    scheduler, elements, total, node_limits, addresses, per_op, config = build(
        nodes, operations, pools, starving_pools
    )
    yield (scheduler.process_heartbeat(NodeHeartbeat(address, node_limits), 0.0) for address in addresses)

    # steady state: new pools get half the cluster's fair share, taken proportionally from everyone else
    scale = 0.5
    shrunk = []
    for element in elements:
        shrunk.append(ElementSpec(**{**element.__dict__, "fair_share": element.fair_share * scale}))
    hungry_share = per_op * (operations // pools) * (1.0 - scale) * pools / starving_pools
    for index in range(starving_pools):
        shrunk.append(ElementSpec(id=f"hungry-pool-{index}", parent=ROOT_ID, fair_share=hungry_share))
        shrunk.append(
            ElementSpec(
                id=f"hungry-{index}", parent=f"hungry-pool-{index}", kind="operation", fair_share=hungry_share
            )
        )
        scheduler.register_operation(
            f"hungry-{index}",
            MapController(
                f"hungry-{index}", [TaskSpec("map", 1000, vector(user_slots=1, cpu=2, memory=4 * GiB))]
            ),
        )
    tree = SchedulingTree(total, shrunk, config)
    scheduler.publish(tree, now=1.0)
    scheduler.publish(tree, now=100.0)  # past the starvation timeout
    yield (scheduler.process_heartbeat(NodeHeartbeat(address, node_limits), 100.0) for address in addresses)


def run_once(nodes: int, operations: int, pools: int, starving_pools: int) -> dict[str, float]:
    stream = phases(
        nodes, operations, pools, starving_pools
    )  # consume lazily: each phase's setup runs on next()
    started = 0
    fill = next(stream)
    begin, cpu_begin = time.perf_counter(), time.process_time()
    for result in fill:
        started += len(result.allocations_to_start)
    fill_seconds = time.perf_counter() - begin
    fill_cpu_seconds = time.process_time() - cpu_begin
    decisions = 0
    preemptive_heartbeats = 0
    steady = next(stream)
    begin, cpu_begin = time.perf_counter(), time.process_time()
    for result in steady:
        preemptive_heartbeats += result.preemptive_scheduling_performed
        decisions += len(result.allocations_to_preempt) + (result.scheduled_with_preemption is not None)
    steady_seconds = time.perf_counter() - begin
    steady_cpu_seconds = time.process_time() - cpu_begin
    return {
        "allocations_started": started,
        "fill_seconds": fill_seconds,
        "allocations_per_second": started / fill_seconds,
        "allocations_per_cpu_second": started / fill_cpu_seconds,
        "preemptive_decisions_per_cpu_second": decisions / steady_cpu_seconds,
        "preemptive_heartbeats": preemptive_heartbeats,
        "preemptive_decisions": decisions,
        "steady_seconds": steady_seconds,
        "preemptive_decisions_per_second": decisions / steady_seconds,
        "preemptive_heartbeats_per_second": preemptive_heartbeats / steady_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--operations", type=int, default=10000)
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--starving-pools", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = [
        run_once(args.nodes, args.operations, args.pools, args.starving_pools) for _ in range(args.repeat)
    ]

    def summary(key: str) -> dict[str, float]:
        values = [run[key] for run in runs]
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    print(
        json.dumps(
            {
                "name": "strategy_scheduling",
                "parameters": vars(args),
                "allocations_per_second": summary("allocations_per_second"),
                "preemptive_decisions_per_second": summary("preemptive_decisions_per_second"),
                "preemptive_heartbeats_per_second": summary("preemptive_heartbeats_per_second"),
                # CPU time of this process: less sensitive to other load on a shared machine
                "allocations_per_cpu_second": summary("allocations_per_cpu_second"),
                "preemptive_decisions_per_cpu_second": summary("preemptive_decisions_per_cpu_second"),
                "allocations_started": runs[0]["allocations_started"],
                "preemptive_decisions": runs[0]["preemptive_decisions"],
                "machine": {
                    "python": platform.python_version(),
                    "cpu_count": os.cpu_count(),
                    "platform": platform.platform(),
                },
            }
        )
    )


if __name__ == "__main__":
    main()
