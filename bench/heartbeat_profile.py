"""Profile ``LiveScheduler.process_heartbeat`` in one process; prints one JSON object (and a cProfile table on
stderr with ``--profile``).

The same shape as ``bench/live_nodes.py`` without HTTP: a ``LiveScheduler`` on a SQLite store under a temporary
directory, ``--operations`` vanilla operations of ``--jobs`` one-cpu jobs, ``--nodes`` simulated nodes of
``--node-cpu`` cpus heartbeating every ``--period`` simulated seconds through the wire module
(``pooltree.node.wire``: built and encoded by the simulated node, decoded by ``heartbeats.decode_heartbeat`` and
the answer encoded by ``wire.encode`` as the service does), jobs finishing ``--job-seconds`` x U[1 - jitter,
1 + jitter] after their start (``--job-jitter`` 0.5: jobs started together do not finish together, so the
measured window sees a steady turnover), fair-share updates every simulated second. Reported: heartbeats,
allocations started, the scheduler's CPU seconds (decoding, processing, encoding the answer; the simulated node's
own work is not counted) per heartbeat and per started allocation over ``--seconds`` simulated seconds (the first
``--warmup-seconds`` not counted), and the same for a quiet phase before any operation starts
(``--quiet-seconds``): what a heartbeat reporting nothing costs, and from it the marginal cost of a start. What the
HTTP stack costs is not in it (``live_nodes.py`` measures the whole). ``--shard-starts N``: the stages in N
in-process replicas (their CPU reported apart); ``--shard-processes N``: in N shard processes at the end of pipes
(``pooltree/shards/remote.py``; this process is the leader, its CPU the leader's; the shards' CPU is what their
passes report, split into bringing the replica forward and the stages; pipe bytes and messages per pass). Per
measured fair-share update, its longest hold of the scheduling lock (wall; on code whose lock does not count holds,
the whole update, which then is one hold): median and max; per measured heartbeat, its longest hold, apart for
the heartbeats that first published a stale tree (operations activated: ``--start-every`` N starts the operations
one per N heartbeats during the run, ``--max-running`` makes finished operations activate pending ones).
``--commit-batch N``: the job records of N heartbeats in one store transaction, their answers held until it is
stored, as the service's group commit stores the heartbeats its event loop processed while the last transaction
was written (1, the default: one transaction per heartbeat; ``live_nodes.py`` reports the service's figure,
``group_commit_submissions_per_batch``). ``decisions_sha256``: a digest of every answer's starts and stops (by
operation place and job index, ids being random), equal between two builds that decide alike. ``store_*``: the
loaded phase's job-record transactions (the group commit's writes of job rows, each one SQLite transaction), the
CPU they took per transaction and their share of the loaded heartbeats' CPU (the largest single part of a loaded
heartbeat: ``bench/RESULTS.md``); ``store_long_commit*``: the SQLite ``COMMIT``s of at least 10 ms in it (wall; a
checkpoint of the journal runs inside the commit that crosses ``wal_autocheckpoint``), their count, sum and longest.
``--gc service`` (the default): the collector runs as in the scheduler service (``pooltree/server/gc_tuning.py``:
the policy held after set-up, one settling collection, the survivors of every middle and full collection frozen;
``POOLTREE_GC_TUNING`` read as the service reads it); ``--gc plain``: the interpreter's defaults, nothing frozen
(every figure before session 34: full collections walking the whole heap, ~16% of a loaded heartbeat's CPU at
1,000 nodes). ``gc_cpu_seconds`` / ``gc_cpu_share`` / ``gc_collections``: the collections that ran inside the
counted work (their CPU is in ``cpu_seconds`` too), by generation. ``update_cpu_seconds`` /
``update_cpu_ms_per_update`` / ``update_cpu_us_per_started_allocation``: the phase's fair-share updates' CPU, apart
(not in ``cpu_seconds`` nor the marginal: live, the service runs them on threads of their own and ``live_nodes.py
--threads`` shows them).

Usage: .venv/bin/python bench/heartbeat_profile.py [--nodes 300] [--seconds 30] [--quiet-seconds 3] [--profile]
       [--profile-sort tottime] [--profile-lines 45] [--shard-starts N | --shard-processes N]
       [--max-running N] [--start-every N] [--commit-batch N]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import json
import multiprocessing as mp
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_node import SimNode

from pooltree.config import parse_pool_trees
from pooltree.node import wire
from pooltree.server.gc_tuning import GcTuning, tuning_enabled
from pooltree.server.heartbeats import RunningReports, decode_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store
from pooltree.shards.host import shard_of
from pooltree.shards.passes import serve_passes
from pooltree.shards.remote import ProcessShardStarts
from pooltree.shards.starts import ShardStarts


class Counted:
    """Heartbeats, starts and scheduler CPU seconds of one phase."""

    def __init__(self) -> None:
        self.heartbeats = 0
        self.started = 0
        self.cpu = 0.0
        self.gc_cpu = 0.0
        """CPU seconds of the collections that ran inside the phase's counted work (in ``cpu`` too)."""
        self.collections = [0, 0, 0]
        """Collections inside the counted work, by generation."""
        self.update_cpu = 0.0
        """CPU seconds of the phase's fair-share updates (not in ``cpu``: the service runs them on threads of their
        own, a cost per second that ``live_nodes.py``'s figures per start include)."""
        self.updates = 0
        """The phase's fair-share updates."""

    def figures(self) -> dict[str, Any]:
        return {
            "heartbeats": self.heartbeats,
            "started": self.started,
            "cpu_seconds": round(self.cpu, 3),
            "cpu_ms_per_heartbeat": round(1000 * self.cpu / max(self.heartbeats, 1), 4),
            "cpu_ms_per_started_allocation": round(1000 * self.cpu / self.started, 4)
            if self.started
            else None,
            "gc_cpu_seconds": round(self.gc_cpu, 3),
            "gc_cpu_share": round(self.gc_cpu / max(self.cpu, 1e-9), 3),
            "gc_collections": list(self.collections),
            "update_cpu_seconds": round(self.update_cpu, 3),
            "update_cpu_ms_per_update": round(1000 * self.update_cpu / self.updates, 3)
            if self.updates
            else None,
            "update_cpu_us_per_started_allocation": round(1e6 * self.update_cpu / self.started, 1)
            if self.started
            else None,
        }


class CollectionClock:
    """The collector's CPU inside counted work: a ``gc.callbacks`` hook that adds each collection's process CPU
    and count to the ``Counted`` phase set while its work runs (``counting``; None outside counted work)."""

    def __init__(self) -> None:
        self.counting: Counted | None = None
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        counted = self.counting
        if counted is None:
            return
        if phase == "start":
            self._began = time.process_time()
            return
        counted.gc_cpu += time.process_time() - self._began
        counted.collections[min(int(info.get("generation", 0)), 2)] += 1


def _hold_figures(holds: dict[str, list[float]]) -> dict[str, Any]:
    """Per cause, the measured heartbeats' count and their longest holds of the lock: median and max (ms)."""
    figures: dict[str, Any] = {}
    for cause, held in holds.items():
        if held:
            ordered = sorted(held)
            figures[f"heartbeat_{cause}_count"] = len(ordered)
            figures[f"heartbeat_{cause}_hold_ms_median"] = round(1000 * ordered[len(ordered) // 2], 3)
            figures[f"heartbeat_{cause}_hold_ms_max"] = round(1000 * ordered[-1], 2)
    return figures


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--node-cpu", type=float, default=16)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--job-seconds", type=float, default=10.0)
    parser.add_argument("--job-jitter", type=float, default=0.5)
    parser.add_argument(
        "--memory-meter",
        action="store_true",
        help="nodes report each running job's measured memory anew every heartbeat, as the node agent does "
        "(sim_node.SimNode.memory_meter)",
    )
    parser.add_argument(
        "--seconds", type=float, default=30.0, help="simulated seconds from the starts, the warm-up included"
    )
    parser.add_argument(
        "--warmup-seconds", type=float, default=12.0, help="the first of --seconds, not counted"
    )
    parser.add_argument("--quiet-seconds", type=float, default=3.0)
    parser.add_argument(
        "--max-running",
        type=int,
        default=0,
        help="the pool's max_running_operation_count (0: --operations, all run at once); fewer makes finished "
        "operations activate pending ones during the run (a stale tree, published by the next heartbeat)",
    )
    parser.add_argument(
        "--start-every",
        type=int,
        default=0,
        help="start the operations one per this many heartbeats from the loaded phase on (0: all at its start), "
        "as API starts arrive while nodes heartbeat",
    )
    parser.add_argument(
        "--commit-batch",
        type=int,
        default=1,
        help="heartbeats whose job records one store transaction holds, as the service's group commit batches "
        "the heartbeats processed while a transaction is written (live_nodes.py reports the live figure, "
        "group_commit_submissions_per_batch); 1: a transaction per heartbeat, each answered when stored",
    )
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--profile-sort", default="cumulative", help="pstats order of the table (e.g. tottime)"
    )
    parser.add_argument("--profile-lines", type=int, default=45)
    parser.add_argument("--profile-dump", default=None, help="also write the cProfile stats to this file")
    parser.add_argument(
        "--shard-starts",
        type=int,
        default=0,
        help="run every heartbeat's stages in this many in-process shard replicas (pooltree/shards/starts.py) "
        "and report the replicas' CPU apart from the leader's",
    )
    parser.add_argument(
        "--shard-processes",
        type=int,
        default=0,
        help="run every heartbeat's stages in this many shard processes (pooltree/shards/remote.py and "
        "passes.py: replicas in their processes, claims over pipes); the leader's CPU is this process's, the "
        "shards' is what their passes report",
    )
    parser.add_argument(
        "--gc",
        choices=("service", "plain"),
        default="service",
        help="service: the scheduler service's collector policy (pooltree/server/gc_tuning.py: held after "
        "set-up, one settling collection, survivors of every middle and full collection frozen), as live_nodes.py's "
        "scheduler runs; plain: the interpreter's default thresholds, nothing frozen (the figures before session 34)",
    )
    args = parser.parse_args()
    if not 0 <= args.warmup_seconds < args.seconds:
        parser.error("--warmup-seconds is the start of --seconds, not counted: it must be below --seconds")
    if args.shard_starts and args.shard_processes:
        parser.error("--shard-starts and --shard-processes are two forms of the same: choose one")
    if args.commit_batch < 1 or (args.commit_batch > 1 and (args.shard_starts or args.shard_processes)):
        parser.error("--commit-batch is a count from 1, without --shard-starts / --shard-processes")
    return args


class ProfiledCluster:
    """A ``LiveScheduler`` and its simulated nodes, driven heartbeat by heartbeat in one process, with the CPU
    of what the scheduler does counted per phase (``Counted``) and what it decided folded into a digest."""

    def __init__(self, args: argparse.Namespace, tmp: str, context: Any) -> None:
        self.args = args
        self.live = LiveScheduler(open_store(f"sqlite:///{Path(tmp) / 'db.sqlite'}"))
        running = args.max_running or args.operations
        pools = {"bench": {"max_operation_count": args.operations, "max_running_operation_count": running}}
        self.live.apply_pool_trees(
            parse_pool_trees({"default": {"config": {}, "pools": pools}}), "default", 0.0
        )
        self.processes: list[Any] = []
        """Shard processes started (``--shard-processes``), joined by ``close``."""
        self.remote: ProcessShardStarts | None = None
        self.shards: ShardStarts | None = (
            ShardStarts(self.live, args.shard_starts) if args.shard_starts else None
        )
        if args.shard_processes:
            self.shards = self.remote = ProcessShardStarts(self.live, args.shard_processes)
            for index in range(args.shard_processes):
                parent, child = context.Pipe(duplex=True)
                process = context.Process(target=serve_passes, args=(child,), daemon=True)
                process.start()
                child.close()
                self.processes.append(process)
                self.remote.attach(index, parent)
        self.spec = {
            "pool": "bench",
            "tasks": {"main": {"command": "true", "job_count": args.jobs, "cpu_limit": 1}},
        }
        self.nodes = [
            SimNode(
                f"n{i:05d}", args.node_cpu, 64 * 2**30, args.job_seconds, args.job_jitter, args.memory_meter
            )
            for i in range(args.nodes)
        ]
        self.profile = cProfile.Profile(
            time.process_time
        )  # CPU: a leader waiting on a shard's pipe costs none
        self.step = args.period / len(self.nodes)
        self.reports = RunningReports()  # as the service keeps one
        self.now = 1.0
        self.next_update = 1.0
        self.updates: list[float] = []
        """Per measured fair-share update: its longest hold of the lock, seconds."""
        self.holds: dict[str, list[float]] = {"plain": [], "stale_publish": []}
        """Per measured heartbeat, its longest hold of the lock, by whether it published a stale tree first."""
        self.to_start = 0
        """Operations to start one per ``--start-every`` heartbeats (from the loaded phase on)."""
        self.beats = 0
        self.waiting: list[tuple[SimNode, bytes, float]] = []
        """Answers not yet applied by their nodes: with ``--commit-batch`` N, the batch's records are stored first."""
        self.ticket = 0
        self.ordinals: dict[str, int] = {}
        """Operation id -> its place in the start order (ids are random; decisions are compared by places)."""
        self.jobs: dict[str, tuple[int, str, int]] = {}
        self.decisions = hashlib.sha256()
        self.quiet = Counted()
        self.loaded = Counted()
        self.store_writes = 0
        self.store_cpu = 0.0
        """Job-record transactions the group commit wrote, and their CPU seconds (``timed_write``)."""
        self.live.commits._write = self.timed_write(self.live.commits._write)
        self.collections = CollectionClock()
        self.gc_tuning: GcTuning | None = None
        """The service's collector policy, held from here to ``close`` (``--gc service``)."""
        if args.gc == "service" and tuning_enabled():  # as the service's start-up: hold the policy, settle
            self.gc_tuning = GcTuning()
            self.gc_tuning.install()
            self.gc_tuning.settle()
        gc.callbacks.append(self.collections)

    def timed_write(self, write: Any) -> Any:
        """The group commit's write of job rows (one store transaction), its calls and CPU counted."""

        def timed(records: Any) -> None:
            began = time.process_time()
            try:
                write(records)
            finally:
                self.store_cpu += time.process_time() - began
                self.store_writes += 1

        return timed

    def start_operation(self) -> None:
        operation = self.live.start_operation("vanilla", self.spec, "root", self.now)
        self.ordinals[operation.id] = len(self.ordinals)

    def batched(self, heartbeat: Any, now: float) -> bytes:
        """A heartbeat as the service's event loop processes it: its records queued for the group commit, the
        answer held until the batch is stored (`settle`)."""
        live = self.live
        attempt = live.try_process_heartbeat(heartbeat, now)
        if attempt is None:  # a stale tree to publish first: the service sends it to a heartbeat thread
            return wire.encode(live.process_heartbeat(heartbeat, now))
        if not isinstance(attempt, tuple):
            attempt = attempt.finish()  # its reports made a tree stale: finished as on a heartbeat thread
        response, ticket = attempt
        self.ticket = max(self.ticket, ticket)
        return wire.encode(response)

    def note_decisions(self, address: str, at: float, answer: dict[str, Any]) -> None:
        """Fold what the answer decided into ``decisions`` (by operation place and job index, not random ids):
        two builds that decide alike print the same ``decisions_sha256``."""
        started = []
        for entry in answer.get(wire.START, ()):
            key = (
                self.ordinals.get(entry["operation_id"], -1),
                entry.get("task_name", ""),
                entry["job_index"],
            )
            self.jobs[entry["job_id"]] = key
            started.append(key)
        stopped = [(self.jobs.get(entry[0]), entry[1]) for entry in answer.get(wire.PREEMPT, ())] + [
            (self.jobs.get(entry["job_id"] if isinstance(entry, dict) else entry), "abort")
            for entry in answer.get(wire.ABORT, ())
        ]
        self.decisions.update(repr((address, round(at, 6), started, stopped)).encode())

    def settle(self, counted: Counted | None) -> None:
        """Store the held answers' records in one transaction (its CPU counted), then let the nodes apply them."""
        profiling = counted is not None and self.args.profile
        if self.ticket:
            began = time.process_time()
            if profiling:
                self.profile.enable()
            self.collections.counting = counted
            self.live.commits.wait(self.ticket)
            self.collections.counting = None
            if profiling:
                self.profile.disable()
            if counted is not None:
                counted.cpu += time.process_time() - began
            self.ticket = 0
        for node, answer, at in self.waiting:
            decoded = wire.decode(answer)
            self.note_decisions(node.address, at, decoded)
            started = node.apply(decoded, at)
            if counted is not None:
                counted.started += started
        self.waiting.clear()

    def update_fair_share(self, now: float, counted: Counted | None) -> None:
        lock = self.live.lock
        longest = getattr(lock, "hold_max", None)
        if longest is not None:
            lock.hold_max = 0.0
        began, began_cpu = time.perf_counter(), time.process_time()
        self.live.update_fair_share("default", now)
        if counted is not None:  # a lock without hold figures (older code): the whole update
            counted.update_cpu += time.process_time() - began_cpu
            counted.updates += 1
            self.updates.append(time.perf_counter() - began if longest is None else lock.hold_max)
        self.next_update += 1.0

    def heartbeat(self, node: SimNode, now: float, counted: Counted | None) -> None:
        """One node's heartbeat through the scheduler, its CPU (decode, process, encode) counted."""
        args, live = self.args, self.live
        lock = live.lock
        self.beats += 1
        if self.to_start and args.start_every and self.beats % args.start_every == 0:
            self.start_operation()
            self.to_start -= 1
        body = node.body(now)
        published = live.updates.published_updates
        if hasattr(lock, "hold_max"):
            lock.hold_max = 0.0
        profiling = counted is not None and args.profile
        began = time.process_time()
        if profiling:
            self.profile.enable()
        self.collections.counting = counted
        heartbeat = decode_heartbeat(body, self.reports)
        if self.remote is not None:  # as through the node's shard (`NodeShards`)
            with self.remote.carrying(shard_of(node.address, args.shard_processes)):
                answer = wire.encode(live.process_heartbeat(heartbeat, now))
        elif args.commit_batch > 1:
            answer = self.batched(heartbeat, now)
        else:
            answer = wire.encode(live.process_heartbeat(heartbeat, now))
        self.collections.counting = None
        if profiling:
            self.profile.disable()
        spent = time.process_time() - began
        if counted is not None:
            counted.cpu += spent
            counted.heartbeats += 1
            if hasattr(lock, "hold_max") and counted is not self.quiet:
                cause = "stale_publish" if live.updates.published_updates != published else "plain"
                self.holds[cause].append(lock.hold_max)
        self.waiting.append((node, answer, now))
        if len(self.waiting) >= args.commit_batch:
            self.settle(counted)

    def run(self, until: float, counted: Counted | None) -> None:
        """Every node heartbeats once per period, fair share updated every simulated second, until ``until``."""
        now = self.now
        while now < until:
            for node in self.nodes:
                now += self.step
                if now >= self.next_update:
                    self.update_fair_share(now, counted)
                self.now = now
                self.heartbeat(node, now, counted)
        self.settle(counted)
        self.now = now

    def shard_marks(self) -> tuple[float, float, tuple[int, int, int]]:
        """The shards' counters before the measured phase: replicas' CPU, apply CPU, (granted, claimed, taken back)."""
        remote = self.remote
        shard_cpu = sum(self.shards.shard_cpu) if self.shards is not None else 0.0
        if remote is None:
            return shard_cpu, 0.0, (0, 0, 0)
        ways = (remote.granted_starts, remote.claims - remote.claims_refused, remote.grants_taken_back)
        return shard_cpu, sum(remote.shard_apply_cpu), ways

    def shard_figures(self, marks: tuple[float, float, tuple[int, int, int]]) -> dict[str, Any]:
        """The replicas' work, which shard processes would take off the leader."""
        shards, remote, loaded = self.shards, self.remote, self.loaded
        assert shards is not None
        shard_cpu_before, apply_before, ways_before = marks
        figures: dict[str, Any] = {}
        replicas = sum(shards.shard_cpu) - shard_cpu_before
        # in one process the replicas' CPU is in this process's; shard processes report theirs apart
        leader = loaded.cpu if remote is not None else loaded.cpu - replicas
        figures["shard_replicas_cpu_seconds"] = round(replicas, 3)
        figures["leader_cpu_ms_per_heartbeat"] = round(1000 * leader / max(loaded.heartbeats, 1), 4)
        if loaded.started:
            figures["leader_cpu_ms_per_started_allocation"] = round(1000 * leader / loaded.started, 4)
        figures["replica_copies"] = sum(
            r.copies for per_shard in shards.replicas for r in per_shard.values()
        ) + (remote.snapshots if remote is not None else 0)
        figures["shard_passes"] = shards.passes
        figures["proven_empty_passes"] = shards.proven_empty
        figures["leader_passes"] = shards.leader_passes
        if remote is not None:
            figures["refused_bookings"] = remote.dropped
            figures["shard_apply_cpu_seconds"] = round(sum(remote.shard_apply_cpu) - apply_before, 3)
            figures["pipe_bytes_sent_per_pass"] = round(remote.sent_bytes / max(remote.passes, 1))
            figures["pipe_bytes_received_per_pass"] = round(remote.received_bytes / max(remote.passes, 1))
            figures["pipe_messages_per_pass"] = round(remote.messages / max(remote.passes, 1), 2)
            granted = remote.granted_starts - ways_before[0]
            claimed = remote.claims - remote.claims_refused - ways_before[1]
            figures["shard_starts_granted"] = granted  # took an allocation granted ahead: no round trip
            figures["shard_starts_claimed"] = claimed
            figures["grants_taken_back"] = remote.grants_taken_back - ways_before[2]
            figures["shard_processes_alive"] = sum(
                1 for link in remote.links if link is not None and link.alive
            )
        return figures

    def measure(self) -> dict[str, Any]:
        """The quiet phase, the operations started, the warm-up, the loaded phase: the printed figures."""
        args = self.args
        self.run(1.0 + args.quiet_seconds, self.quiet)  # nodes registered, nothing to run
        if args.start_every:
            self.to_start = args.operations
        else:
            for _ in range(args.operations):
                self.start_operation()
        began = self.now
        self.run(began + args.warmup_seconds, None)
        marks = self.shard_marks()
        store_before = (self.store_writes, self.store_cpu)
        long_commits = getattr(self.live.store, "long_commits", None)
        long_before = (long_commits.count, long_commits.seconds) if long_commits is not None else (0, 0.0)
        loaded_wall = time.time()
        self.run(began + args.seconds, self.loaded)
        loaded, quiet = self.loaded, self.quiet
        figures = loaded.figures()
        writes, store_cpu = self.store_writes - store_before[0], self.store_cpu - store_before[1]
        figures["store_transactions"] = writes
        figures["store_cpu_ms_per_transaction"] = round(1000 * store_cpu / max(writes, 1), 4)
        figures["store_cpu_share"] = round(store_cpu / max(loaded.cpu, 1e-9), 3)
        if long_commits is not None:
            figures["store_long_commits"] = long_commits.count - long_before[0]
            figures["store_long_commit_ms_total"] = round(1000 * (long_commits.seconds - long_before[1]), 1)
            figures["store_long_commit_ms_max"] = round(
                1000 * max((stall[1] for stall in long_commits.since(loaded_wall)), default=0.0), 1
            )
        if self.shards is not None:
            figures.update(self.shard_figures(marks))
        if self.updates:
            ordered = sorted(self.updates)
            figures["fair_share_updates"] = len(ordered)
            figures["update_longest_hold_ms_median"] = round(1000 * ordered[len(ordered) // 2], 2)
            figures["update_longest_hold_ms_max"] = round(1000 * ordered[-1], 2)
        figures.update(_hold_figures(self.holds))
        if loaded.started:
            idle_cost = quiet.cpu / max(quiet.heartbeats, 1)
            figures["marginal_ms_per_started_allocation"] = round(
                1000 * (loaded.cpu - idle_cost * loaded.heartbeats) / loaded.started, 4
            )
        figures["decisions_sha256"] = self.decisions.hexdigest()[:16]
        return {
            "bench": "heartbeat_profile",
            "parameters": vars(args),
            "quiet": quiet.figures(),
            "loaded": figures,
        }

    def close(self) -> None:
        """Shard processes end as their pipes close with the leader's objects; else they are ended here. The
        collector's policy and hook are released."""
        if self.collections in gc.callbacks:
            gc.callbacks.remove(self.collections)
        if self.gc_tuning is not None:
            self.gc_tuning.uninstall()
            self.gc_tuning = None
        for process in self.processes:
            process.join(timeout=5.0)
            if process.is_alive():
                process.kill()


def main() -> None:
    args = _arguments()
    cluster: ProfiledCluster | None = None
    try:
        with tempfile.TemporaryDirectory(prefix="pooltree-hb-profile-") as tmp:
            cluster = ProfiledCluster(args, tmp, mp.get_context("spawn"))
            print(json.dumps(cluster.measure(), indent=2))
            if args.profile and args.profile_dump:
                cluster.profile.dump_stats(args.profile_dump)
            if args.profile:
                pstats.Stats(cluster.profile, stream=sys.stderr).sort_stats(args.profile_sort).print_stats(
                    args.profile_lines
                )
    finally:
        if cluster is not None:
            cluster.close()


if __name__ == "__main__":
    main()
