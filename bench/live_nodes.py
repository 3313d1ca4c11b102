"""Benchmark a real scheduler holding many exec nodes; prints one JSON object.

Starts ``pooltree scheduler`` (a real process, SQLite store under a temporary directory, tree ``default``),
starts ``--operations`` (200) vanilla operations of ``--jobs`` (200) one-cpu jobs each through ``yt.wrapper``,
then simulates ``--nodes`` exec nodes speaking the real heartbeat wire format
(``pooltree.node.wire``, the module the node agent and the scheduler share) from ``--drivers`` driver processes
over plain asyncio keep-alive connections, so the driver is not what is measured. A simulated node has
``--node-cpu`` (16) cpus and user slots; its jobs "run" ``--job-seconds`` (10) x U[0.5, 1.5] (``--job-jitter``
0.5: jobs started together finish apart, as on a cluster) without processes and are then
reported completed until the scheduler acknowledges them; preempt and abort answers finish them as aborted.

Each node heartbeats on a fixed grid of ``--period`` (1 s) seconds from a random phase, as a node agent does:
one heartbeat in flight at a time, so when an answer comes late the grid's missed slots are offered and not
sent. Two phases over the same nodes:

* ``quiet`` (``--quiet-seconds``, 0 skips it): no operation yet; what a heartbeat that reports nothing costs.
* ``loaded``: the operations are started (while the nodes heartbeat), ``--warmup-seconds`` pass, then
  ``--seconds`` are measured.

Reported per phase: offered heartbeats/s (nodes / period), answered/s, heartbeat latency p50/p99 (send to whole
answer), allocations started/s (start entries answered), the scheduler's CPU seconds (psutil on the scheduler's
process and its children) per answered heartbeat and per started allocation, the scheduler's CPU share, and the
drivers' own CPU (seconds per second, summed over the driver processes). ``marginal_ms_per_started_allocation``:
(loaded CPU - quiet cost per heartbeat x loaded heartbeats) / started allocations. ``--repeat`` repeats the
whole run and reports the median of each figure. ``--shards 1,2,4`` runs the scheduler with each node shard
count (``--node-shards``) in every round, interleaved (``1s``, ``2s``: that many shard processes with
``--shard-starts``, which also run their nodes' scheduling passes); the simulated nodes follow the answers' ``heartbeat_url``
to their shard as the node agent does. The scheduler's CPU counts its child processes (the shards), and is also
reported split: the leader's and the shards' CPU per heartbeat and per started allocation, and heartbeats and
allocations started per scheduler CPU-second (leader and shards summed); ``answered_by_shards_share``: the share
of the phase's answers the shards gave themselves (heartbeats the leader proved empty,
``pooltree/shards/verdicts.py``); ``shard_starts_granted_share``: the share of the shard passes' starts that took
an allocation granted ahead with the pass's request instead of a claim's round trip (``pooltree/shards/remote.py``),
``grants_taken_back_per_start``: grants no start took, per start of the shard passes; ``proofs_per_heartbeat``:
proofs the leader made per answered heartbeat (builds with ``pooltree_node_shard_proofs_made``), and
``shard_answers_per_proof``: heartbeats the shards answered per proof made (a proof serves every equal heartbeat
of its node until the state generation moves). From ``/metrics`` read at a
phase's start and end: the fair-share updates in it and their mean wall time, and (builds that count the
scheduling lock's holds) the holds longer than 50 and 100 ms in it and the longest hold so far, and (builds that
compute the fair share outside the lock) the updates computed again because their tree changed meanwhile. Under
``tail`` (builds with ``GET /internal/heartbeat_tail``, ``bench/heartbeat_tail.py``): how many heartbeats took
over 50 ms at the drivers and in the scheduler, where the slow ones' time went by phase (queued, decode,
lock_wait, processing, commit, wake, answer; collections' pauses inside them), which stalls they overlapped
(lock holds by holder, group-commit transactions, store commits, collections, fair-share updates).

``--trace S``: the scheduler runs with ``POOLTREE_HEARTBEAT_TRACE=S`` (``pooltree/server/heartbeat_trace.py``);
per phase ``trace`` (``heartbeat_tail.trace_figures``) attributes its heartbeats of S seconds or more: phases, lock
waits by holder, collections, and their spans' loop CPU, other threads' CPU and time without a core.

``--threads``: per phase ``thread_cpu_seconds`` (each scheduler thread's user and system CPU, by Python thread name)
and, in the loaded phase, ``thread_marginal_us_per_start`` (``bench/thread_cpu.py``): which threads a loaded
heartbeat's CPU beyond the quiet one lands on (the heartbeat loop, the group commit, the fair-share update).

``--read-every S``: a reader beside the load (``read_probe.py``) reads the orchid and, apart, the web pages (the
Scheduling and Nodes fragments, the History page) every S seconds each; per phase ``reads`` has their p50/p99/max.

Usage: .venv/bin/python bench/live_nodes.py [--nodes 100] [--period 1] [--drivers 3] [--operations 200]
       [--jobs 200] [--seconds 15] [--warmup-seconds 5] [--quiet-seconds 5] [--repeat 1] [--shards 1,2]
       [--read-every 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from heartbeat_tail import read_tail, tail_figures, trace_figures
from live_common import (
    HttpConnection,
    join_processes,
    machine,
    quantile_ms,
    run_fast,
    start_drivers,
    stop_process,
    yt_client,
)
from phase_metrics import lock_figures
from read_probe import ReadProbe
from sim_node import SimNode
from thread_cpu import thread_figures, thread_names, thread_times

from pooltree.node import wire
from pooltree.node.service import backoff_delay

HEARTBEAT_PATH = "/internal/node_heartbeat"
NODE_SECRET_HEADER = "X-Pooltree-Node-Secret"
REQUEST_TIMEOUT = 60.0
POOL = "bench"
START_TIMEOUT = 120.0
METRICS_TIMEOUT = 10.0
GRANTED = 'pooltree_node_shard_starts_total{way="granted"'
CLAIMED = 'pooltree_node_shard_starts_total{way="claimed"'
TAKEN_BACK = "pooltree_node_shard_grants_taken_back_total "
PROOFS_MADE = "pooltree_node_shard_proofs_made_total "


# ------------------------------------------------------------------------------------------- simulated node


# ---------------------------------------------------------------------------------------------- drivers


def _driver(
    host: str, port: int, secret: str, addresses: list[str], options: dict[str, Any], end: Any, out: Any
) -> None:
    """One driver process: its nodes heartbeat until ``end`` (a shared time) passes; sends back every heartbeat
    as (sent, answered, status, allocations started) and samples of its own CPU as (time, CPU seconds)."""
    random.seed(addresses[0])
    nodes = [
        SimNode(
            a,
            options["node_cpu"],
            options["node_memory"],
            options["job_seconds"],
            options["job_jitter"],
            options["memory_meter"],
        )
        for a in addresses
    ]
    period = options["period"]
    records: list[tuple[float, float, int, int]] = []
    cpu: list[tuple[float, float]] = []
    jobs_log: list[tuple[str, str, float, str, int]] | None = [] if options.get("log_jobs") else None
    for node in nodes:
        node.jobs_log = jobs_log

    def head_for(target_port: int) -> bytes:
        return (
            f"POST {HEARTBEAT_PATH} HTTP/1.1\r\nHost: {host}:{target_port}\r\n"
            f"Content-Type: application/json\r\n{NODE_SECRET_HEADER}: {secret}\r\n"
        ).encode()

    async def run_node(node: SimNode) -> None:
        """As the node agent (``node/service.py``): connects at its first heartbeat and keeps its connection; a
        failed heartbeat (recorded with status 0) on its listener or shard goes back to the scheduler's port at
        once, one on the scheduler's port is tried again after the agent's backoff."""
        target = port
        connection: HttpConnection | None = None
        head = head_for(target)
        slot = time.time() + random.random() * period
        failures = 0
        try:
            while slot < end.value:
                await asyncio.sleep(max(0.0, slot - time.time()))
                sent = time.time()
                body = node.body(sent)
                try:
                    if connection is None:
                        connection = await HttpConnection.open(host, target)
                    status, data = await connection.request(
                        head + b"Content-Length: %d\r\n\r\n" % len(body) + body, REQUEST_TIMEOUT
                    )
                except (TimeoutError, OSError, ValueError):
                    records.append((sent, time.time(), 0, 0))
                    if connection is not None:
                        connection.close()
                        connection = None
                    if target != port:  # the listener or shard is gone: back to the scheduler's port
                        target, head = port, head_for(port)
                        slot = time.time()
                        continue
                    failures += 1
                    slot = time.time() + backoff_delay(failures)
                    continue
                failures = 0
                got = time.time()
                answer = wire.decode(data) if status == 200 else {}
                started = node.apply(answer, got)
                records.append((sent, got, status, started))
                shard = answer.get(wire.HEARTBEAT_URL)
                if shard is not None and int(shard.rsplit(":", 1)[1]) != target:
                    # the node's shard (scheduler --node-shards): the next heartbeats go there, as the agent's
                    target = int(shard.rsplit(":", 1)[1])
                    connection.close()
                    connection = None
                    head = head_for(target)
                slot += period
                while slot < got:  # the slots missed while the answer was late: offered, not sent
                    slot += period
        finally:
            if connection is not None:
                connection.close()

    async def sample_cpu() -> None:
        process = psutil.Process()
        while time.time() < end.value + 1.0:
            times = process.cpu_times()
            cpu.append((time.time(), times.user + times.system))
            await asyncio.sleep(0.25)

    async def main() -> None:
        out.put("ready")
        sampler = asyncio.ensure_future(sample_cpu())
        await asyncio.gather(*(run_node(node) for node in nodes), return_exceptions=True)
        await sampler

    run_fast(main())
    out.put((records, cpu) if jobs_log is None else (records, cpu, jobs_log))


# -------------------------------------------------------------------------------------------- scheduler


class Scheduler:
    """``pooltree scheduler`` in a child process on 127.0.0.1 with a SQLite store under ``data``."""

    def __init__(
        self, data: Path, period: float, extra: tuple[str, ...] = (), shards: int = 1, starts: bool = False
    ) -> None:
        argv = [
            sys.executable,
            "-m",
            "pooltree.cli",
            "scheduler",
            "--data",
            str(data),
            "--create-default-tree",
            "--heartbeat-period",
            str(period),
            "--node-heartbeat-timeout",
            "120",
            "--node-shards",
            str(shards),
            *(("--shard-starts",) if starts else ()),
            *extra,
        ]
        self.log = open(data / "scheduler.log", "wb")  # noqa: SIM115 (closed in close())
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log)
        self.shards = shards
        self.processes = shards > 1 or starts
        """Whether node shard processes run (``--node-shards`` above 1, or any count with ``--shard-starts``)."""
        found: list[str] = []

        def read() -> None:
            assert self.process.stdout is not None
            for raw in iter(self.process.stdout.readline, b""):
                line = raw.decode("utf-8", "replace").strip()
                if line.startswith("listening on ") and not found:
                    found.append(line.removeprefix("listening on "))

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT
        while not found and time.monotonic() < deadline and self.process.poll() is None:
            time.sleep(0.05)
        if not found:
            self.close()
            raise RuntimeError(f"pooltree scheduler did not start; see {data / 'scheduler.log'}")
        self.url = found[0]
        self.token = (data / "token").read_text().strip()
        self.secret = (data / "node_secret").read_text().strip()

    def cpu_seconds(self) -> float:
        """User + system CPU of the scheduler's process and its children (shards) so far."""
        return sum(self.cpu_by_process())

    def cpu_by_process(self) -> tuple[float, float]:
        """(the scheduler's own CPU seconds, its children's: the node shards and any forecast worker)."""
        own = children = 0.0
        try:
            root = psutil.Process(self.process.pid)
            times = root.cpu_times()
            own = times.user + times.system
            for process in root.children(recursive=True):
                try:
                    times = process.cpu_times()
                    children += times.user + times.system
                except psutil.Error:
                    continue
        except psutil.Error:
            pass
        return own, children

    def answered_by_shards(self) -> float | None:
        """Heartbeats the node shards answered themselves so far (``pooltree_node_shard_local_answers_total``, as
        far as the leader applied their notes; 0 on builds without the metric); None without shards or when the
        scheduler did not answer ``/metrics`` in time (the figure is then left out, the run goes on)."""
        return self.metric_sum("pooltree_node_shard_local_answers_total{")

    def metric_sum(self, prefix: str) -> float | None:
        """The sum of the scheduler's metric lines starting with ``prefix`` (0 when there are none); None without
        shard processes or when ``/metrics`` did not answer in time."""
        if not self.processes:
            return None
        text = self.metrics()
        if text is None:
            return None
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))

    def metrics(self) -> str | None:
        """The scheduler's ``/metrics`` text; None when it did not answer in time."""
        request = urllib.request.Request(
            self.url + "/metrics", headers={"Authorization": f"OAuth {self.token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=METRICS_TIMEOUT) as response:
                return response.read().decode("utf-8", "replace")
        except OSError:
            return None

    def close(self) -> None:
        stop_process(self.process)
        self.log.close()


def _start_operations(url: str, token: str, count: int, jobs: int) -> float:
    """Start ``count`` vanilla operations of ``jobs`` one-cpu jobs; returns the seconds it took."""
    from yt.wrapper.driver import make_formatted_request

    client = yt_client(url, token)
    client.create(
        "scheduler_pool",
        attributes={
            "name": POOL,
            "pool_tree": "default",
            "max_operation_count": max(count, 1),
            "max_running_operation_count": max(count, 1),
        },
    )
    spec = {"pool": POOL, "tasks": {"main": {"command": "true", "job_count": jobs, "cpu_limit": 1}}}
    began = time.perf_counter()
    for _ in range(count):
        make_formatted_request(
            "start_operation", {"operation_type": "vanilla", "spec": spec}, format=None, client=client
        )
    return time.perf_counter() - began


# ------------------------------------------------------------------------------------------------- run


def _cpu_between(samples: list[tuple[float, float]], begin: float, finish: float) -> float:
    """CPU seconds spent between two times, from (time, CPU so far) samples (the nearest samples inside)."""
    inside = [cpu for t, cpu in samples if begin <= t <= finish]
    return inside[-1] - inside[0] if len(inside) >= 2 else 0.0


def _records(
    drivers: list[tuple[list[tuple[float, float, int, int]], list[tuple[float, float]]]],
    window: tuple[float, float],
) -> list[tuple[float, float, int, int]]:
    """The heartbeats the drivers sent inside ``window``."""
    begin, finish = window
    return [r for records, _ in drivers for r in records if begin <= r[0] < finish]


def _phase(
    name: str,
    drivers: list[tuple[list[tuple[float, float, int, int]], list[tuple[float, float]]]],
    window: tuple[float, float],
    cpu: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """A phase's figures from the drivers' heartbeat records: answered (and allocations started) by answer
    time inside the window, latencies of heartbeats sent inside it."""
    begin, finish = window
    seconds = finish - begin
    records = [r for records, _ in drivers for r in records]
    answered = [r for r in records if begin <= r[1] < finish and r[2] == 200]
    latencies = [got - sent for sent, got, status, _ in records if begin <= sent < finish and status == 200]
    started = sum(r[3] for r in answered)
    driver_cpu = sum(_cpu_between(samples, begin, finish) for _, samples in drivers)
    count = len(answered)
    return {
        "phase": name,
        "seconds": round(seconds, 2),
        "offered_heartbeats_per_second": round(args.nodes / args.period, 1),
        "answered_heartbeats_per_second": round(count / seconds, 1),
        "errors": sum(1 for r in records if begin <= r[1] < finish and r[2] != 200),
        "heartbeat_p50_ms": quantile_ms(latencies, 0.5),
        "heartbeat_p99_ms": quantile_ms(latencies, 0.99),
        "allocations_started_per_second": round(started / seconds, 1),
        "scheduler_cpu_share": round(cpu / seconds, 3),
        "scheduler_cpu_ms_per_heartbeat": round(1000 * cpu / count, 3) if count else None,
        "scheduler_cpu_ms_per_started_allocation": round(1000 * cpu / started, 3) if started else None,
        "driver_cpu_share": round(driver_cpu / seconds, 3),
        "scheduler_cpu_seconds": round(cpu, 3),
        "answered": count,
        "started": started,
    }


def add_driver_arguments(parser: argparse.ArgumentParser, job_seconds: float) -> None:
    """The simulated nodes' options (``--node-cpu``, ``--node-memory-gib``, ``--job-seconds``, ``--job-jitter``),
    also ``bench/forecast_live.py``'s."""
    parser.add_argument("--node-cpu", type=float, default=16)
    parser.add_argument("--node-memory-gib", type=float, default=64)
    parser.add_argument("--job-seconds", type=float, default=job_seconds)
    parser.add_argument(
        "--job-jitter", type=float, default=0.5, help="each job lasts job-seconds x U[1 - jitter, 1 + jitter]"
    )
    parser.add_argument(
        "--memory-meter",
        action="store_true",
        help="nodes report each running job's measured memory anew every heartbeat, as the node agent does "
        "(SimNode.memory_meter); off: no measured memory, the same running entries every heartbeat",
    )


def driver_options(args: argparse.Namespace) -> dict[str, Any]:
    """What `_driver` reads of its options, from `add_driver_arguments`'s arguments."""
    return {
        "period": args.period,
        "node_cpu": float(args.node_cpu),
        "node_memory": float(args.node_memory_gib) * 2**30,
        "job_seconds": args.job_seconds,
        "job_jitter": args.job_jitter,
        "memory_meter": args.memory_meter,
    }


def start_node_drivers(
    context: Any,
    scheduler: Scheduler,
    args: argparse.Namespace,
    end: Any,
    queue: Any,
    started: list[Any],
    *,
    log_jobs: bool = False,
) -> None:
    """``args.drivers`` driver processes simulating ``args.nodes`` nodes against ``scheduler``
    (`live_common.start_drivers`; also ``bench/forecast_live.py``'s and ``bench/live_restart.py``'s, which keeps
    the nodes' job events: ``log_jobs``, each driver's result then ``(records, cpu, job events)``)."""
    addresses = [f"sim-node-{i:05d}" for i in range(args.nodes)]
    start_drivers(
        context,
        _driver,
        scheduler.url,
        scheduler.secret,
        addresses,
        args.drivers,
        {**driver_options(args), "log_jobs": log_jobs},
        end,
        queue,
        START_TIMEOUT,
        started,
    )


def run_once(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pooltree-live-nodes-") as tmp:
        count, starts = _shard_setting(args.shards_now)
        scheduler = Scheduler(Path(tmp), args.period, shards=count, starts=starts)
        context = mp.get_context("spawn")
        end = context.Value("d", float("inf"))
        queue: Any = context.Queue()
        drivers: list[Any] = []
        probe: ReadProbe | None = None
        try:
            start_node_drivers(context, scheduler, args, end, queue, drivers)
            time.sleep(2 * args.period + 1.0)  # every node registered by its first heartbeats
            if args.read_every > 0:
                probe = ReadProbe(
                    scheduler.url, scheduler.token, args.read_every, tuple(args.read_kinds.split(","))
                )
            windows: list[tuple[str, tuple[float, float], float]] = []

            split: dict[str, tuple[float, float]] = {}
            by_shards: dict[str, float] = {}
            ways: dict[str, tuple[float, float, float]] = {}
            made: dict[str, float] = {}

            holds: dict[str, dict[str, Any]] = {}
            tails: dict[str, tuple[Any, Any]] = {}
            threads: dict[str, tuple[Any, Any]] = {}  # --threads: each thread's CPU at the window's edges

            def measure(name: str, seconds: float) -> None:
                local = scheduler.answered_by_shards()
                granted = scheduler.metric_sum(GRANTED)
                claimed = scheduler.metric_sum(CLAIMED)
                back = scheduler.metric_sum(TAKEN_BACK)
                proofs = scheduler.metric_sum(PROOFS_MADE)
                metrics_before = scheduler.metrics()
                tail_before = read_tail(scheduler.url, scheduler.token, time.time())
                pid = scheduler.process.pid
                began_threads = thread_times(pid) if args.threads else {}
                begin, before = time.time(), scheduler.cpu_by_process()
                time.sleep(seconds)
                after = scheduler.cpu_by_process()
                if args.threads:
                    threads[name] = (began_threads, thread_times(pid))
                holds[name] = lock_figures(metrics_before, scheduler.metrics())
                tails[name] = (tail_before, read_tail(scheduler.url, scheduler.token, begin))
                now_local = scheduler.answered_by_shards()
                if local is not None and now_local is not None:
                    by_shards[name] = now_local - local
                now_granted, now_claimed = scheduler.metric_sum(GRANTED), scheduler.metric_sum(CLAIMED)
                now_back = scheduler.metric_sum(TAKEN_BACK)
                now_proofs = scheduler.metric_sum(PROOFS_MADE)
                if proofs is not None and now_proofs is not None:
                    made[name] = now_proofs - proofs
                if None not in (granted, claimed, back, now_granted, now_claimed, now_back):
                    ways[name] = (now_granted - granted, now_claimed - claimed, now_back - back)  # type: ignore[operator]
                split[name] = (after[0] - before[0], after[1] - before[1])
                windows.append((name, (begin, time.time()), sum(after) - sum(before)))

            if args.quiet_seconds > 0:
                measure("quiet", args.quiet_seconds)
            start_seconds = _start_operations(scheduler.url, scheduler.token, args.operations, args.jobs)
            time.sleep(args.warmup_seconds)
            measure("loaded", args.seconds)
            names = thread_names(scheduler.process.pid) if args.threads else {}  # outside the windows
            end.value = time.time()
            results = [queue.get(timeout=REQUEST_TIMEOUT + 30) for _ in drivers]
            phases = [_phase(name, results, window, cpu, args) for name, window, cpu in windows]
            quiet_threads: tuple[dict[str, list[float]], int] | None = None
            for phase, (_, window, _) in zip(phases, windows, strict=True):
                if probe is not None:
                    phase["reads"] = probe.figures(*window)
                phase["shards"] = args.shards_now
                phase.update(holds[phase["phase"]])
                sent_in = [r[1] - r[0] for r in _records(results, window) if r[2] == 200]
                phase["tail"] = tail_figures(*tails[phase["phase"]], window, sent_in)
                traced = trace_figures(tails[phase["phase"]][1], window)
                if traced:
                    phase["trace"] = traced
                if (
                    args.tail_dump
                ):  # the scheduler's whole report and the drivers' slow heartbeats, to read apart
                    _dump_tail(args.tail_dump, phase["phase"], tails[phase["phase"]][1], results, window)
                name = phase["phase"]
                _shard_figures(phase, split[name], by_shards.get(name), made.get(name), ways.get(name))
                if name in threads:
                    figures, spent = thread_figures(
                        threads[name], names, quiet_threads, phase["answered"], phase["started"]
                    )
                    phase.update(figures)
                    if name == "quiet":
                        quiet_threads = (spent, phase["answered"])
            if len(phases) == 2 and phases[0]["scheduler_cpu_ms_per_heartbeat"] and phases[1]["started"]:
                quiet_ms, loaded = phases[0]["scheduler_cpu_ms_per_heartbeat"], phases[1]
                loaded["marginal_ms_per_started_allocation"] = round(
                    (1000 * windows[1][2] - quiet_ms * loaded["answered"]) / loaded["started"], 3
                )
            return {"phases": phases, "start_operations_seconds": round(start_seconds, 2)}
        finally:
            end.value = min(end.value, time.time())
            if probe is not None:
                probe.close()
            join_processes(drivers, REQUEST_TIMEOUT + 10)
            scheduler.close()


def _dump_tail(
    path: str,
    name: str,
    report: dict[str, Any] | None,
    drivers: list[tuple[list[tuple[float, float, int, int]], list[tuple[float, float]]]],
    window: tuple[float, float],
) -> None:
    """``--tail-dump``: the phase's tail report and the drivers' heartbeats over 50 ms (sent, answered) as JSON."""
    slow = [(sent, got) for sent, got, status, _ in _records(drivers, window) if got - sent >= 0.05]
    Path(f"{path}.{name}.json").write_text(
        json.dumps({"window": window, "report": report, "driver_slow": slow})
    )


def _shard_figures(
    phase: dict[str, Any],
    split: tuple[float, float],
    by_shards: float | None,
    made: float | None,
    ways: tuple[float, float, float] | None,
) -> None:
    """A phase's figures of the leader and the shard processes: ``split`` is their CPU seconds, ``by_shards`` the
    heartbeats the shards answered, ``made`` the proofs the leader made, ``ways`` the shard passes' starts
    (granted, claimed, grants taken back)."""
    leader, shards = split
    answered = max(phase["answered"], 1)
    # notes reach the leader within 0.5 s: a share of the window's answers, not exact at its edges
    if by_shards is not None:
        phase["answered_by_shards_share"] = round(by_shards / answered, 3)
    if made is not None:  # proofs the leader made per answered heartbeat, and how many were used
        phase["proofs_per_heartbeat"] = round(made / answered, 3)
        if made and by_shards is not None:
            phase["shard_answers_per_proof"] = round(by_shards / made, 3)
    phase["leader_cpu_ms_per_heartbeat"] = round(1000 * leader / answered, 3)
    phase["shards_cpu_ms_per_heartbeat"] = round(1000 * shards / answered, 3)
    total = leader + shards
    phase["heartbeats_per_scheduler_cpu_second"] = round(phase["answered"] / total, 1) if total else None
    phase["allocations_started_per_scheduler_cpu_second"] = (
        round(phase["started"] / total, 1) if total else None
    )
    phase["leader_cpu_ms_per_started_allocation"] = (
        round(1000 * leader / phase["started"], 3) if phase["started"] else None
    )
    phase["shards_cpu_ms_per_started_allocation"] = (
        round(1000 * shards / phase["started"], 3) if phase["started"] else None
    )
    granted, claimed, back = ways or (0.0, 0.0, 0.0)
    if granted + claimed > 0:  # the shard passes' starts that took a grant (no round trip)
        phase["shard_starts_granted_share"] = round(granted / (granted + claimed), 3)
        # grants no start took (each a controller's choice made and undone by the leader)
        phase["grants_taken_back_per_start"] = round(back / (granted + claimed), 3)


def _shard_setting(text: str) -> tuple[int, bool]:
    """``--shards``' ``N`` or ``Ns``: (``--node-shards``, ``--shard-starts``)."""
    starts = text.endswith("s")
    return int(text.removesuffix("s")), starts


def _median_of(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per phase, the median of each numeric figure over the runs."""
    out = []
    for index, phase in enumerate(runs[0]["phases"]):
        merged: dict[str, Any] = {"phase": phase["phase"]}
        for key, value in phase.items():
            if key == "phase":
                continue
            merged[key] = _median_value([run["phases"][index].get(key) for run in runs], value)
        out.append(merged)
    return out


def _median_value(values: list[Any], first: Any) -> Any:
    """The median of the numbers among ``values``, per key for maps (the read probe's figures); else ``first``."""
    if isinstance(first, dict):
        return {
            key: _median_value([v.get(key) if isinstance(v, dict) else None for v in values], item)
            for key, item in first.items()
        }
    numbers = [v for v in values if isinstance(v, int | float)]
    return statistics.median(numbers) if numbers else first


def build_parser() -> argparse.ArgumentParser:
    """The bench's options (``bench/start_cost_fit.py`` runs `run_once` with them too)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--drivers", type=int, default=3)
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=200)
    add_driver_arguments(parser, job_seconds=10.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup-seconds", type=float, default=5.0)
    parser.add_argument("--quiet-seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--read-every",
        type=float,
        default=0.0,
        help="seconds between two orchid reads, and between two web page reads, beside the load "
        "(bench/read_probe.py; reported per phase under reads: p50/p99/max ms); 0: none",
    )
    parser.add_argument(
        "--read-kinds", default="orchid,page", help="what the reader reads: orchid, page or both"
    )
    parser.add_argument(
        "--tail-dump",
        default="",
        help="write each phase's heartbeat tail report (GET /internal/heartbeat_tail) and the drivers' heartbeats "
        "over 50 ms to PATH.<phase>.json",
    )
    parser.add_argument(
        "--trace",
        type=float,
        default=0.0,
        help="seconds: run the scheduler with POOLTREE_HEARTBEAT_TRACE (pooltree/server/heartbeat_trace.py) and "
        "report per phase under trace where its heartbeats that slow went (builds without it ignore it); 0: off",
    )
    parser.add_argument(
        "--threads",
        action="store_true",
        help="per phase, each scheduler thread's user and system CPU (/proc) by name (py-spy dump, when "
        "installed) and, loaded, its marginal microseconds per start (bench/thread_cpu.py)",
    )
    parser.add_argument(
        "--shards",
        default="1",
        help="node shard settings to run, e.g. 1,2,1s,2s: N is --node-shards N (1: no shard process), Ns adds "
        "--shard-starts (N shard processes that also run their nodes' scheduling passes); each round runs every one",
    )
    return parser


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The options' checks (a bad one ends the run with the parser's error); the ``--shards`` settings."""
    if min(args.nodes, args.drivers, args.repeat) < 1 or args.period <= 0 or args.seconds <= 0:
        parser.error("--nodes, --drivers, --repeat, --period and --seconds must be positive")
    if args.trace < 0:
        parser.error("--trace must be seconds, 0 or more")
    if args.trace > 0:  # the scheduler inherits the environment (the drivers ignore it)
        os.environ["POOLTREE_HEARTBEAT_TRACE"] = str(args.trace)
    if not args.read_kinds or set(args.read_kinds.split(",")) - {"orchid", "page"}:
        parser.error(f"--read-kinds must be orchid, page or orchid,page, got {args.read_kinds!r}")
    counts = [part.strip() for part in args.shards.split(",")]
    try:
        settings = [_shard_setting(part) for part in counts]
    except ValueError:
        parser.error(f"--shards must be settings like 1,2,2s separated by commas, got {args.shards!r}")
    if min(count for count, _ in settings) < 1:
        parser.error("--shards counts must be positive")
    return counts


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    counts = check_arguments(parser, args)
    before = machine()
    runs: dict[str, list[dict[str, Any]]] = {count: [] for count in counts}
    for _ in range(args.repeat):  # shard counts interleaved in each round: the same machine load for each
        for count in counts:
            args.shards_now = count
            runs[count].append(run_once(args))
    del args.shards_now
    result = {
        "bench": "live_nodes",
        "parameters": {key: value for key, value in vars(args).items()},
        "median": {str(count): _median_of(done) for count, done in runs.items()},
        "runs": {str(count): done for count, done in runs.items()},
        "machine_before": before,
        "machine_after": machine(),
        "pid": os.getpid(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
