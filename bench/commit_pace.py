"""The group commit on a SQLite store at a live heartbeat pace: what its waiters wait, and its transactions'
lengths, with the store's checkpoints of its log wherever they run; prints one JSON object.

One process, no HTTP: ``LiveScheduler(store).commits`` (the scheduler's own wiring of the group commit to the
store) gets a submission every ``--interval`` ms from an event loop (a heartbeat's job records: ``--started``
new running jobs and ``--finished`` finished ones, bodies of ``--body`` bytes), each awaited on its own task as
the heartbeat loop awaits it (``wait_async``). ``--reads`` reads a second (``list_jobs`` of one operation, on
the store's reader connections, from a thread) hold the log's readers as API reads do. After ``--warmup``
submissions, ``--submissions`` are measured.

Reported: the waiters' wait (submit to return) p50 / p99 / max and how many waited 5 ms or more and 10 ms or
more; the transactions (the store's ``put_jobs``, timed around the call, on the group commit's thread): count,
p99, those of 5 ms or more and 10 ms or more (a ``COMMIT`` that ran SQLite's checkpoint is one of them); the
checkpoints the store ran after batches (``SqliteStore.checkpoints``, where it has them) and the long ones; the
log: its most frames seen after a transaction (the ``-shm`` index's ``mxFrame``) and the most not yet copied;
process CPU per submission.

Usage: .venv/bin/python bench/commit_pace.py [--interval 1] [--submissions 10000] [--warmup 1000]
       [--started 2] [--finished 1] [--body 300] [--reads 0] [--checkpoint-frames N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pooltree.server.live import LiveScheduler
from pooltree.server.store import JobRecord, open_store
from pooltree.server.store import sqlite as sqlite_store
from pooltree.server.store.sqlite import SqliteStore


def quantile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def log_frames(shm: Path) -> tuple[int, int]:
    """(the log's frames, frames already copied) from the ``-shm`` index header (host byte order)."""
    with shm.open("rb") as handle:
        head = handle.read(100)
    return struct.unpack_from("=I", head, 16)[0], struct.unpack_from("=I", head, 96)[0]


class Observed:
    """The store's ``put_jobs`` timed, with the log's frames after each call (on the group commit's thread)."""

    def __init__(self, write: Callable[[Sequence[JobRecord]], None], shm: Path) -> None:
        self._write = write
        self._shm = shm
        self.seconds: list[float] = []
        self.most_frames = 0
        self.most_pending = 0
        self.measuring = False

    def __call__(self, records: Sequence[JobRecord]) -> None:
        began = time.perf_counter()
        self._write(records)
        took = time.perf_counter() - began
        if self.measuring:
            self.seconds.append(took)
            frames, copied = log_frames(self._shm)
            self.most_frames = max(self.most_frames, frames)
            self.most_pending = max(self.most_pending, frames - copied)


def records_of(index: int, args: argparse.Namespace) -> list[JobRecord]:
    """A heartbeat's records: ``started`` new running jobs, ``finished`` jobs started earlier, completed."""
    body = {"pad": "x" * args.body}
    operation = f"op-{index % 200}"
    records = [
        JobRecord(
            operation, f"job-{index}-{k}", "running", f"node-{index % 1000}", float(index), None, None, body
        )
        for k in range(args.started)
    ]
    earlier = max(0, index - 5000)
    records += [
        JobRecord(f"op-{earlier % 200}", f"job-{earlier}-{k}", "completed", "n", 1.0, 2.0, None, body)
        for k in range(args.finished)
    ]
    return records


async def drive(live: LiveScheduler, args: argparse.Namespace, observed: Observed) -> dict[str, Any]:
    commits = live.commits
    waits: list[float] = []
    interval = args.interval / 1000
    total = args.warmup + args.submissions
    tasks: list[asyncio.Task[None]] = []

    async def heartbeat(index: int) -> None:
        began = time.perf_counter()
        ticket = commits.submit(records_of(index, args))
        await commits.wait_async(ticket)
        if index >= args.warmup:
            waits.append(time.perf_counter() - began)

    start = time.perf_counter()
    cpu = 0.0
    for index in range(total):
        if index == args.warmup:
            observed.measuring = True
            cpu = time.process_time()
            measured_from = time.perf_counter()
        tasks.append(asyncio.ensure_future(heartbeat(index)))
        delay = start + (index + 1) * interval - time.perf_counter()
        await asyncio.sleep(max(delay, 0))
    await asyncio.gather(*tasks)
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - measured_from
    return {
        "waits": waits,
        "cpu_ms_per_submission": round(1000 * cpu / args.submissions, 4),
        "wall_seconds": round(wall, 2),
    }


def reader(store: Any, rate: float, stop: threading.Event, counter: list[int]) -> None:
    while not stop.wait(1 / rate):
        store.list_jobs(f"op-{counter[0] % 200}")
        counter[0] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--interval", type=float, default=1.0, help="ms between submissions")
    parser.add_argument("--submissions", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=1_000)
    parser.add_argument("--started", type=int, default=2)
    parser.add_argument("--finished", type=int, default=1)
    parser.add_argument("--body", type=int, default=300)
    parser.add_argument("--reads", type=float, default=0.0, help="store reads a second beside the commits")
    parser.add_argument(
        "--checkpoint-frames", type=int, default=0, help="the store's CHECKPOINT_FRAMES instead of its own"
    )
    args = parser.parse_args()
    if args.checkpoint_frames:
        sqlite_store.CHECKPOINT_FRAMES = args.checkpoint_frames
    with tempfile.TemporaryDirectory(prefix="pooltree-commit-pace-") as tmp:
        database = Path(tmp) / "scheduler.db"
        store = open_store(f"sqlite:///{database}")
        assert isinstance(store, SqliteStore)
        observed = Observed(store.put_jobs, database.with_name(database.name + "-shm"))
        store.put_jobs = observed  # type: ignore[method-assign]  # the group commit's writer, timed
        live = LiveScheduler(store)
        stop, reads = threading.Event(), [0]
        thread = None
        if args.reads > 0:
            thread = threading.Thread(target=reader, args=(store, args.reads, stop, reads), daemon=True)
            thread.start()
        long_before = store.long_commits.count
        try:
            figures = asyncio.run(drive(live, args, observed))
        finally:
            stop.set()
            if thread is not None:
                thread.join()
            live.commits.close()
        waits, batches = figures.pop("waits"), observed.seconds
        checkpoint_stalls = [s for s in store.long_commits.stalls if s[2].startswith("checkpoint")]
        wal = database.with_name(database.name + "-wal")
        result = {
            "args": vars(args),
            "pid": os.getpid(),
            "wait_ms": {
                "p50": round(1000 * statistics.median(waits), 3),
                "p99": round(1000 * quantile(waits, 0.99), 3),
                "max": round(1000 * max(waits), 3),
                "over_5ms": sum(w >= 0.005 for w in waits),
                "over_10ms": sum(w >= 0.010 for w in waits),
            },
            "transactions": {
                "count": len(batches),
                "p99_ms": round(1000 * quantile(batches, 0.99), 3),
                "over_5ms": sum(b >= 0.005 for b in batches),
                "over_10ms": sum(b >= 0.010 for b in batches),
                "max_ms": round(1000 * max(batches), 3),
            },
            "checkpoints_after_batches": getattr(store, "checkpoints", None),
            "checkpoint_failures": getattr(store, "checkpoint_failures", None),
            "long_checkpoints": len(checkpoint_stalls),
            "long_store_stalls": store.long_commits.count - long_before,
            "log_most_frames": observed.most_frames,
            "log_most_pending": observed.most_pending,
            "wal_bytes_at_end": wal.stat().st_size if wal.exists() else 0,
            "reads": reads[0],
            **figures,
        }
        store.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
