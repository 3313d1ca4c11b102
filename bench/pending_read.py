"""CPU of a queued operation's ``get_operation`` read after each start into its pool, in process; prints one JSON
object.

A client that waits for its queued operation (``yt.wrapper``'s ``run_operation``) reads it again and again while
other starts move its queue ("position X of N"), so each of its reads meets a map whose queue numbers changed. Here a
``SchedulerService`` on SQLite (no HTTP) holds ``--operations`` (1,500) operations in pool ``queue``
(``max_running_operation_count`` 0); then ``--reads`` times: one more start (not timed), then ``--polled`` (20)
queued operations read through ``get_operation``'s event-loop path (``get_operation_fast``, plain JSON as
``yt.wrapper`` asks), each read timed in CPU time of its thread (``time.thread_time``: the machine's load does not
count). Reported: median and p90 microseconds per read; ``first_read_us``: the same for operations never read before
(the map built whole); ``round_ms``: CPU of the whole loop per round (the start, the polled reads and one first
read; a garbage collection counts wherever it falls, which a per-read median would move between kinds). Same
script for A and B (it uses only the service's public pieces).

Usage: .venv/bin/python bench/pending_read.py [--operations 1500] [--reads 300] [--polled 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from live_common import machine

from pooltree.server.commands import CommandContext
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

SPEC = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}


def _quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_us": round(statistics.median(ordered) * 1e6, 1),
        "p90_us": round(ordered[int(len(ordered) * 0.9)] * 1e6, 1),
        "reads": len(ordered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--operations", type=int, default=1500)
    parser.add_argument("--reads", type=int, default=300)
    parser.add_argument("--polled", type=int, default=20)
    args = parser.parse_args()
    report: dict[str, Any] = {"name": "pending_read", "parameters": vars(args), "machine_before": machine()}
    with tempfile.TemporaryDirectory(prefix="pooltree-pending-read-") as tmp:
        service = SchedulerService(open_store(f"sqlite:///{tmp}/db.sqlite"), create_default_tree=True)
        asyncio.run(service.start())
        try:
            service.cypress.create(
                "scheduler_pool",
                None,
                attributes={
                    "name": "queue",
                    "pool_tree": "default",
                    "max_running_operation_count": 0,
                    "max_operation_count": 1_000_000,
                },
            )
            scheduler, commands = service.scheduler, service.commands
            ops = [
                scheduler.start_operation("vanilla", SPEC, "root", time.time())
                for _ in range(args.operations)
            ]
            for tree in list(scheduler.cores):
                scheduler.update_fair_share(tree, time.time())
            step = max(1, len(ops) // args.polled)
            polled = [op.id for op in ops[::step][: args.polled]]
            unread = [op.id for op in ops if op.id not in set(polled)]

            def read(operation_id: str) -> float:
                ctx = CommandContext(
                    "get_operation", {"operation_id": operation_id}, user="root", headers={}, request_id="b"
                )
                began = time.thread_time()
                answer = commands.get_operation_fast(ctx)
                spent = time.thread_time() - began
                if answer is None:
                    raise RuntimeError("get_operation was not answered on its fast path")
                return spent

            for operation_id in polled:
                read(operation_id)
            after_start: list[float] = []
            first: list[float] = []
            began = time.thread_time()
            for index in range(args.reads):
                scheduler.start_operation("vanilla", SPEC, "root", time.time())
                after_start.extend(read(operation_id) for operation_id in polled)
                if index < len(unread):
                    first.append(read(unread[index]))
            report["round_ms"] = round((time.thread_time() - began) * 1000 / args.reads, 3)
            report["after_start_us"] = _quantiles(after_start)
            report["first_read_us"] = _quantiles(first)
        finally:
            asyncio.run(service.stop())
            service.store.close()
    report["machine_after"] = machine()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
