"""Benchmark the live scheduler with a long queue; prints one JSON object.

Starts ``pooltree local --nodes 1`` (real scheduler and node processes on 127.0.0.1, SQLite under a temporary
directory) and creates pool ``queue`` with ``max_running_operation_count`` 0, so every operation started into it
stays pending and the queue only grows. Two phases:

* ``queue``: ``--operations`` (10,000) vanilla operations started into ``queue`` by ``--clients`` (8) processes,
  each with its own ``yt.wrapper.YtClient`` sending ``start_operation`` (``run_operation(sync=False)`` would add
  three requests per start: ``get_operation`` and two ``get``s of ``//sys/@local_mode_*``). The clients together
  offer ``--rate`` starts per second (100: the 10,000 in 100 s; open loop, so a slow answer does not slow the
  offered load and hide itself); ``--rate 0`` sends back to back, which measures the closed-loop queueing of 8
  clients on the server's throughput instead. Reported: the median
  start latency of the first and of the last 1,000 starts (in the order they were sent), their ratio, the
  seconds until all were accepted, and how many fair-share updates the scheduler ran meanwhile (``/metrics``).
  Targets: last-1,000 median <= 1.5x the first-1,000 median and <= 20 ms; all accepted within 120 s.
* ``mixed``: over the cluster now holding those operations, ``--mixed-clients`` (50) concurrent clients for
  ``--mixed-seconds`` (30) each send requests back to back (``--mixed-rate R``: together at most R a second, so two
  fronts are compared at the same work): 60% ``get_operation`` (a random known operation),
  25% ``list_operations`` (newest 100; a third with ``state=pending``, a third paging with ``cursor_time``),
  15% ``start_operation`` (into ``queue``). The same mix runs first with one client. Reported per command:
  count, errors, 5xx, p50/p99; requests/s with 1 and with N clients. Targets: get_operation p99 <= 50 ms,
  list_operations p99 <= 200 ms, no 5xx, requests/s with N clients >= with 1.

The mixed phase's load generators are separate processes (``--load-processes``) replaying over plain asyncio
keep-alive connections the exact requests ``yt.wrapper`` sends (recorded from a real ``YtClient``,
``live_common.YtRequests``: same paths, headers, YSON parameters, token, formats, a new mutation id per start): on a
2-core machine yt.wrapper's own per-request CPU would otherwise be what is measured. They share the machine with
the scheduler: ``cpu`` reports, per mixed run, the scheduler process's CPU seconds per second and per request and
the load generators' CPU seconds per second, measured separately; ``machine`` reports the load average before and
after (the machine may be shared with other work).

``gc_after_queue`` / ``gc_at_end``: the scheduler's garbage collections so far (count, total and longest pause per
generation, objects frozen); ``POOLTREE_GC_TUNING=0`` in the environment runs the scheduler without the tuning
(``pooltree/server/gc_tuning.py``) for a back-to-back comparison.

``--sim-nodes N`` (0: none) adds N simulated exec nodes heartbeating every ``--sim-period`` (1 s) through both
phases, from ``--sim-drivers`` (3) driver processes of ``live_nodes.py`` (the real wire format; no job runs: the
queue's operations stay pending), so the API's figures are taken while the scheduler answers their heartbeats.
``heartbeats`` reports, per phase, their answered rate, errors and latency p50/p99, and the drivers' CPU.

``--probe-get-period S`` (0: none) has one probe send a Cypress ``get`` of ``//sys/pool_trees`` every S seconds through
each mixed run (open loop, on its own connection, outside the mix and its requests/s): a read served on the read
threads beside the listings and starts, reported per run as ``cypress_get`` (count, errors, p50/p99/max).

``--front relay|cache`` (default ``none``) puts ``bench/read_front.py``, a prototype read process, between the mixed
phase's clients and the scheduler: ``relay`` relays every request (what the hop costs), ``cache`` answers each
``get_operation`` with the scheduler's last answer to the same request, every operation read once through it
first (``front_warm``): an upper bound of a read process's effect, not a correct server (see its docstring). Each
mixed run then also reports the front's CPU (``front_cpu_per_second``, ``front_cpu_ms_per_request``).

``--read-process`` runs the scheduler with its read process (``pooltree/reads``: it owns the API port and relays
to the scheduler, answering what its replica can); each mixed run then reports the read process's CPU as the
front's (``front_cpu_per_second``, ``front_cpu_ms_per_request``), and ``read_feed`` what the feed cost the
scheduler in the 50-client run (``/metrics``' ``pooltree_read_feed_*``: ticks and templates made per second, CPU ms
per template, per tick and to send a tick, its share of a core); without it the scheduler serves its port itself
(``POOLTREE_READ_PROCESS=0`` for the child processes, whatever the option's default).

Usage: .venv/bin/python bench/live_queue.py [--operations 10000] [--clients 8] [--mode both|queue|mixed]
       [--mixed-clients 50] [--mixed-seconds 30] [--load-processes 4] [--sim-nodes 1000] [--probe-get-period 0.05]
       [--front none|relay|cache] [--read-process]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from heartbeat_tail import read_tail, tail_figures, trace_figures
from live_common import (
    Local,
    YtRequests,
    join_processes,
    machine,
    process_cpu_seconds,
    quantile_ms,
    read_process_of,
    read_response,
    start_drivers,
    yt_client,
)
from live_nodes import _cpu_between, _driver
from request_split import SENT_HEADER, client_path, probe_environment, summary

POOL = "queue"
ACCEPT_TARGET_SECONDS = 120.0
MIX = (("get_operation", 0.60), ("list_operations", 0.25), ("start_operation", 0.15))
START_SPEC = {"pool": POOL, "tasks": {"main": {"command": "true", "job_count": 1}}}


def create_queue_pool(client: Any) -> None:
    """Pool ``POOL`` in tree ``default`` with ``max_running_operation_count`` 0: whatever starts into it stays
    pending, so the queue only grows."""
    client.create(
        "scheduler_pool",
        attributes={
            "name": POOL,
            "pool_tree": "default",
            "max_running_operation_count": 0,
            "max_operation_count": 100_000,
        },
    )


def _fair_share_updates(url: str, token: str) -> int | None:
    """Fair-share updates the scheduler ran so far (``pooltree_scheduler_work_seconds_count``)."""
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=30, headers={"Authorization": f"OAuth {token}"}).text
    match = re.search(r'pooltree_scheduler_work_seconds_count\{work="fair_share_update"\} ([0-9.e+]+)', text)
    return int(float(match.group(1))) if match else 0


# ------------------------------------------------------------------------------------------------ queue phase


def _starter(url: str, token: str, count: int, began: float, interval: float, out: Any) -> None:
    """One client process: ``count`` ``start_operation`` calls through ``yt.wrapper`` (one request each), sent
    every ``interval`` seconds (0: back to back); (send time since ``began``, latency, operation id) each."""
    from yt.wrapper.driver import make_formatted_request

    client = yt_client(url, token)
    spec = START_SPEC
    results = []
    next_send = time.time()
    for _ in range(count):
        if interval > 0:
            pause = next_send - time.time()
            if pause > 0:
                time.sleep(pause)
            next_send += interval
        sent = time.time()
        try:
            answer = make_formatted_request(
                "start_operation", {"operation_type": "vanilla", "spec": spec}, format=None, client=client
            )
        except Exception as error:  # counted and reported; the client goes on
            results.append(
                (sent - began, time.time() - sent, f"error: {type(error).__name__}: {error}"[:300])
            )
            continue
        results.append((sent - began, time.time() - sent, answer["operation_id"]))
    out.put(results)


def run_queue(
    url: str, token: str, operations: int, clients: int, rate: float
) -> tuple[dict[str, Any], list[str]]:
    updates_before = _fair_share_updates(url, token)
    began = time.time()
    out: Any = mp.Queue()
    share = [operations // clients + (1 if i < operations % clients else 0) for i in range(clients)]
    interval = clients / rate if rate > 0 else 0.0
    workers = [mp.Process(target=_starter, args=(url, token, n, began, interval, out)) for n in share]
    for worker in workers:
        worker.start()
    results = []
    for _ in workers:
        results.extend(out.get(timeout=3600))
    for worker in workers:
        worker.join(60)
    failures = [result for result in results if result[2].startswith("error: ")]
    results = [result for result in results if not result[2].startswith("error: ")]
    accepted_seconds = max(sent + latency for sent, latency, _ in results)
    results.sort()
    latencies = [latency for _, latency, _ in results]
    window = min(1000, len(latencies) // 2)
    first, last = latencies[:window], latencies[-window:]
    first_median, last_median = statistics.median(first), statistics.median(last)
    return (
        {
            "operations": len(results),
            "errors": len(failures),
            "first_errors": sorted({message for _, _, message in failures})[:5],
            "clients": clients,
            "offered_starts_per_second": rate or "back to back",
            "accepted_seconds": round(accepted_seconds, 2),
            "starts_per_second": round(len(results) / accepted_seconds, 1),
            "window": window,
            "first_median_ms": round(first_median * 1000, 2),
            "last_median_ms": round(last_median * 1000, 2),
            "last_over_first": round(last_median / first_median, 3),
            "first_p99_ms": quantile_ms(first, 0.99),
            "last_p99_ms": quantile_ms(last, 0.99),
            "all_p50_ms": quantile_ms(latencies, 0.5),
            "all_p99_ms": quantile_ms(latencies, 0.99),
            "fair_share_updates": (_fair_share_updates(url, token) or 0) - (updates_before or 0),
            "targets": {
                "last_median_ms_max": 20.0,
                "last_over_first_max": 1.5,
                "accepted_seconds_max": ACCEPT_TARGET_SECONDS,
            },
            "met": not failures
            and last_median * 1000 <= 20.0
            and last_median <= 1.5 * first_median
            and accepted_seconds <= ACCEPT_TARGET_SECONDS,
        },
        [op_id for _, _, op_id in results],
    )


# ------------------------------------------------------------------------------------------------ mixed phase


async def _mixed_clients(
    requests: YtRequests,
    clients: int,
    seconds: float,
    op_ids: list[str],
    starts: list[str],
    seed: int,
    probe_period: float = 0.0,
    trace: bool = False,
    pace: float = 0.0,
) -> dict[str, Any]:
    host, port = requests.host.split(":")
    rng = random.Random(seed)
    latencies: dict[str, list[float]] = {name: [] for name, _ in MIX}
    errors: dict[str, int] = {name: 0 for name, _ in MIX}
    server_errors: dict[str, int] = {name: 0 for name, _ in MIX}
    names = [name for name, _ in MIX]
    weights = [weight for _, weight in MIX]
    deadline = time.monotonic() + seconds
    traced: list[tuple[float, float]] = []

    def request(command: str) -> bytes:
        if command == "get_operation":
            return requests.get_operation(rng.choice(op_ids))
        if command == "list_operations":  # newest 100; a third state=pending; a third paging on
            return requests.list_operations(rng.randrange(3), rng.choice(starts))
        return requests.start_operation()

    async def client(index: int) -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        due = time.monotonic() + pace * index / max(clients, 1)  # paced clients spread over one interval
        try:
            while time.monotonic() < deadline:
                if pace > 0:  # at most one request every ``pace`` seconds; one late by more sends at once
                    delay = due - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    elif delay < -pace:
                        due = time.monotonic()
                    due += pace
                command = rng.choices(names, weights)[0]
                data = request(command)
                if trace and command == "get_operation":  # when it was sent, for the probe's records
                    sent = time.monotonic()
                    data = data.replace(b"\r\n", b"\r\n%s: %r\r\n" % (SENT_HEADER, sent), 1)
                began = time.perf_counter()
                writer.write(data)
                await writer.drain()
                status = await asyncio.wait_for(read_response(reader), 60)
                latencies[command].append(time.perf_counter() - began)
                if trace and command == "get_operation":
                    traced.append((sent, time.monotonic()))
                if status >= 400:
                    errors[command] += 1
                if status >= 500:
                    server_errors[command] += 1
        finally:
            writer.close()

    probed: list[float] = []
    probe_errors = [0, 0]  # 4xx and 5xx, 5xx

    async def probe() -> None:
        """A Cypress ``get`` every ``probe_period`` seconds (open loop, on a connection of its own)."""
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            due = time.monotonic()
            while time.monotonic() < deadline:
                due += probe_period
                began = time.perf_counter()
                writer.write(requests.cypress_get())
                await writer.drain()
                status = await asyncio.wait_for(read_response(reader), 60)
                probed.append(time.perf_counter() - began)
                probe_errors[0] += status >= 400
                probe_errors[1] += status >= 500
                await asyncio.sleep(max(0.0, due - time.monotonic()))
        finally:
            writer.close()

    began = time.monotonic()
    probes = [probe()] if probe_period > 0 else []
    await asyncio.gather(*(client(index) for index in range(clients)), *probes)
    return {
        "elapsed": time.monotonic() - began,
        "latencies": latencies,
        "errors": errors,
        "server_errors": server_errors,
        "probe": {"latencies": probed, "errors": probe_errors[0], "server_errors": probe_errors[1]},
        "traced": traced,
    }


def _mixed_worker(
    requests: YtRequests,
    clients: int,
    seconds: float,
    op_ids: list[str],
    starts: list[str],
    seed: int,
    out: Any,
    probe_period: float = 0.0,
    trace: bool = False,
    pace: float = 0.0,
) -> None:
    try:
        out.put(
            asyncio.run(
                _mixed_clients(requests, clients, seconds, op_ids, starts, seed, probe_period, trace, pace)
            )
        )
    except BaseException as error:  # reported, so the parent does not wait for a result that never comes
        out.put({"failed": f"{type(error).__name__}: {error}"})
        raise


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_mixed(
    requests: YtRequests,
    scheduler_pid: int | None,
    clients: int,
    seconds: float,
    processes: int,
    op_ids: list[str],
    starts: list[str],
    probe_period: float = 0.0,
    trace: bool = False,
    front_pid: int | None = None,
    rate: float = 0.0,
) -> dict[str, Any]:
    """The mix from ``clients`` clients in ``processes`` load processes for ``seconds``; ``probe_period`` > 0: the
    first process also sends a Cypress ``get`` every that many seconds (``cypress_get``, not in the mix's
    requests/s). ``trace``: each ``get_operation`` carries when it was sent (``SENT_HEADER``), and ``traced``
    holds (sent, answer read) of each, ``time.monotonic`` seconds. ``rate`` > 0: the clients together send at most
    that many requests a second (each at most one every ``clients / rate`` seconds, still one at a time)."""
    processes = max(1, min(processes, clients))
    share = [clients // processes + (1 if i < clients % processes else 0) for i in range(processes)]
    out: Any = mp.Queue()
    workers = [
        mp.Process(
            target=_mixed_worker,
            args=(
                requests,
                n,
                seconds,
                op_ids,
                starts,
                i,
                out,
                probe_period if i == 0 else 0.0,
                trace,
                clients / rate if rate > 0 else 0.0,
            ),
        )
        for i, n in enumerate(share)
    ]
    children_before = _children_cpu()
    scheduler_before = process_cpu_seconds(scheduler_pid) if scheduler_pid else None
    front_before = process_cpu_seconds(front_pid) if front_pid else None
    wall_began = time.monotonic()
    for worker in workers:
        worker.start()
    parts = [out.get(timeout=seconds + 600) for _ in workers]
    failed = [part["failed"] for part in parts if "failed" in part]
    if failed:
        raise RuntimeError(f"load generator failed: {failed[0]}")
    scheduler_after = process_cpu_seconds(scheduler_pid) if scheduler_pid else None
    front_after = process_cpu_seconds(front_pid) if front_pid else None
    wall = time.monotonic() - wall_began
    for worker in workers:
        worker.join(60)
    load_cpu = _children_cpu() - children_before  # the load processes, reaped by join
    elapsed = max(part["elapsed"] for part in parts)
    commands: dict[str, Any] = {}
    total = 0
    for name, _ in MIX:
        values = [v for part in parts for v in part["latencies"][name]]
        total += len(values)
        commands[name] = {
            "requests": len(values),
            "errors": sum(part["errors"][name] for part in parts),
            "server_errors": sum(part["server_errors"][name] for part in parts),
            "p50_ms": quantile_ms(values, 0.5),
            "p99_ms": quantile_ms(values, 0.99),
            "max_ms": quantile_ms(values, 1.0),
        }
    if probe_period > 0:
        probed = [v for part in parts for v in part["probe"]["latencies"]]
        commands["cypress_get"] = {
            "requests": len(probed),
            "period_seconds": probe_period,
            "errors": sum(part["probe"]["errors"] for part in parts),
            "server_errors": sum(part["probe"]["server_errors"] for part in parts),
            "p50_ms": quantile_ms(probed, 0.5),
            "p99_ms": quantile_ms(probed, 0.99),
            "max_ms": quantile_ms(probed, 1.0),
        }
    cpu: dict[str, Any] = {"load_generators_cpu_per_second": round(load_cpu / wall, 3)}
    if scheduler_before is not None and scheduler_after is not None:
        used = scheduler_after - scheduler_before
        cpu["scheduler_cpu_per_second"] = round(used / wall, 3)
        cpu["scheduler_cpu_ms_per_request"] = round(1000 * used / max(total, 1), 3)
    if front_before is not None and front_after is not None:
        used = front_after - front_before
        cpu["front_cpu_per_second"] = round(used / wall, 3)
        cpu["front_cpu_ms_per_request"] = round(1000 * used / max(total, 1), 3)
    return {
        "window": (wall_began, wall_began + wall),
        "traced": [pair for part in parts for pair in part["traced"]],
        "clients": clients,
        "processes": processes,
        "seconds": round(elapsed, 2),
        "requests": total,
        "requests_per_second": round(total / elapsed, 1),
        "commands": commands,
        "cpu": cpu,
    }


class SimulatedNodes:
    """``count`` simulated exec nodes heartbeating against the scheduler from ``drivers`` processes until
    ``close()`` (``live_nodes._driver``); ``figures(begin, finish)`` reports the heartbeats of a time window."""

    def __init__(self, url: str, secret: str, count: int, drivers: int, period: float) -> None:
        context = mp.get_context("spawn")
        self.period = period
        self.count = count
        self.end = context.Value("d", float("inf"))
        self.queue: Any = context.Queue()
        self.drivers: list[Any] = []
        self.results: list[Any] = []
        options = {
            "period": period,
            "node_cpu": 16.0,
            "node_memory": 64.0 * 2**30,
            "job_seconds": 10.0,
            "job_jitter": 0.5,
        }
        addresses = [f"sim-node-{i:05d}" for i in range(count)]
        try:
            start_drivers(
                context,
                _driver,
                url,
                secret,
                addresses,
                drivers,
                options,
                self.end,
                self.queue,
                120,
                self.drivers,
            )
        except BaseException:
            self.close()
            raise
        time.sleep(2 * period + 1.0)  # every node registered by its first heartbeats

    def close(self) -> None:
        """Stop the nodes (each after its heartbeat in flight) and collect their records."""
        if self.end.value == float("inf"):
            self.end.value = time.time()
            self.results = [self.queue.get(timeout=120) for _ in self.drivers]
        join_processes(self.drivers, 90)

    def figures(self, begin: float, finish: float) -> dict[str, Any]:
        """Heartbeats answered (by answer time) and their latency (by send time) inside [begin, finish)."""
        records = [r for records, _ in self.results for r in records]
        answered = [r for r in records if begin <= r[1] < finish and r[2] == 200]
        latencies = [
            got - sent for sent, got, status, _ in records if begin <= sent < finish and status == 200
        ]
        seconds = max(finish - begin, 1e-9)
        driver_cpu = sum(_cpu_between(samples, begin, finish) for _, samples in self.results)
        return {
            "nodes": self.count,
            "offered_per_second": round(self.count / self.period, 1),
            "answered_per_second": round(len(answered) / seconds, 1),
            "errors": sum(1 for r in records if begin <= r[1] < finish and r[2] != 200),
            "p50_ms": quantile_ms(latencies, 0.5),
            "p99_ms": quantile_ms(latencies, 0.99),
            "driver_cpu_share": round(driver_cpu / seconds, 3),
        }


def _gc_figures(url: str, token: str) -> dict[str, Any]:
    """The scheduler's garbage collections so far (``pooltree_gc_*`` in ``/metrics``): per generation the count,
    total and longest pause; the objects frozen (``pooltree.server.gc_tuning``)."""
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=30, headers={"Authorization": f"OAuth {token}"}).text

    def value(pattern: str) -> float:
        match = re.search(pattern + r" ([0-9.e+-]+)", text)
        return float(match.group(1)) if match else 0.0

    figures: dict[str, Any] = {}
    for generation in ("0", "1", "2"):
        label = rf'\{{generation="{generation}"\}}'
        figures[f"generation_{generation}"] = {
            "collections": int(value(f"pooltree_gc_pause_seconds_count{label}")),
            "total_ms": round(value(f"pooltree_gc_pause_seconds_sum{label}") * 1000, 1),
            "max_ms": round(value(f"pooltree_gc_pause_max_seconds{label}") * 1000, 1),
        }
    figures["frozen_objects"] = int(value("pooltree_gc_frozen_objects"))
    return figures


def _feed_counts(url: str, token: str) -> dict[str, float]:
    """The read feed's counters (``/metrics``' ``pooltree_read_feed_*_total``: ticks, templates made and sent, the
    scheduler's CPU seconds making them and ticking)."""
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=30, headers={"Authorization": f"OAuth {token}"}).text
    found = re.findall(r"^pooltree_read_feed_(\w+)_total ([0-9.e+-]+)$", text, re.MULTILINE)
    return {name: float(value) for name, value in found}


def feed_figures(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, Any]:
    """What the feed cost the scheduler between two ``_feed_counts``: per second, and CPU ms per template made and
    per tick."""
    delta = {name: after[name] - before.get(name, 0.0) for name in after}
    made, ticks = delta.get("templates_made", 0.0), delta.get("ticks", 0.0)
    return {
        "per_second": {name: round(value / seconds, 2) for name, value in delta.items()},
        "make_ms_per_template": round(1000 * delta.get("make_cpu_seconds", 0.0) / made, 4) if made else None,
        "tick_ms_per_tick": round(1000 * delta.get("tick_cpu_seconds", 0.0) / ticks, 4) if ticks else None,
        "send_ms_per_tick": round(1000 * delta.get("send_cpu_seconds", 0.0) / ticks, 4) if ticks else None,
        "cpu_share": round(
            sum(delta.get(name, 0.0) for name in ("make_cpu_seconds", "tick_cpu_seconds", "send_cpu_seconds"))
            / seconds,
            4,
        ),
    }


def _read_process_requests(url: str, token: str) -> dict[str, int]:
    """Requests the read process relayed (``scheduler``) and its replica answered so far (``/metrics``'
    ``pooltree_read_process_requests_total``, counted up to a second late)."""
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=30, headers={"Authorization": f"OAuth {token}"}).text
    found = re.findall(r'pooltree_read_process_requests_total\{answered_by="(\w+)"\} ([0-9.e+-]+)', text)
    return {who: int(float(value)) for who, value in found}


async def _warm(requests: YtRequests, op_ids: list[str], connections: int) -> int:
    """Each of ``op_ids`` read once with ``get_operation`` over ``connections`` connections; the errors."""
    host, port = requests.host.split(":")
    todo = list(op_ids)
    errors = 0

    async def reader() -> None:
        nonlocal errors
        stream, writer = await asyncio.open_connection(host, int(port))
        try:
            while todo:
                writer.write(requests.get_operation(todo.pop()))
                await writer.drain()
                errors += await asyncio.wait_for(read_response(stream), 60) >= 400
        finally:
            writer.close()

    await asyncio.gather(*(reader() for _ in range(connections)))
    return errors


def read_process_pid(scheduler_pid: int | None) -> int:
    """The scheduler's read process (its child running ``pooltree.reads.process``)."""
    found = None if scheduler_pid is None else read_process_of(scheduler_pid)
    if found is None:
        raise RuntimeError("the scheduler runs no read process")
    return found


def start_front(url: str, mode: str) -> tuple[subprocess.Popen[bytes], str]:
    """``bench/read_front.py`` in ``mode`` relaying to ``url``'s scheduler; the process and the front's URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = Path(__file__).resolve().parent / "read_front.py"
    upstream = url.removeprefix("http://")
    front = subprocess.Popen(
        [sys.executable, str(script), "--listen-port", str(port), "--upstream", upstream, "--mode", mode]
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or front.poll() is not None:
                front.kill()
                raise RuntimeError("the read front did not start") from None
            time.sleep(0.05)
    return front, f"http://127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--operations", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument(
        "--rate",
        type=float,
        default=100.0,
        help="starts per second offered by all clients together (open loop); 0: each client back to back",
    )
    parser.add_argument("--mode", choices=("both", "queue", "mixed"), default="both")
    parser.add_argument("--mixed-clients", type=int, default=50)
    parser.add_argument("--mixed-seconds", type=float, default=30.0)
    parser.add_argument(
        "--mixed-rate",
        type=float,
        default=0.0,
        help="requests a second the N clients send at most together (0: each back to back): two fronts compared "
        "at the same work, not at what each lets closed-loop clients send",
    )
    parser.add_argument("--single-seconds", type=float, default=10.0)
    parser.add_argument("--load-processes", type=int, default=4)
    parser.add_argument("--sim-nodes", type=int, default=0, help="simulated nodes heartbeating meanwhile")
    parser.add_argument("--sim-drivers", type=int, default=3)
    parser.add_argument("--sim-period", type=float, default=1.0)
    parser.add_argument(
        "--probe-get-period",
        type=float,
        default=0.0,
        help="seconds between the Cypress gets (of live_common.CYPRESS_PATH) one probe sends through each mixed "
        "run, open loop, outside the mix (0: none); reported as the run's cypress_get",
    )
    parser.add_argument(
        "--split",
        type=Path,
        default=None,
        help="load bench/split_probe into the scheduler, writing its records to this file, and report where "
        "the 50-client run's commands spent their time (request_split.py)",
    )
    parser.add_argument(
        "--front",
        choices=("none", "relay", "cache"),
        default="none",
        help="the mixed phase's clients talk to bench/read_front.py in this mode instead of the scheduler "
        "(relay: every request relayed; cache: gets answered from the last relayed answer, an upper bound)",
    )
    parser.add_argument(
        "--read-process",
        action="store_true",
        help="run the scheduler with its read process (pooltree scheduler --read-process); its CPU is reported "
        "as the front's",
    )
    args = parser.parse_args()
    if args.read_process and args.front != "none":
        parser.error("--read-process and --front measure different fronts: give one")
    os.environ["POOLTREE_READ_PROCESS"] = "1" if args.read_process else "0"
    if args.split is not None:
        os.environ.update(probe_environment(args.split.resolve()))
    machine_before = machine()
    report: dict[str, Any] = {
        "name": "live_queue",
        "parameters": {
            "operations": args.operations,
            "clients": args.clients,
            "rate": args.rate,
            "mode": args.mode,
            "mixed_clients": args.mixed_clients,
            "mixed_seconds": args.mixed_seconds,
            "mixed_rate": args.mixed_rate,
            "single_client_seconds": args.single_seconds,
            "load_processes": args.load_processes,
            "store": "sqlite",
            "nodes": 1,
            "simulated_nodes": args.sim_nodes,
            "simulated_node_period": args.sim_period,
            "pool": f"{POOL} (max_running_operation_count 0)",
            "gc_tuning": os.environ.get("POOLTREE_GC_TUNING", "1"),
            "front": args.front,
            "read_process": args.read_process,
        },
    }
    with tempfile.TemporaryDirectory(prefix="pooltree-queue-") as tmp:
        local = Local(Path(tmp) / "data", nodes=1)
        nodes: SimulatedNodes | None = None
        front: subprocess.Popen[bytes] | None = None
        windows: dict[str, tuple[float, float]] = {}
        tails: tuple[dict[str, Any] | None, dict[str, Any] | None, tuple[float, float]] | None = None
        try:
            if args.sim_nodes > 0:
                secret = (Path(tmp) / "data" / "node_secret").read_text().strip()
                nodes = SimulatedNodes(local.url, secret, args.sim_nodes, args.sim_drivers, args.sim_period)
            began = time.time()
            client = yt_client(local.url, local.token)
            create_queue_pool(client)
            report["queue"], op_ids = run_queue(
                local.url, local.token, args.operations, args.clients, args.rate
            )
            windows["queue"] = (began, time.time())
            report["gc_after_queue"] = _gc_figures(local.url, local.token)
            if args.mode in ("both", "mixed"):
                listed = client.list_operations(limit=1000)["operations"]
                starts = [o["start_time"] for o in listed]
                mixed_url = local.url
                if args.front != "none":
                    front, mixed_url = start_front(local.url, args.front)
                requests = YtRequests(mixed_url, local.token, START_SPEC)
                if args.front == "cache":  # every operation's answer kept once: the front's steady state
                    warmed = time.monotonic()
                    errors = asyncio.run(_warm(requests, op_ids, 8))
                    report["front_warm"] = {"seconds": round(time.monotonic() - warmed, 2), "errors": errors}
                pid = local.scheduler_pid()
                front_pid = front.pid if front is not None else None
                if args.read_process:
                    front_pid = read_process_pid(pid)
                began = time.time()
                probe = args.probe_get_period
                single = run_mixed(
                    requests, pid, 1, args.single_seconds, 1, op_ids, starts, probe, front_pid=front_pid
                )
                many_began = time.time()
                tail_before = read_tail(local.url, local.token, many_began) if nodes is not None else None
                feed_before = _feed_counts(local.url, local.token) if args.read_process else None
                feed_began = time.monotonic()
                many = run_mixed(
                    requests,
                    pid,
                    args.mixed_clients,
                    args.mixed_seconds,
                    args.load_processes,
                    op_ids,
                    starts,
                    probe,
                    trace=args.split is not None,
                    front_pid=front_pid,
                    rate=args.mixed_rate,
                )
                windows["mixed"] = (began, time.time())
                if feed_before is not None:  # what the feed cost the scheduler in the 50-client run
                    report["read_feed"] = feed_figures(
                        feed_before, _feed_counts(local.url, local.token), time.monotonic() - feed_began
                    )
                commands = many["commands"]
                many_window, traced = many.pop("window"), many.pop("traced")
                if nodes is not None:  # the 50-client run's window in wall-clock time, as the tail's
                    tails = (
                        tail_before,
                        read_tail(local.url, local.token, many_began),
                        (many_began, time.time()),
                    )
                single.pop("window")
                single.pop("traced")
                if args.split is not None:
                    time.sleep(1.5)  # the probe writes its records every second
                    report["split"] = summary(args.split.resolve(), *many_window)
                    report["split"]["get_operation_path"] = client_path(args.split.resolve(), traced)
                report["mixed"] = {
                    "operations_held": client.list_operations(limit=0)["state_counts"],
                    "one_client": single,
                    "many_clients": many,
                    "targets": {
                        "get_operation_p99_ms_max": 50.0,
                        "list_operations_p99_ms_max": 200.0,
                        "server_errors": 0,
                        "requests_per_second_many_over_one_min": 1.0,
                    },
                    "met": (commands["get_operation"]["p99_ms"] or 0) <= 50.0
                    and (commands["list_operations"]["p99_ms"] or 0) <= 200.0
                    and sum(c["server_errors"] for c in commands.values()) == 0
                    and many["requests_per_second"] >= single["requests_per_second"],
                }
            report["gc_at_end"] = _gc_figures(local.url, local.token)
            if args.read_process:
                report["read_process_requests"] = _read_process_requests(local.url, local.token)
            if nodes is not None:
                nodes.close()
                report["heartbeats"] = {name: nodes.figures(*window) for name, window in windows.items()}
                if tails is not None:  # where the 50-client run's slow heartbeats spent their time
                    sent_in = [
                        got - sent
                        for records, _ in nodes.results
                        for sent, got, status, _ in records
                        if tails[2][0] <= sent < tails[2][1] and status == 200
                    ]
                    report["heartbeats"]["many_clients"] = nodes.figures(*tails[2])
                    report["heartbeats"]["many_clients_tail"] = tail_figures(*tails, sent_in)
                    trace = trace_figures(tails[1], tails[2])  # with POOLTREE_HEARTBEAT_TRACE set
                    if trace:
                        report["heartbeats"]["many_clients_trace"] = trace
        finally:
            if front is not None:
                front.terminate()
                front.wait(30)
            if nodes is not None:
                nodes.close()
            local.close()
    report["machine"] = {"before": machine_before, "after": machine()}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
