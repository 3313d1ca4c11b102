"""Profile ``LiveScheduler.process_heartbeat`` in one process; prints one JSON object (and a cProfile table on
stderr with ``--profile``).

The same shape as ``bench/live_nodes.py`` without HTTP: a ``LiveScheduler`` on a SQLite store under a temporary
directory, ``--operations`` vanilla operations of ``--jobs`` one-cpu jobs, ``--nodes`` simulated nodes of
``--node-cpu`` cpus heartbeating every ``--period`` simulated seconds through the wire module
(``pooltree.node.wire``: built, JSON-encoded and parsed as the service does), jobs finishing ``--job-seconds``
after their start, fair-share updates every simulated second. Reported: heartbeats, allocations started, the
process CPU seconds per heartbeat and per started allocation over ``--seconds`` simulated seconds (the first
``--warmup-seconds`` not counted). What the HTTP stack costs is not in it (``live_nodes.py`` measures the whole).

Usage: .venv/bin/python bench/heartbeat_profile.py [--nodes 300] [--seconds 30] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_nodes import SimNode

from pooltree.config import parse_pool_trees
from pooltree.node.wire import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--node-cpu", type=float, default=16)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--job-seconds", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup-seconds", type=float, default=12.0)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pooltree-hb-profile-") as tmp:
        live = LiveScheduler(open_store(f"sqlite:///{Path(tmp) / 'db.sqlite'}"))
        pools = {
            "bench": {"max_operation_count": args.operations, "max_running_operation_count": args.operations}
        }
        live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": pools}}), "default", 0.0)
        spec = {
            "pool": "bench",
            "tasks": {"main": {"command": "true", "job_count": args.jobs, "cpu_limit": 1}},
        }
        for _ in range(args.operations):
            live.start_operation("vanilla", spec, "root", 0.0)
        nodes = [SimNode(f"n{i:05d}", args.node_cpu, 64 * 2**30, args.job_seconds) for i in range(args.nodes)]
        profile = cProfile.Profile()
        counted = {"heartbeats": 0, "started": 0, "cpu": 0.0}
        step = args.period / len(nodes)
        now = 1.0
        next_update = now
        while now < args.seconds:
            measuring = now >= args.warmup_seconds
            for node in nodes:
                now += step
                if now >= next_update:
                    live.update_fair_share("default", now)
                    next_update += 1.0
                began = time.process_time()
                if measuring and args.profile:
                    profile.enable()
                heartbeat = parse_heartbeat(json.loads(node.body(now)))
                response = json.loads(json.dumps(live.process_heartbeat(heartbeat, now)))
                if measuring and args.profile:
                    profile.disable()
                started = node.apply(response, now)
                if measuring:
                    counted["cpu"] += time.process_time() - began
                    counted["heartbeats"] += 1
                    counted["started"] += started
        result = {
            "bench": "heartbeat_profile",
            "parameters": vars(args),
            "heartbeats": counted["heartbeats"],
            "started": counted["started"],
            "cpu_seconds": round(counted["cpu"], 3),
            "cpu_ms_per_heartbeat": round(1000 * counted["cpu"] / max(counted["heartbeats"], 1), 3),
            "cpu_ms_per_started_allocation": round(1000 * counted["cpu"] / max(counted["started"], 1), 3),
        }
        print(json.dumps(result, indent=2))
        if args.profile:
            pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(45)


if __name__ == "__main__":
    main()
