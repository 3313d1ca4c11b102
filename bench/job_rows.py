"""What the store pays per job row as a function of rows per transaction; prints one JSON object.

The rows are the bench's own: a ``LiveScheduler`` on a SQLite store runs ``--nodes`` simulated nodes
(``sim_node.SimNode``, as ``heartbeat_profile.py``) with ``--operations`` vanilla operations of ``--jobs`` one-cpu
jobs for ``--seconds`` simulated seconds; every heartbeat's job records (what the group commit would store for it)
are kept in order. They are then written again, in the same order, into a fresh SQLite store
(``SqliteStore.put_jobs``, one transaction per call) in transactions of a fixed number of rows (``--rows``) and of
a fixed number of heartbeats (``--heartbeats``: what a group commit batching that many heartbeats writes), the
settings interleaved, ``--rounds`` times. Reported per setting: the median CPU (user and system apart) and wall time
per row and per transaction, and per heartbeat's rows. Also: bytes of the stored body and of the whole row by the
job's state (a started job's running record, a finished one's), and the CPU of building the rows
(``SqlStore._job_row``: the document's JSON) apart from writing them. ``write_calls_per_transaction``: the
write system calls per transaction (``/proc/self/io``; SQLite's journal writes each page as two). ``--log-heartbeats
N,...``: the same transactions as ``--heartbeats`` appended to a plain file instead (``replay_log``: one ``write`` a
transaction, no sync), what job rows kept outside SQLite's journal would pay before being folded into the table.
``--fold-rows N,...``: the first ``--heartbeats`` setting's transactions appended to a table without an index
(``replay_folded``: a rowid table in the same store, its tail pages shared by a transaction's rows) and folded into
the jobs table every N rows (one ``INSERT ... SELECT ... ON CONFLICT`` in the rows' order, then the appended rows
deleted, in one transaction): ``fold_cpu_us_per_row`` and the folds' wall times apart, what folding costs once the
rows were kept elsewhere (in a file of their own the appends are ``--log-heartbeats``'). Every SQLite replay runs
the store's checkpoint after each transaction, as the group commit's thread does (``checkpoint_journal``).

Usage: .venv/bin/python bench/job_rows.py [--nodes 300] [--seconds 25] [--rows 1,5,20,100]
       [--heartbeats 1,2,5,10] [--log-heartbeats 2] [--fold-rows 1024,4096] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_node import SimNode

from pooltree.config import parse_pool_trees
from pooltree.node import wire
from pooltree.server.heartbeats import RunningReports, decode_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import JobRecord, open_store
from pooltree.server.store.sql import SqlStore
from pooltree.server.store.sqlite import SqliteStore


def record_rows(args: argparse.Namespace, folder: Path) -> list[list[JobRecord]]:
    """Every heartbeat's job records, in order, from a run of the bench's scenario (operations started at 1 s)."""
    live = LiveScheduler(open_store(f"sqlite:///{folder / 'run.sqlite'}"))
    pools = {
        "bench": {"max_operation_count": args.operations, "max_running_operation_count": args.operations}
    }
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": pools}}), "default", 0.0)
    spec = {"pool": "bench", "tasks": {"main": {"command": "true", "job_count": args.jobs, "cpu_limit": 1}}}
    nodes = [SimNode(f"n{i:05d}", 16, 64 * 2**30, 10.0, 0.5) for i in range(args.nodes)]
    batches: list[list[JobRecord]] = []
    write = live.commits._write

    def kept(records: Sequence[JobRecord]) -> None:
        batches.append(list(records))
        write(records)

    live.commits._write = kept
    reports = RunningReports()
    now, next_update, step = 1.0, 1.0, 1.0 / len(nodes)
    started = False
    while now < 1.0 + args.seconds:
        for node in nodes:
            now += step
            if now >= next_update:
                live.update_fair_share("default", now)
                next_update += 1.0
            if not started and now >= 2.0:
                for _ in range(args.operations):
                    live.start_operation("vanilla", spec, "root", now)
                started = True
            answer = wire.encode(live.process_heartbeat(decode_heartbeat(node.body(now), reports), now))
            node.apply(wire.decode(answer), now)
    live.store.close()
    return [batch for batch in batches if batch]


def _write_calls() -> int:
    """The process's write system calls so far (``/proc/self/io``'s ``syscw``; 0 where there is none)."""
    try:
        with open("/proc/self/io") as io:
            return next((int(line.split()[1]) for line in io if line.startswith("syscw:")), 0)
    except OSError:
        return 0


class Meter:
    """The CPU (user, system), wall seconds and write system calls of what runs between its making and
    ``figures``."""

    def __init__(self) -> None:
        self.calls, self.times, self.began = _write_calls(), os.times(), time.perf_counter()

    def figures(self) -> dict[str, float]:
        after, wall, calls = os.times(), time.perf_counter() - self.began, _write_calls() - self.calls
        return {
            "user": after.user - self.times.user,
            "system": after.system - self.times.system,
            "wall": wall,
            "writes": calls,
        }


def replay(transactions: list[list[JobRecord]], path: Path) -> dict[str, float]:
    """Write ``transactions`` into a fresh store at ``path``: CPU (user, system), wall seconds, write calls."""
    store = open_store(f"sqlite:///{path}")
    assert isinstance(store, SqlStore)
    meter = Meter()
    for transaction in transactions:
        store.put_jobs(transaction)
        store.checkpoint_journal()  # as the group commit's thread does after a batch
    figures = meter.figures()
    store.close()
    _remove_store(path)
    return figures


def _remove_store(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", ".key"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


JOB_COLUMNS = "operation_id, id, state, address, start_time, finish_time, stderr_ref, body"
FOLD = (
    f"INSERT INTO jobs ({JOB_COLUMNS}) SELECT {JOB_COLUMNS} FROM appended WHERE true ORDER BY rowid"
    " ON CONFLICT (operation_id, id) DO UPDATE SET state = excluded.state, address = excluded.address,"
    " start_time = excluded.start_time, finish_time = excluded.finish_time, stderr_ref = excluded.stderr_ref,"
    " body = excluded.body"
)


def replay_folded(transactions: list[list[JobRecord]], path: Path, fold_rows: int) -> dict[str, Any]:
    """The rows appended to a table without an index in a fresh store (one transaction each, with the store's file
    check, its checkpoint after each), folded into the jobs table once ``fold_rows`` are appended: CPU (user,
    system, and the folds' own), wall seconds, write calls, the folds' wall times. Not a store: a measurement of
    what the folding costs, the rows read back by nobody but the check at the end."""
    store = open_store(f"sqlite:///{path}")
    assert isinstance(store, SqliteStore)
    connection = store._conn
    connection.execute(f"CREATE TABLE appended ({JOB_COLUMNS})")
    row = SqlStore._job_row
    pending, folds, fold_cpu = 0, [], 0.0

    def write(statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        with store._lock:
            cursor = connection.cursor()
            cursor.execute("BEGIN IMMEDIATE")
            for sql, args in statements:
                cursor.execute(sql, args)
            store._check_before_commit()
            cursor.execute("COMMIT")

    meter = Meter()
    for transaction in transactions:
        rows = [row(record) for record in transaction]
        values = ", ".join(["(" + ", ".join("?" * 8) + ")"] * len(rows))
        write([(f"INSERT INTO appended ({JOB_COLUMNS}) VALUES {values}", tuple(chain.from_iterable(rows)))])
        pending += len(rows)
        if pending >= fold_rows:
            began, cpu = time.perf_counter(), time.process_time()
            write([(FOLD, ()), ("DELETE FROM appended", ())])
            fold_cpu += time.process_time() - cpu
            folds.append(time.perf_counter() - began)
            pending = 0
        store.checkpoint_journal()
    figures = meter.figures()
    write([(FOLD, ()), ("DELETE FROM appended", ())])  # the rest, outside the measure: every row in the table
    stored = connection.execute("SELECT count(*) FROM jobs").fetchone()[0]
    store.close()
    _remove_store(path)
    return {**figures, "fold_cpu": fold_cpu, "folds": folds, "jobs": stored}


def replay_log(transactions: list[list[JobRecord]], path: Path) -> dict[str, float]:
    """The same rows (``SqlStore._job_row``, orjson lines) appended to a plain file, one ``os.write`` a transaction
    and no sync: what job rows kept outside SQLite's journal would pay per transaction before being folded into the
    table (the durability of SQLite's ``synchronous=NORMAL`` journal: a process crash loses nothing written, a
    power loss may lose the last). Not a store: nothing reads it back."""
    row = SqlStore._job_row
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    meter = Meter()
    try:
        for transaction in transactions:
            os.write(fd, b"".join(orjson.dumps(row(record)) + b"\n" for record in transaction))
        figures = meter.figures()
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return figures


def chunks(rows: list[JobRecord], size: int) -> list[list[JobRecord]]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def grouped(batches: list[list[JobRecord]], count: int) -> list[list[JobRecord]]:
    """``count`` heartbeats' records per transaction, a job's records in one collapsing to its last (as the group
    commit's queue does)."""
    found = []
    for i in range(0, len(batches), count):
        merged: dict[tuple[str, str], JobRecord] = {}
        for batch in batches[i : i + count]:
            for record in batch:
                merged[(record.operation_id, record.id)] = record
        found.append(list(merged.values()))
    return found


def sizes(batches: list[list[JobRecord]]) -> dict[str, Any]:
    """Bytes of the body and of the whole row by state, and the CPU of building the rows."""
    by_state: dict[str, list[tuple[int, int]]] = defaultdict(list)
    rows = [record for batch in batches for record in batch]
    spent = 0.0
    for batch in batches:  # a batch at a time, as ``put_jobs`` builds them (no list of every row to collect)
        began = time.process_time()
        for record in batch:
            SqlStore._job_row(record)
        spent += time.process_time() - began
    for record in rows:
        row = SqlStore._job_row(record)
        whole = sum(len(value) if isinstance(value, str) else 8 for value in row if value is not None)
        by_state[record.state].append((len(row[-1]), whole))
    figures: dict[str, Any] = {"build_us_per_row": round(1e6 * spent / max(len(rows), 1), 2)}
    for state, pairs in sorted(by_state.items()):
        figures[state] = {
            "rows": len(pairs),
            "body_bytes_median": statistics.median(p[0] for p in pairs),
            "row_bytes_median": statistics.median(p[1] for p in pairs),
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--rows", default="1,5,20,100")
    parser.add_argument("--heartbeats", default="1,2,5,10")
    parser.add_argument("--log-heartbeats", default="")
    parser.add_argument("--fold-rows", default="")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pooltree-job-rows-") as tmp:
        folder = Path(tmp)
        batches = record_rows(args, folder)
        rows = [record for batch in batches for record in batch]
        settings: dict[str, list[list[JobRecord]]] = {}
        for size in (int(x) for x in args.rows.split(",") if x):
            settings[f"rows_{size}"] = chunks(rows, size)
        for count in (int(x) for x in args.heartbeats.split(",") if x):
            settings[f"heartbeats_{count}"] = grouped(batches, count)
        for count in (int(x) for x in args.log_heartbeats.split(",") if x):
            settings[f"log_heartbeats_{count}"] = grouped(batches, count)
        folded = [int(x) for x in args.fold_rows.split(",") if x]
        if folded:
            first = next((int(x) for x in args.heartbeats.split(",") if x), 1)
            for rows_per_fold in folded:
                settings[f"fold_{rows_per_fold}_heartbeats_{first}"] = grouped(batches, first)
        runs: dict[str, list[dict[str, float]]] = defaultdict(list)
        for round_index in range(args.rounds):
            order = list(settings) if round_index % 2 == 0 else list(reversed(settings))
            for name in order:
                path = folder / f"{name}.sqlite"
                if name.startswith("fold_"):
                    runs[name].append(replay_folded(settings[name], path, int(name.split("_")[1])))
                elif name.startswith("log_"):
                    runs[name].append(replay_log(settings[name], path))
                else:
                    runs[name].append(replay(settings[name], path))
        figures: dict[str, Any] = {}
        for name, transactions in settings.items():
            written = sum(len(t) for t in transactions)
            cpu = statistics.median(r["user"] + r["system"] for r in runs[name])
            figures[name] = {
                "transactions": len(transactions),
                "rows": written,
                "rows_per_transaction": round(written / len(transactions), 2),
                "cpu_us_per_row": round(1e6 * cpu / written, 2),
                "user_us_per_row": round(1e6 * statistics.median(r["user"] for r in runs[name]) / written, 2),
                "system_us_per_row": round(
                    1e6 * statistics.median(r["system"] for r in runs[name]) / written, 2
                ),
                "wall_us_per_row": round(1e6 * statistics.median(r["wall"] for r in runs[name]) / written, 2),
                "cpu_us_per_transaction": round(1e6 * cpu / len(transactions), 1),
                "write_calls_per_transaction": round(
                    statistics.median(r["writes"] for r in runs[name]) / len(transactions), 2
                ),
                "cpu_us_per_heartbeat": round(1e6 * cpu / len(batches), 1),
            }
            if name.startswith("fold_"):
                folds = [seconds for run in runs[name] for seconds in run["folds"]]
                figures[name].update(
                    {
                        "fold_cpu_us_per_row": round(
                            1e6 * statistics.median(r["fold_cpu"] for r in runs[name]) / written, 2
                        ),
                        "folds_per_run": len(runs[name][0]["folds"]),
                        "fold_ms_median": round(1e3 * statistics.median(folds), 1) if folds else None,
                        "fold_ms_max": round(1e3 * max(folds), 1) if folds else None,
                        "jobs_stored": runs[name][0]["jobs"],
                    }
                )
        result = {
            "bench": "job_rows",
            "parameters": vars(args),
            "heartbeats_with_rows": len(batches),
            "rows": len(rows),
            "rows_per_heartbeat": round(len(rows) / len(batches), 2),
            "sizes": sizes(batches),
            "settings": figures,
        }
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
