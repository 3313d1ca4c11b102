"""How long ``start_operation`` holds the scheduling lock, in process; prints one JSON object.

A ``LiveScheduler`` on a real SQLite store under a temporary directory, one tree with pool ``queue``
(``max_running_operation_count`` 0, so every start stays pending, as in ``live_queue.py``'s queue phase) holding
``--existing`` pending operations first; then ``--starts`` more starts, one after another on this thread. Reported
for the timed starts: the wall time and CPU per start, and the scheduling lock's holds meanwhile (count, total,
mean, longest; ``SchedulingLock`` keeps them), so the share of a start spent holding the lock, where every heartbeat
that needs the lock waits for it. No heartbeat runs: the figure is the start's own hold.

Usage: .venv/bin/python bench/start_hold.py [--existing 2000] [--starts 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pooltree.config import parse_pool_trees
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store

SPEC = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}
TREES = {
    "default": {
        "config": {},
        "pools": {"queue": {"max_running_operation_count": 0, "max_operation_count": 1_000_000}},
    }
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--existing", type=int, default=2000)
    parser.add_argument("--starts", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pooltree-start-hold-") as tmp:
        store = open_store(f"sqlite:///{Path(tmp) / 'db.sqlite'}")
        live = LiveScheduler(store)
        live.apply_pool_trees(parse_pool_trees(TREES), "default", 0.0)
        now = time.time()
        for _ in range(args.existing):
            live.start_operation("vanilla", SPEC, "alice", now)
        lock = live.lock
        holds, seconds, lock.hold_max = sum(lock.holds), lock.hold_seconds, 0.0
        wall, cpu = time.perf_counter(), time.thread_time()
        for _ in range(args.starts):
            live.start_operation("vanilla", SPEC, "alice", time.time())
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        held_count, held = sum(lock.holds) - holds, lock.hold_seconds - seconds
        report = {
            "name": "start_hold",
            "parameters": vars(args),
            "start_wall_ms": round(wall / args.starts * 1000, 4),
            "start_cpu_ms": round(cpu / args.starts * 1000, 4),
            "lock_holds_per_start": round(held_count / args.starts, 3),
            "lock_held_ms_per_start": round(held / args.starts * 1000, 4),
            "lock_hold_mean_ms": round(held / max(held_count, 1) * 1000, 4),
            "lock_hold_max_ms": round(lock.hold_max * 1000, 3),
            "held_share_of_start": round(held / wall, 3),
            "load": os.getloadavg(),
        }
        live.commits.close()
        store.close()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
