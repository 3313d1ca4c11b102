"""What a ``list_operations`` page costs computed in a process of its own beside a loaded scheduler; prints one JSON
object. A measurement for issue 25's "API reads served outside the scheduler's process": before building a reader
process, how long a listing takes there while the scheduler (and its clients and simulated nodes) load the machine.

It opens the scheduler's SQLite store (``--store``, the running scheduler's file; reads only), waits until it holds
``--wait-operations`` operations, then ``--delay`` seconds more (``live_queue.py``'s one-client mixed phase), and
then, for ``--seconds``, computes listings with pooltree's own ``OperationListing`` at ``--rate`` per second (open
loop, one thread, as one reader loop would): newest 100, ``state=pending``, and a page before a random start time,
in turn. Each listing's latency counts from its scheduled time (a late start is queueing); its CPU is the thread's.

The reader here has no live operations: every listed operation is briefed from its stored record (decoded from its
body). With ``--briefs kept`` (the default) each brief is encoded once and kept while its record's state is
unchanged, as a reader fed published briefs (with their change marks) would keep it; ``--briefs stored`` briefs
every listed record anew (an upper bound). The counters come from the operations stored when it started. HTTP
(parsing, the answer's write) is not included. ``--warmup`` listings run first, untimed.

Usage: .venv/bin/python bench/listing_apart.py --store PATH [--wait-operations 10000] [--delay 12]
       [--seconds 30] [--rate 170] [--briefs kept|stored] [--warmup 50]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pooltree.server.commands import CommandContext
from pooltree.server.live import LiveScheduler
from pooltree.server.operation_listing import OperationListing
from pooltree.server.store import OperationFilter, OperationRecord, open_store


class KeptBriefs(OperationListing):
    """A listing whose stored pending operations' briefs are kept while their record's state is unchanged (a
    reader fed published briefs keeps them by their change marks)."""

    def _fragment(
        self, record: OperationRecord, now: float, now_text: bytes, fmt: Any, fmt_key: str
    ) -> bytes:
        key = (record.id, fmt_key, record.state, record.finish_time)
        found = KEPT.get(key)
        if found is None:
            found = KEPT[key] = super()._fragment(record, now, now_text, fmt, fmt_key)
        return found


KEPT: dict[Any, bytes] = {}
"""Encoded briefs by (operation, output format, state, finish time)."""


def quantile_ms(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)


def request(index: int, rng: random.Random, starts: list[float]) -> CommandContext:
    """The ``index``-th listing: newest 100, ``state=pending`` or a page before a random start, in turn."""
    parameters: dict[str, Any] = {"limit": 100, "output_format": "json"}
    if index % 3 == 1:
        parameters["state"] = "pending"
    elif index % 3 == 2:
        parameters["cursor_time"] = rng.choice(starts)
    return CommandContext("list_operations", parameters, user="root")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--wait-operations", type=int, default=10_000)
    parser.add_argument("--delay", type=float, default=12.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=170.0)
    parser.add_argument("--briefs", choices=("kept", "stored"), default="kept")
    parser.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args()
    deadline = time.monotonic() + 900
    while not Path(args.store).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"no store at {args.store}")
        time.sleep(0.5)
    key = Path(args.store).with_name("store_key")  # ``pooltree local``'s: DATA/store_key
    store = open_store(f"sqlite:///{args.store}", key_file=key if key.exists() else None)
    while store.count_operations(OperationFilter()) < args.wait_operations:
        if time.monotonic() > deadline:
            raise SystemExit("the store never held the operations waited for")
        time.sleep(0.5)
    time.sleep(args.delay)
    scheduler = LiveScheduler(store)
    listing = (KeptBriefs if args.briefs == "kept" else OperationListing)(scheduler, time.time)
    starts = [record.start_time for record in store.list_operations(OperationFilter(limit=1000))]
    rng = random.Random(7)
    for index in range(args.warmup):
        listing.list_operations_encoded(request(index, rng, starts))
    latencies: list[float] = []
    cpu: list[float] = []
    sizes: list[int] = []
    began = time.monotonic()
    load_before = os.getloadavg()
    interval = 1.0 / args.rate
    index = 0
    while True:
        scheduled = began + index * interval
        if scheduled - began > args.seconds:
            break
        now = time.monotonic()
        if scheduled > now:
            time.sleep(scheduled - now)
        ctx = request(index, rng, starts)
        cpu_began = time.thread_time()
        answer = listing.list_operations_encoded(ctx)
        cpu.append(time.thread_time() - cpu_began)
        latencies.append(time.monotonic() - scheduled)
        sizes.append(len(answer.data))
        index += 1
    report = {
        "name": "listing_apart",
        "parameters": vars(args),
        "listings": len(latencies),
        "latency_p50_ms": quantile_ms(latencies, 0.5),
        "latency_p99_ms": quantile_ms(latencies, 0.99),
        "latency_max_ms": round(max(latencies) * 1000, 2) if latencies else None,
        "cpu_ms_mean": round(sum(cpu) / len(cpu) * 1000, 3) if cpu else None,
        "cpu_p99_ms": quantile_ms(cpu, 0.99),
        "bytes_mean": round(sum(sizes) / len(sizes)) if sizes else None,
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }
    store.close()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
