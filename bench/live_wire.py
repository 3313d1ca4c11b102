"""Where a live heartbeat's scheduler CPU goes, thread by thread; prints one JSON object.

``bench/live_nodes.py``'s setting (a real ``pooltree scheduler``, SQLite store, simulated nodes speaking the heartbeat
wire format from driver processes) measured from the outside, per thread of the scheduler's process, in three
windows: ``idle`` (``--idle-seconds``: the scheduler up, no node yet: what it spends per second whatever the
heartbeats), ``quiet`` (nodes heartbeating, no operation) and ``loaded`` (``--operations`` running). Per window and
per thread (named as Python names them, read with ``py-spy dump`` when py-spy is installed beside the interpreter,
else the kernel's ``comm``): user and system CPU (``/proc/PID/task/TID/stat``) and voluntary / involuntary context
switches (``.../status``), per answered heartbeat and per second; from ``/metrics`` at the window's ends: garbage
collections and their pause time by generation, fair-share updates and their time, group-commit transactions.
``--strace-seconds S`` then counts the process's system calls for S seconds after each window (``strace -f``;
strace slows the process, so its window is apart from the CPU's) per heartbeat answered meanwhile, in all and
by thread.

The driver's own CPU per heartbeat is reported beside (the drivers share the machine's cores with the scheduler).

Usage: .venv/bin/python bench/live_wire.py [--nodes 300] [--idle-seconds 10] [--quiet-seconds 10] [--seconds 10]
       [--warmup-seconds 5] [--strace-seconds 0]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_common import join_processes, machine
from live_nodes import (
    REQUEST_TIMEOUT,
    Scheduler,
    _phase,
    _start_operations,
    add_driver_arguments,
    start_node_drivers,
)
from phase_metrics import sample

TICKS = os.sysconf("SC_CLK_TCK")
GC_COUNT = 'pooltree_gc_pause_seconds_count{{generation="{}"}}'
GC_SUM = 'pooltree_gc_pause_seconds_sum{{generation="{}"}}'
UPDATE_COUNT = 'pooltree_scheduler_work_seconds_count{work="fair_share_update"}'
UPDATE_SUM = 'pooltree_scheduler_work_seconds_sum{work="fair_share_update"}'
COMMIT_BATCHES = "pooltree_scheduler_group_commit_batches_total"
STRACE_LINE = re.compile(r"^(\d+)\s+(\w+)\(")
"""A call's line of ``strace -f -o`` (its resumption, ``<... x resumed>``, is not a second call)."""


def thread_names(pid: int) -> dict[int, str]:
    """TID -> the Python thread's name (``py-spy dump``), empty when py-spy is not installed or fails."""
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        return {}
    try:
        text = subprocess.run(
            [spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {
        int(m.group(1)): m.group(2) for m in re.finditer(r'^Thread (\d+) \([^)]*\): "([^"]*)"', text, re.M)
    }


def threads(pid: int) -> dict[int, tuple[str, float, float, int, int]]:
    """TID -> (comm, user s, system s, voluntary, involuntary context switches) of the process's threads now."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            status = (task / "status").read_text()
            comm = (task / "comm").read_text().strip()
        except OSError:
            continue
        switches = dict(re.findall(r"^(\w+_ctxt_switches):\s+(\d+)", status, re.M))
        out[int(task.name)] = (
            comm,
            int(fields[11]) / TICKS,
            int(fields[12]) / TICKS,
            int(switches.get("voluntary_ctxt_switches", 0)),
            int(switches.get("nonvoluntary_ctxt_switches", 0)),
        )
    return out


def _kind(name: str) -> str:
    """A thread's name without its pool index (``heartbeat_3`` -> ``heartbeat``), so pools add up."""
    return re.sub(r"[_-]?\d+$", "", name) or name


def per_thread(
    before: dict[int, tuple[str, float, float, int, int]],
    after: dict[int, tuple[str, float, float, int, int]],
    names: dict[int, str],
    heartbeats: int,
    seconds: float,
) -> dict[str, dict[str, float]]:
    """Per thread kind: user / system CPU ms per heartbeat and per second, context switches per heartbeat."""
    kinds: dict[str, list[float]] = {}
    for tid, now in after.items():
        then = before.get(tid, (now[0], 0.0, 0.0, 0, 0))
        kind = _kind(names.get(tid, now[0]))
        row = kinds.setdefault(kind, [0.0, 0.0, 0, 0, 0])
        row[0] += now[1] - then[1]
        row[1] += now[2] - then[2]
        row[2] += now[3] - then[3]
        row[3] += now[4] - then[4]
        row[4] += 1
    per = max(heartbeats, 1)
    result = {}
    for kind, (user, system, voluntary, involuntary, count) in sorted(
        kinds.items(), key=lambda kv: -kv[1][0] - kv[1][1]
    ):
        if user + system == 0 and voluntary + involuntary == 0:
            continue
        result[kind] = {
            "threads": count,
            "cpu_ms_per_second": round(1000 * (user + system) / seconds, 2),
            "user_ms_per_heartbeat": round(1000 * user / per, 4),
            "system_ms_per_heartbeat": round(1000 * system / per, 4),
            "voluntary_switches_per_heartbeat": round(voluntary / per, 3),
            "involuntary_switches_per_heartbeat": round(involuntary / per, 3),
        }
    return result


def metric_deltas(before: str | None, after: str | None, heartbeats: int, seconds: float) -> dict[str, Any]:
    """Collections, fair-share updates and group-commit transactions in a window, from two ``/metrics`` texts."""
    if before is None or after is None:
        return {}

    def delta(name: str) -> float:
        return (sample(after, name) or 0.0) - (sample(before, name) or 0.0)

    figures: dict[str, Any] = {}
    for generation in (0, 1, 2):
        count, pause = delta(GC_COUNT.format(generation)), delta(GC_SUM.format(generation))
        figures[f"gc{generation}_per_second"] = round(count / seconds, 2)
        figures[f"gc{generation}_ms_per_second"] = round(1000 * pause / seconds, 3)
    updates, update_seconds = delta(UPDATE_COUNT), delta(UPDATE_SUM)
    figures["fair_share_updates_per_second"] = round(updates / seconds, 2)
    figures["fair_share_update_wall_ms_per_second"] = round(1000 * update_seconds / seconds, 2)
    batches = delta(COMMIT_BATCHES)
    figures["group_commit_batches_per_heartbeat"] = round(batches / max(heartbeats, 1), 3)
    return figures


def strace_counts(pid: int, seconds: float) -> tuple[dict[int, dict[str, int]], float, float]:
    """System calls of the process's threads over ``seconds`` (``strace -f``): (TID -> name -> count, begin,
    end)."""
    with tempfile.NamedTemporaryFile(prefix="live-wire-strace-", suffix=".txt", delete=False) as out:
        path = out.name
    try:
        process = subprocess.Popen(
            ["strace", "-f", "-qq", "-p", str(pid), "-o", path], stderr=subprocess.DEVNULL
        )
        begin = time.time()
        time.sleep(seconds)
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        end = time.time()
        counts: dict[int, dict[str, int]] = {}
        with open(path, errors="replace") as lines:
            for line in lines:
                match = STRACE_LINE.match(line)
                if match:
                    calls = counts.setdefault(int(match.group(1)), {})
                    calls[match.group(2)] = calls.get(match.group(2), 0) + 1
        return counts, begin, end
    finally:
        os.unlink(path)


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pooltree-live-wire-") as tmp:
        scheduler = Scheduler(Path(tmp), args.period)
        pid = scheduler.process.pid
        context = mp.get_context("spawn")
        end = context.Value("d", float("inf"))
        queue: Any = context.Queue()
        drivers: list[Any] = []
        windows: list[dict[str, Any]] = []
        straces: list[tuple[str, dict[int, dict[str, int]], float, float]] = []

        def measure(name: str, seconds: float) -> None:
            names = thread_names(pid)
            metrics_before = scheduler.metrics()
            begin, before = time.time(), threads(pid)
            time.sleep(seconds)
            after, finish = threads(pid), time.time()
            names.update({tid: name for tid, name in thread_names(pid).items()})
            windows.append(
                {
                    "name": name,
                    "window": (begin, finish),
                    "before": before,
                    "after": after,
                    "names": names,
                    "metrics": (metrics_before, scheduler.metrics()),
                }
            )
            if args.strace_seconds > 0 and shutil.which("strace"):
                straces.append((name, *strace_counts(pid, args.strace_seconds)))

        try:
            time.sleep(2.0)
            if args.idle_seconds > 0:
                measure("idle", args.idle_seconds)
            start_node_drivers(context, scheduler, args, end, queue, drivers)
            time.sleep(2 * args.period + 1.0)
            if args.quiet_seconds > 0:
                measure("quiet", args.quiet_seconds)
            _start_operations(scheduler.url, scheduler.token, args.operations, args.jobs)
            time.sleep(args.warmup_seconds)
            measure("loaded", args.seconds)
            end.value = time.time()
            results = [queue.get(timeout=REQUEST_TIMEOUT + 30) for _ in drivers]
        finally:
            end.value = min(end.value, time.time())
            join_processes(drivers, REQUEST_TIMEOUT + 10)
            scheduler.close()
    phases = []
    for window in windows:
        begin, finish = window["window"]
        seconds = finish - begin
        cpu = sum(row[1] + row[2] for row in window["after"].values()) - sum(
            row[1] + row[2] for row in window["before"].values()
        )
        figures = _phase(window["name"], results, window["window"], cpu, args)
        answered = figures["answered"]
        figures["driver_cpu_ms_per_heartbeat"] = (
            round(1000 * figures["driver_cpu_share"] * seconds / answered, 4) if answered else None
        )
        figures["threads"] = per_thread(window["before"], window["after"], window["names"], answered, seconds)
        figures.update(metric_deltas(*window["metrics"], answered, seconds))
        phases.append(figures)
    for name, counts, begin, finish in straces:
        answered = sum(1 for records, _ in results for r in records if begin <= r[1] < finish and r[2] == 200)
        per = max(answered, 1)
        window = next(w for w in windows if w["name"] == name)
        phase = next(p for p in phases if p["phase"] == name)
        totals: dict[str, int] = {}
        kinds: dict[str, dict[str, int]] = {}
        for tid, calls in counts.items():
            kind = kinds.setdefault(_kind(window["names"].get(tid, str(tid))), {})
            for call, count in calls.items():
                totals[call] = totals.get(call, 0) + count
                kind[call] = kind.get(call, 0) + count
        phase["strace_heartbeats"] = answered
        phase["syscalls_per_heartbeat_total"] = round(sum(totals.values()) / per, 2)
        phase["syscalls_per_heartbeat"] = {
            call: round(count / per, 3)
            for call, count in sorted(totals.items(), key=lambda kv: -kv[1])
            if count / per >= 0.01
        }
        phase["syscalls_per_heartbeat_by_thread"] = {
            kind: {
                call: round(count / per, 3) for call, count in sorted(calls.items(), key=lambda kv: -kv[1])
            }
            for kind, calls in kinds.items()
            if sum(calls.values()) / per >= 0.05
        }
    return {"phases": phases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--drivers", type=int, default=3)
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=200)
    add_driver_arguments(parser, job_seconds=10.0)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--quiet-seconds", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup-seconds", type=float, default=5.0)
    parser.add_argument("--strace-seconds", type=float, default=0.0)
    args = parser.parse_args()
    if min(args.nodes, args.drivers) < 1 or args.period <= 0 or args.seconds <= 0:
        parser.error("--nodes, --drivers, --period and --seconds must be positive")
    before = machine()
    result = {"bench": "live_wire", "parameters": vars(args), **run(args), "machine_before": before}
    result["machine_after"] = machine()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
