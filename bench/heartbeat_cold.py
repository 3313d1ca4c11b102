"""What the same heartbeat costs back to back and after a pause, in one process; prints one JSON object.

A live scheduler answers each node's heartbeat as it arrives: at 300 nodes heartbeating every second, one every
~3.3 ms, with the CPU doing other work (the drivers, other processes) or nothing between. ``heartbeat_profile.py``
processes heartbeats back to back. This bench processes the same heartbeats (``LiveScheduler.process_heartbeat``
with decoding and encoding, as ``heartbeat_profile`` counts them; ``--nodes`` simulated nodes of
``bench/live_nodes.py``, ``--operations`` of ``--jobs`` one-cpu jobs started after a quiet round) in rounds over
every node, alternating per round between each ``--gaps-ms`` value: G ms of sleeping (``sleep``) or of spinning
in a Python loop (``spin``) before each heartbeat. Reported per gap and way: the thread's CPU per heartbeat (median
and mean, ``time.thread_time``) and per started allocation, over ``--rounds`` rounds per phase (quiet: no operation;
loaded: the operations running). A cost that grows with the gap whether slept or spun is the machine's caches and
predictors being refilled, not a wake-up's cost.

Usage: .venv/bin/python bench/heartbeat_cold.py [--nodes 300] [--gaps-ms 0,1,3,10] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_common import machine
from sim_node import SimNode

from pooltree.config import parse_pool_trees
from pooltree.node import wire
from pooltree.server.heartbeats import RunningReports, decode_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--gaps-ms", default="0,1,3,10")
    parser.add_argument("--ways", default="sleep,spin")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warmup-rounds", type=int, default=12)
    args = parser.parse_args()
    gaps = [float(g) / 1000 for g in args.gaps_ms.split(",")]
    ways = [w for w in args.ways.split(",") if w in ("sleep", "spin")]
    with tempfile.TemporaryDirectory(prefix="pooltree-hb-cold-") as tmp:
        live = LiveScheduler(open_store(f"sqlite:///{Path(tmp) / 'db.sqlite'}"))
        pools = {
            "bench": {"max_operation_count": args.operations, "max_running_operation_count": args.operations}
        }
        live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": pools}}), "default", 0.0)
        nodes = [SimNode(f"n{i:05d}", 16, 64 * 2**30, 10.0, 0.5) for i in range(args.nodes)]
        reports = RunningReports()
        state = {"now": 1.0, "next_update": 1.0}

        def beat(node: SimNode, pause: Any, gap: float, out: list[tuple[int, int]] | None) -> None:
            state["now"] += 1.0 / len(nodes)  # the nodes heartbeat once per simulated second
            if state["now"] >= state["next_update"]:
                live.update_fair_share("default", state["now"])
                state["next_update"] += 1.0
            body = node.body(state["now"])
            if gap:
                pause(gap)
            began = time.thread_time_ns()
            answer = wire.encode(live.process_heartbeat(decode_heartbeat(body, reports), state["now"]))
            spent = time.thread_time_ns() - began
            started = node.apply(wire.decode(answer), state["now"])
            if out is not None:
                out.append((spent, started))

        def phase() -> list[dict[str, Any]]:
            samples: dict[tuple[float, str], list[tuple[int, int]]] = {(g, w): [] for g in gaps for w in ways}
            for _ in range(args.rounds):
                for gap in gaps:
                    for way in ways:
                        pause = time.sleep if way == "sleep" else _spin
                        for node in nodes:
                            beat(node, pause, gap, samples[(gap, way)])
            rows = []
            for (gap, way), out in samples.items():
                spent = [s for s, _ in out]
                started = sum(n for _, n in out)
                rows.append(
                    {
                        "gap_ms": gap * 1000,
                        "way": way,
                        "heartbeats": len(out),
                        "cpu_us_per_heartbeat_median": round(statistics.median(spent) / 1000, 1),
                        "cpu_us_per_heartbeat_mean": round(statistics.mean(spent) / 1000, 1),
                        "cpu_us_per_started_allocation": round(sum(spent) / 1000 / started, 1)
                        if started
                        else None,
                    }
                )
            return rows

        for node in nodes:
            beat(node, time.sleep, 0.0, None)
        quiet = phase()
        spec = {
            "pool": "bench",
            "tasks": {"main": {"command": "true", "job_count": args.jobs, "cpu_limit": 1}},
        }
        for _ in range(args.operations):
            live.start_operation("vanilla", spec, "root", state["now"])
        for _ in range(args.warmup_rounds):
            for node in nodes:
                beat(node, time.sleep, 0.0, None)
        loaded = phase()
    print(
        json.dumps(
            {
                "bench": "heartbeat_cold",
                "parameters": vars(args),
                "quiet": quiet,
                "loaded": loaded,
                "machine": machine(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
