"""What the live heap costs the garbage collector beside heartbeats and starts, in one process; prints one JSON
object.

``bench/read_snapshot.py``'s shape (a ``SchedulerService`` not started, SQLite under a temporary directory,
``--nodes`` simulated nodes heartbeating every simulated second through the real wire format, ``--operations``
running vanilla operations of ``--jobs`` one-cpu jobs, ``--pending`` more queued in a pool of one running
operation, a fair-share update every simulated second) plus what the service's loop does beside them: the read
snapshot published once a simulated second when something changed, and ``--starts`` operations started per
simulated second into the queue (``bench/live_queue.py``'s mixed phase starts ~130 a second). The process's
collector runs under the service's policy (``pooltree.server.gc_tuning.GC``: settled after set-up, then the
survivors of every collection frozen, with ``POOLTREE_GC_TUNING=middle`` each middle and full one's, with
``full`` those of each full one at the next tick, ticks every 50 simulated ms); ``POOLTREE_GC_TUNING=0`` runs it
without.

Reported over ``--seconds`` simulated seconds after ``--warmup-seconds``: per generation the collections, their
total and longest pause (ms) and the objects they walked (with ``--count-walked``: their generations' sizes at the
start, counted outside the pause); the collector's share of the process's CPU; CPU per simulated second; the
policy's freezes; at the end, the objects frozen and how many of them a collection after ``gc.unfreeze()`` finds
unreachable (``frozen_garbage``: reference cycles the policy froze and would never have collected but for the
valve, whose vent this is; 0 is what the policy needs) and the vent's pause (``vent_ms``). Every figure is the same workload's, so two builds (or ``POOLTREE_GC_TUNING=1`` and ``full``)
compare on what the heap and the policy make the collector walk.

Usage: .venv/bin/python bench/gc_heap.py [--nodes 1000] [--operations 200] [--jobs 200] [--pending 3000]
       [--starts 100] [--seconds 10] [--warmup-seconds 4]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from read_snapshot import Cluster

from pooltree.gc_policy import POLICY
from pooltree.node import wire
from pooltree.server.gc_tuning import GC, tuning_enabled
from pooltree.server.heartbeats import decode_heartbeat

TICK = 0.05
"""Simulated seconds between two ticks of the service's loop (``service.LOOP_TICK``)."""


class Collections:
    """Per generation: collections, pause seconds, longest pause, objects walked (a ``gc.callbacks`` hook)."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        self.walked = [0, 0, 0]
        self.measuring = False
        self.count_walked = False
        self._began = 0.0

    def callback(self, phase: str, info: dict[str, Any]) -> None:
        generation = info["generation"]
        if phase == "start":
            if self.measuring and self.count_walked:
                self.walked[generation] += sum(len(gc.get_objects(g)) for g in range(generation + 1))
            self._began = time.perf_counter()
            return
        seconds = time.perf_counter() - self._began
        if self.measuring:
            self.counts[generation] += 1
            self.seconds[generation] += seconds
            self.longest[generation] = max(self.longest[generation], seconds)

    def figures(self, simulated: float) -> dict[str, Any]:
        return {
            f"generation_{g}": {
                "collections": self.counts[g],
                "total_ms": round(1000 * self.seconds[g], 1),
                "max_ms": round(1000 * self.longest[g], 2),
                "walked_per_collection": round(self.walked[g] / max(self.counts[g], 1)),
            }
            | {"ms_per_simulated_second": round(1000 * self.seconds[g] / simulated, 2)}
            for g in range(3)
        }


class Loaded(Cluster):
    """``read_snapshot.Cluster`` with starts into the queue and the service loop's publications and ticks."""

    def __init__(self, args: argparse.Namespace, tmp: str) -> None:
        super().__init__(args, tmp)
        room = (
            args.operations + args.pending + int(args.starts * (args.seconds + args.warmup_seconds + 4)) + 10
        )
        for pool in ("bench", "queue"):
            self.service.cypress.set(f"//sys/pool_trees/default/{pool}/@max_operation_count", room)
        self.next_start = 0.0
        self.next_tick = 0.0
        self.next_publish = 0.0
        self.started = 0

    def start_pending(self) -> None:
        spec = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1, "cpu_limit": 1}}}
        self.live.start_operation("vanilla", spec, "root", self.now)
        self.started += 1

    def run(self, seconds: float, measured: bool) -> None:
        until = self.now + seconds
        step = 1.0 / len(self.nodes)
        start_every = 1.0 / self.args.starts if self.args.starts > 0 else None
        publisher = self.live.snapshots
        while self.now < until:
            for node in self.nodes:
                self.now += step
                if self.now >= self.next_update:
                    self.live.update_fair_share("default", self.now)
                    self.next_update += 1.0
                if start_every is not None and self.now >= self.next_start:
                    self.start_pending()
                    self.next_start = self.now + start_every
                if self.now >= self.next_publish:
                    if publisher.changed_at is not None:
                        publisher.publish()
                    self.next_publish = self.now + 1.0
                if self.now >= self.next_tick:
                    GC.tick()
                    self.next_tick = self.now + TICK
                heartbeat = decode_heartbeat(node.body(self.now), self.reports)
                answer = wire.decode(wire.encode(self.live.process_heartbeat(heartbeat, self.now)))
                node.apply(answer, self.now)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--pending", type=int, default=3000)
    parser.add_argument(
        "--starts", type=float, default=100.0, help="operations started into the queue per second"
    )
    parser.add_argument("--node-cpu", type=float, default=16)
    parser.add_argument("--job-seconds", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup-seconds", type=float, default=4.0)
    parser.add_argument("--watch-pages", action="store_true")
    parser.add_argument(
        "--count-walked",
        action="store_true",
        help="count the objects each collection walks (a walk of its generations outside the pause: slower)",
    )
    return parser.parse_args()


def _frozen_garbage(tuned: bool) -> dict[str, Any]:
    """The garbage a full collection finds now (``young_garbage``), then the valve's vent (``GcTuning.vent``):
    what it finds among the objects the policy had frozen (``frozen_garbage``: cycles the policy would never have
    collected but for the valve, with their most common types), its pause (``vent_ms``: a full collection of every
    tracked object, every thread stopped; one more when it found garbage) and the frozen generation after it."""
    young = gc.collect()
    if not tuned:
        return {"young_garbage": young}
    record = GC.vent()
    return {
        "frozen_objects": record.frozen_before,
        "young_garbage": young,
        "frozen_garbage": record.vent.found,
        "frozen_garbage_kinds": dict(record.vent.kinds),
        "vent_ms": round(1000 * record.vent.seconds, 1),
        "frozen_after_vent": record.frozen_after,
    }


def main() -> None:
    args = _arguments()
    tuned = tuning_enabled()
    hook = Collections()
    hook.count_walked = args.count_walked
    with tempfile.TemporaryDirectory(prefix="pooltree-gc-heap-") as tmp:
        cluster = Loaded(args, tmp)
        cluster.run(2.0, measured=False)  # nodes registered
        cluster.start()
        GC.install()
        if tuned:
            GC.settle()  # as the service does after start-up
        gc.callbacks.append(hook.callback)
        cluster.run(args.warmup_seconds, measured=False)
        hook.measuring = True
        began_cpu, began = time.process_time(), time.perf_counter()
        cluster.run(args.seconds, measured=True)
        cpu, wall = time.process_time() - began_cpu, time.perf_counter() - began
        hook.measuring = False
        gc.callbacks.remove(hook.callback)
        paused = sum(hook.seconds)
        report = {
            "name": "gc_heap",
            "parameters": vars(args) | {"gc_tuning": tuned},
            "running_jobs": len(cluster.live.jobs),
            "operations_held": len(cluster.live.operations),
            "collections": hook.figures(args.seconds),
            "collector_ms_per_simulated_second": round(1000 * paused / args.seconds, 2),
            "collector_share_of_cpu": round(paused / cpu, 4) if cpu else None,
            "cpu_ms_per_simulated_second": round(1000 * cpu / args.seconds, 1),
            "wall_seconds": round(wall, 2),
            "policy_freezes": {
                "all": POLICY.freezes,
                "at_middle_collections": POLICY.middle_freezes,
                "at_young_collections": POLICY.young_freezes,
            },
        }
        report |= _frozen_garbage(tuned)
        GC.uninstall()
        cluster.service.store.close()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
