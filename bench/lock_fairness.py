"""Heartbeats on an event loop beside starts on a thread, in process, with the scheduling lock's ``try_enter`` as it is
(it gives way while a thread waits in a blocking acquire) or without that rule; prints one JSON object.

A ``LiveScheduler`` on a real SQLite store (temporary directory), pool ``queue`` with ``max_running_operation_count``
0 (every start stays pending, as in ``live_queue.py``'s queue phase). ``--nodes`` simulated nodes heartbeat at
``--period`` on one asyncio loop the way the service's loop does (``try_process_heartbeat``; when the lock is busy,
park on ``SchedulingLock.released`` and try again; then wait for the group commit with ``wait_async``), while a
thread starts operations at ``--start-rate`` per second (open loop) for ``--seconds``. Reported: heartbeat latency
(from its scheduled time to its answer) p50/p99/max, heartbeats answered, how often ``try_enter`` gave way to a
waiting thread, and start latency p50/p99, for each ``--rules`` (``gives-way``: today's; ``plain``: ``try_enter``
takes a free lock even while a thread waits). Both rules run in this process, one after the other, per round.

Usage: .venv/bin/python bench/lock_fairness.py [--nodes 1000] [--period 1] [--start-rate 100] [--seconds 10]
       [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.live.jobs import DeferredHeartbeat
from pooltree.server.live.lock import SchedulingLock
from pooltree.server.store import open_store

SPEC = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}
TREES = {
    "default": {
        "config": {},
        "pools": {"queue": {"max_running_operation_count": 0, "max_operation_count": 1_000_000}},
    }
}
LIMITS = {"user_slots": 16, "cpu": 16, "memory": 64 << 30}


class Counted(SchedulingLock):
    """The scheduling lock with ``try_enter`` by ``rule``, counting the times it gave way to a waiting thread."""

    def __init__(self, rule: str) -> None:
        super().__init__()
        self.rule = rule
        self.gave_way = 0

    def try_enter(self) -> bool:
        if self.rule == "plain":
            if self.held:
                return False
            return self.acquire(blocking=False)
        if self._blocked and not self.held:
            self.gave_way += 1
        return super().try_enter()


def quantile_ms(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)


async def heartbeats(live: LiveScheduler, nodes: int, period: float, seconds: float) -> list[float]:
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    began = time.monotonic()
    requests = [
        parse_heartbeat({"node_address": f"n{index}", "resource_limits": LIMITS}) for index in range(nodes)
    ]

    async def beat(request: Any, scheduled: float) -> None:
        delay = scheduled - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        while True:
            if live.publishing:  # a stale tree to publish first: on a thread, as the service does
                await loop.run_in_executor(None, live.process_heartbeat, request, time.time())
                latencies.append(time.monotonic() - scheduled)
                return
            attempt = live.try_process_heartbeat(request, time.time())
            if attempt is not None:
                break
            released = live.lock.released(loop)
            attempt = live.try_process_heartbeat(request, time.time())
            if attempt is not None:
                break
            await released
        if isinstance(attempt, DeferredHeartbeat):
            attempt = await loop.run_in_executor(None, attempt.finish)
        await live.commits.wait_async(attempt[1])
        latencies.append(time.monotonic() - scheduled)

    tasks = []
    beats = int(seconds / period)
    for round_ in range(beats):
        for index, request in enumerate(requests):
            scheduled = began + round_ * period + index * period / nodes
            tasks.append(asyncio.ensure_future(beat(request, scheduled)))
        await asyncio.sleep(max(0.0, began + (round_ + 1) * period - time.monotonic()))
    await asyncio.gather(*tasks)
    return latencies


def run(rule: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pooltree-lock-fairness-") as tmp:
        store = open_store(f"sqlite:///{Path(tmp) / 'db.sqlite'}")
        live = LiveScheduler(store)
        live.lock = Counted(rule)
        live.apply_pool_trees(parse_pool_trees(TREES), "default", 0.0)
        for _ in range(args.existing):
            live.start_operation("vanilla", SPEC, "alice", time.time())
        starts: list[float] = []
        stop = threading.Event()

        def starter() -> None:
            began = time.monotonic()
            index = 0
            while not stop.is_set():
                scheduled = began + index / args.start_rate
                delay = scheduled - time.monotonic()
                if delay > 0 and stop.wait(delay):
                    return
                live.start_operation("vanilla", SPEC, "alice", time.time())
                starts.append(time.monotonic() - scheduled)
                index += 1

        thread = threading.Thread(target=starter)
        thread.start()
        try:
            latencies = asyncio.run(heartbeats(live, args.nodes, args.period, args.seconds))
        finally:
            stop.set()
            thread.join()
        live.commits.close()
        store.close()
    return {
        "rule": rule,
        "heartbeats": len(latencies),
        "heartbeat_p50_ms": quantile_ms(latencies, 0.5),
        "heartbeat_p99_ms": quantile_ms(latencies, 0.99),
        "heartbeat_max_ms": round(max(latencies) * 1000, 2),
        "gave_way": live.lock.gave_way if isinstance(live.lock, Counted) else None,
        "starts": len(starts),
        "start_p50_ms": quantile_ms(starts, 0.5),
        "start_p99_ms": quantile_ms(starts, 0.99),
        "load": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--start-rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--existing", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for round_ in range(args.rounds):
        order = ("gives-way", "plain") if round_ % 2 == 0 else ("plain", "gives-way")
        runs.extend(run(rule, args) for rule in order)
    medians = {
        rule: {
            key: statistics.median(r[key] for r in runs if r["rule"] == rule)
            for key in (
                "heartbeat_p50_ms",
                "heartbeat_p99_ms",
                "heartbeat_max_ms",
                "start_p50_ms",
                "start_p99_ms",
            )
        }
        for rule in ("gives-way", "plain")
    }
    print(
        json.dumps(
            {"name": "lock_fairness", "parameters": vars(args), "runs": runs, "medians": medians}, indent=2
        )
    )


if __name__ == "__main__":
    main()
