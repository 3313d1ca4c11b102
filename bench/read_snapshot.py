"""What the read snapshot costs: its capture per fair-share update under the scheduling lock, and what readers pay
off the lock; prints one JSON object.

The shape of ``bench/heartbeat_profile.py`` in one process: a ``SchedulerService`` (not started: this script runs
the fair-share updates and heartbeats) on a SQLite store under a temporary directory, ``--nodes`` simulated nodes
of ``--node-cpu`` cpus (``sim_node.SimNode``, the real wire format) heartbeating every simulated second,
``--operations`` running vanilla operations of ``--jobs`` one-cpu jobs, and ``--pending`` more waiting in a queue
pool of one running operation (``bench/live_queue.py``'s shape: thousands pending), a fair-share update every
simulated second. Over ``--seconds`` simulated seconds after ``--warmup-seconds``:

* ``capture_ms``: the thread CPU of each publication's capture (``ReadPublisher.capture_seconds``), per update, the
  median and max; ``update_ms``: the thread CPU of each ``update_fair_share`` call, the publication included;
  ``capture_share_of_update``: their ratio (medians).
* with ``--watch-pages``: the same with the pages' per-operation reads captured (a page open).
* ``reads_ms``: what the first reader of a snapshot pays off the lock (median over the updates): assembling the
  tree view, the orchid document, the whole orchid's JSON, the Scheduling page's rows, the Nodes page's rows.

Usage: .venv/bin/python bench/read_snapshot.py [--nodes 1000] [--operations 200] [--jobs 200] [--pending 0]
       [--seconds 10] [--warmup-seconds 5] [--watch-pages]
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

from sim_node import SimNode

from pooltree.node import wire
from pooltree.server.heartbeats import RunningReports, decode_heartbeat
from pooltree.server.orchid import orchid_document
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store
from pooltree.web.app import _node_rows, _scheduling


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--pending", type=int, default=0)
    parser.add_argument("--node-cpu", type=float, default=16)
    parser.add_argument("--job-seconds", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup-seconds", type=float, default=5.0)
    parser.add_argument("--watch-pages", action="store_true")
    return parser.parse_args()


def _median_ms(values: list[float]) -> float | None:
    return round(statistics.median(values) * 1000, 3) if values else None


def _max_ms(values: list[float]) -> float | None:
    return round(max(values) * 1000, 3) if values else None


class Cluster:
    """The service, its nodes and the simulated clock."""

    def __init__(self, args: argparse.Namespace, tmp: str) -> None:
        self.args = args
        self.service = SchedulerService(
            open_store(f"sqlite:///{Path(tmp) / 'db.sqlite'}"), authentication=False
        )
        cypress = self.service.cypress
        cypress.create("scheduler_pool_tree", "//sys/pool_trees/default")
        cypress.set("//sys/pool_trees/@default_tree", "default")
        big = args.operations + args.pending + 10
        cypress.create(
            "scheduler_pool",
            "//sys/pool_trees/default/bench",
            attributes={"max_operation_count": big, "max_running_operation_count": big},
        )
        cypress.create(
            "scheduler_pool",
            "//sys/pool_trees/default/queue",
            attributes={"max_operation_count": big, "max_running_operation_count": 1},
        )
        self.live = self.service.scheduler
        self.nodes = [
            SimNode(f"n{i:05d}", args.node_cpu, 64 * 2**30, args.job_seconds, 0.5) for i in range(args.nodes)
        ]
        self.reports = RunningReports()
        self.now = 1.0
        self.next_update = 1.0
        self.updates: list[tuple[float, float]] = []
        """Per measured update: (its thread CPU, its publications' capture CPU)."""
        self.reads: list[dict[str, float]] = []
        """Per measured update: what the first reader of its snapshot paid, per read."""

    def start(self) -> None:
        args = self.args
        for pool, count in (("bench", args.operations), ("queue", args.pending)):
            spec = {
                "pool": pool,
                "tasks": {"main": {"command": "true", "job_count": args.jobs, "cpu_limit": 1}},
            }
            for _ in range(count):
                self.live.start_operation("vanilla", spec, "root", self.now)

    def run(self, seconds: float, measured: bool) -> None:
        until = self.now + seconds
        step = 1.0 / len(self.nodes)
        publisher = self.live.snapshots
        while self.now < until:
            for node in self.nodes:
                self.now += step
                if self.now >= self.next_update:
                    if self.args.watch_pages:
                        publisher.watch_pages()
                    captured = publisher.capture_seconds
                    began = time.thread_time()
                    self.live.update_fair_share("default", self.now)
                    if measured:
                        self.updates.append(
                            (time.thread_time() - began, publisher.capture_seconds - captured)
                        )
                        self.reads.append(self.read_costs())
                    self.next_update += 1.0
                heartbeat = decode_heartbeat(node.body(self.now), self.reports)
                answer = wire.decode(wire.encode(self.live.process_heartbeat(heartbeat, self.now)))
                node.apply(answer, self.now)

    def read_costs(self) -> dict[str, float]:
        """What the first reader of the snapshot just published pays, off the lock (thread CPU seconds)."""
        snapshot = self.live.snapshots.current
        costs: dict[str, float] = {}

        def timed(name: str, work: Any) -> Any:
            began = time.thread_time()
            value = work()
            costs[name] = time.thread_time() - began
            return value

        timed("tree_view", lambda: [tree.view for tree in snapshot.trees.values()])
        document = timed("orchid_document", lambda: orchid_document(snapshot, "default"))
        timed("orchid_json", lambda: json.dumps(document, default=float))
        timed("scheduling_rows", lambda: _scheduling(snapshot, "default"))
        timed("nodes_rows", lambda: _node_rows(snapshot, ""))
        return costs


def main() -> None:
    args = _arguments()
    with tempfile.TemporaryDirectory(prefix="pooltree-read-snapshot-") as tmp:
        cluster = Cluster(args, tmp)
        cluster.run(2.0, measured=False)  # nodes registered
        cluster.start()
        cluster.run(args.warmup_seconds, measured=False)
        cluster.run(args.seconds, measured=True)
        live = cluster.live
        update_cpu = [u for u, _ in cluster.updates]
        capture_cpu = [c for _, c in cluster.updates]
        reads = {name: _median_ms([costs[name] for costs in cluster.reads]) for name in cluster.reads[0]}
        print(
            json.dumps(
                {
                    "nodes": args.nodes,
                    "operations": args.operations,
                    "pending": args.pending,
                    "watch_pages": args.watch_pages,
                    "running_jobs": len(live.jobs),
                    "updates": len(cluster.updates),
                    "update_ms": {"median": _median_ms(update_cpu), "max": _max_ms(update_cpu)},
                    "capture_ms": {"median": _median_ms(capture_cpu), "max": _max_ms(capture_cpu)},
                    "capture_share_of_update": round(
                        statistics.median(capture_cpu) / statistics.median(update_cpu), 3
                    )
                    if update_cpu
                    else None,
                    "reads_ms": reads,
                    "publications": live.snapshots.published,
                }
            )
        )
        cluster.service.store.close()


if __name__ == "__main__":
    main()
