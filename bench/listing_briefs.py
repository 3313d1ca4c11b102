"""What one ``list_operations`` page costs in the scheduler's process, in CPU: a ``LiveScheduler`` over a SQLite store
holding ``--operations`` operations, of which ``--live`` still run (the others completed), listed through
``OperationListing.list_operations_encoded`` as the command answers it (HTTP not included): the newest 100, a
page before a start time in the middle, and ``state=completed``, in turn. Prints one JSON object: CPU ms per listing
(the median of ``--rounds`` rounds of ``--listings`` listings each, after ``--warmup`` untimed ones).

Session 27 (apiq): 1.247 -> 0.374 ms per listing with finished operations' records kept (bench/RESULTS.md).

Usage: .venv/bin/python bench/listing_briefs.py [--operations 3000] [--live 40] [--listings 300] [--rounds 3]
       [--warmup 30] [--store PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pooltree.config import parse_pool_trees
from pooltree.server.commands import CommandContext
from pooltree.server.live import LiveScheduler
from pooltree.server.operation_listing import OperationListing
from pooltree.server.store import open_store

SPEC = {"tasks": {"main": {"command": "sleep 600", "job_count": 2}}, "title": "listed"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--operations", type=int, default=3000)
    parser.add_argument("--live", type=int, default=40)
    parser.add_argument("--listings", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--store", default=None)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="listing-briefs-")
    store = open_store(args.store or f"sqlite:///{os.path.join(directory, 'store.db')}")
    live = LiveScheduler(store)
    trees = {"default": {"config": {"max_running_operation_count": 100_000}, "pools": {}}}
    live.apply_pool_trees(parse_pool_trees(trees), "default", 0.0)
    finished = args.operations - args.live
    for index in range(args.operations):
        op = live.start_operation("vanilla", SPEC, "alice", float(index))
        if index < finished:
            live.finish_operation(op.id, "completed", float(index) + 0.5)
    listing = OperationListing(live, lambda: float(args.operations + 1))
    middle = float(args.operations // 2)
    requests = [
        CommandContext("list_operations", {"limit": 100}, user="root"),
        CommandContext("list_operations", {"limit": 100, "cursor_time": middle}, user="root"),
        CommandContext("list_operations", {"limit": 100, "state": "completed"}, user="root"),
    ]
    size = 0
    for index in range(args.warmup):
        size = len(listing.list_operations_encoded(requests[index % 3]).data)
    rounds = []
    for _ in range(args.rounds):
        began = time.process_time()
        for index in range(args.listings):
            listing.list_operations_encoded(requests[index % 3])
        rounds.append((time.process_time() - began) * 1000 / args.listings)
    print(
        json.dumps(
            {
                "operations": args.operations,
                "live": args.live,
                "listings": args.listings,
                "cpu_ms_per_listing": round(statistics.median(rounds), 3),
                "rounds_ms": [round(value, 3) for value in rounds],
                "answer_bytes": size,
                "load": os.getloadavg()[0],
            }
        )
    )
    live.commits.close()
    store.close()


if __name__ == "__main__":
    main()
