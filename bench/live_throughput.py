"""Benchmark the live cluster end to end; prints one JSON object.

Starts ``pooltree local --nodes 4`` (real scheduler and node processes on 127.0.0.1, SQLite under a temporary
directory), submits ``--operations`` vanilla operations of ``--jobs`` jobs of ``true`` each through
``yt.wrapper.YtClient`` (all submitted back to back), waits (bounded) until every operation has completed and
reads the jobs back with ``list_jobs``. Reported per run:

* ``jobs_per_second``: jobs completed / (last job finish - first operation start), server timestamps;
* ``start_to_running_ms`` p50/p99: job start time - its operation's start time (the scheduling latency the
  user sees, including queueing behind the other operations' jobs while slots are busy);
* ``cpu_ms_per_job``: CPU of the scheduler and of the nodes (with the jobs' processes they reaped: keepers,
  shells) from the submission to the last operation's end, per job;
* ``first_job_latency_ms`` p50/p99: the first job of each operation - the operation's start (pure scheduling
  latency: a node heartbeat has to come, so it is bounded by the heartbeat period unless a job finishes);
* ``get_operation_ms`` p50/p99: ``--clients`` concurrent httpx clients (asyncio) each sending sequential
  ``get_operation`` requests for ``--get-seconds`` seconds (bounded count too) after the operations finished;
  ``get_operation_one_client`` is the same with one client first (the service time without queueing). The
  headline uses plain asyncio keep-alive connections; ``get_operation_httpx`` repeats it with one shared
  ``httpx.AsyncClient``, whose own CPU cost dominates at 50 concurrent requests on a 2-core machine.

The whole run is repeated ``--repeat`` times; the median run by jobs/s is the headline, every run is listed.

Usage: .venv/bin/python bench/live_throughput.py [--nodes 4] [--operations 10] [--jobs 100] [--clients 50]
       [--node-resources 'user_slots=8,cpu=8'] [--repeat 1] [--heartbeat-period 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yt.wrapper as ytw
from live_common import Local, machine, quantile_ms, read_response

RUN_TIMEOUT = 600.0
MAX_REQUESTS_PER_CLIENT = 2000


def _latency_report(client: str, latencies: list[float], errors: int, elapsed: float) -> dict[str, Any]:
    """Requests, errors, rate and latency quantiles of one load run."""
    return {
        "client": client,
        "requests": len(latencies),
        "errors": errors,
        "requests_per_second": round(len(latencies) / elapsed, 1),
        "p50_ms": quantile_ms(latencies, 0.5),
        "p99_ms": quantile_ms(latencies, 0.99),
        "max_ms": quantile_ms(latencies, 1.0),
    }


def _ts(value: Any) -> float:
    """A YT timestamp (``2026-11-22T10:25:21.643455Z``) or seconds as float seconds."""
    if isinstance(value, int | float):
        return float(value)
    return dt.datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


def _cpu_seconds(local: Local) -> dict[str, float]:
    """CPU seconds so far of the scheduler and of the nodes, each with the children it reaped."""
    totals = {"scheduler": 0.0, "nodes": 0.0}
    for child in psutil.Process(local.process.pid).children():
        with contextlib.suppress(psutil.Error):
            cmdline = child.cmdline()
            role = "scheduler" if "scheduler" in cmdline else "nodes" if "node" in cmdline else None
            if role is not None:
                times = child.cpu_times()
                totals[role] += times.user + times.system + times.children_user + times.children_system
    return totals


def _wait_nodes(client: ytw.YtClient, nodes: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(client.get("//sys/scheduler/orchid/scheduler/nodes")) >= nodes:
            return
        time.sleep(0.1)
    raise RuntimeError(f"fewer than {nodes} nodes registered within 60 s")


async def _get_operation_load(
    url: str, op_ids: list[str], clients: int, seconds: float, token: str
) -> dict[str, Any]:
    """``clients`` concurrent sequential requesters for ``seconds``; per-request latencies in seconds."""
    latencies: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def requester(client: httpx.AsyncClient, index: int) -> None:
        nonlocal errors
        for count in range(MAX_REQUESTS_PER_CLIENT):
            if time.monotonic() >= deadline:
                return
            op_id = op_ids[(index + count) % len(op_ids)]
            began = time.perf_counter()
            response = await client.get(
                f"{url}/api/v4/get_operation",
                params={"operation_id": op_id},
                headers={"X-YT-Output-Format": '"json"', "Authorization": f"OAuth {token}"},
            )
            latencies.append(time.perf_counter() - began)
            if response.status_code != 200:
                errors += 1

    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        began = time.monotonic()
        await asyncio.gather(*(requester(client, i) for i in range(clients)))
        elapsed = time.monotonic() - began
    return _latency_report("httpx.AsyncClient", latencies, errors, elapsed)


async def _get_operation_load_raw(
    url: str, op_ids: list[str], clients: int, seconds: float, token: str
) -> dict[str, Any]:
    """Like ``_get_operation_load`` over plain asyncio keep-alive connections (one per client): httpx's own
    per-request CPU cost on this 2-core machine is larger than the server's, so it would measure the client."""
    host, port = url.removeprefix("http://").split(":")
    latencies: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds

    async def requester(index: int) -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for count in range(MAX_REQUESTS_PER_CLIENT):
                if time.monotonic() >= deadline:
                    return
                op_id = op_ids[(index + count) % len(op_ids)]
                request = (
                    f"GET /api/v4/get_operation?operation_id={op_id} HTTP/1.1\r\nHost: {host}\r\n"
                    f'X-YT-Output-Format: "json"\r\nAuthorization: OAuth {token}\r\n\r\n'
                ).encode()
                began = time.perf_counter()
                writer.write(request)
                await writer.drain()
                status = await asyncio.wait_for(read_response(reader), 30)
                latencies.append(time.perf_counter() - began)
                if status != 200:
                    errors += 1
        finally:
            writer.close()

    began = time.monotonic()
    await asyncio.gather(*(requester(i) for i in range(clients)))
    elapsed = time.monotonic() - began
    return _latency_report("asyncio keep-alive", latencies, errors, elapsed)


def run_once(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pooltree-bench-") as tmp:
        local = Local(Path(tmp) / "data", args.nodes, args.node_resources, args.heartbeat_period)
        try:
            client = ytw.YtClient(
                proxy=local.url, token=local.token, config={"proxy": {"enable_proxy_discovery": False}}
            )
            _wait_nodes(client, args.nodes)
            spec = ytw.VanillaSpecBuilder().begin_task("main").command("true").job_count(args.jobs).end_task()
            cpu_before = _cpu_seconds(local)
            submit_began = time.time()
            op_ids = [client.run_operation(spec, sync=False).id for _ in range(args.operations)]
            submit_seconds = time.time() - submit_began
            deadline = time.monotonic() + RUN_TIMEOUT
            pending = set(op_ids)
            while pending and time.monotonic() < deadline:
                for op_id in list(pending):
                    op_state = client.get_operation(op_id, attributes=["state"])["state"]
                    if op_state in ("completed", "failed", "aborted"):
                        if op_state != "completed":
                            raise RuntimeError(f"operation {op_id} ended {op_state}")
                        pending.discard(op_id)
                time.sleep(0.2)
            if pending:
                raise RuntimeError(f"{len(pending)} operations unfinished after {RUN_TIMEOUT} s")
            cpu_after = _cpu_seconds(local)
            op_start = {op_id: _ts(client.get_operation(op_id)["start_time"]) for op_id in op_ids}
            to_running: list[float] = []
            first_job: list[float] = []
            finishes: list[float] = []
            for op_id in op_ids:
                jobs = client.list_jobs(op_id, limit=1000)["jobs"]
                completed = [job for job in jobs if job["state"] == "completed"]
                if len(completed) != args.jobs:
                    raise RuntimeError(f"operation {op_id}: {len(completed)} completed jobs of {args.jobs}")
                starts = [_ts(job["start_time"]) - op_start[op_id] for job in completed]
                to_running += starts
                first_job.append(min(starts))
                finishes += [_ts(job["finish_time"]) for job in completed]
            total_jobs = args.jobs * args.operations
            span = max(finishes) - min(op_start.values())
            single = asyncio.run(
                _get_operation_load_raw(local.url, op_ids, 1, min(2.0, args.get_seconds), local.token)
            )
            load = asyncio.run(
                _get_operation_load_raw(local.url, op_ids, args.clients, args.get_seconds, local.token)
            )
            load_httpx = asyncio.run(
                _get_operation_load(local.url, op_ids, args.clients, args.get_seconds, local.token)
            )
        finally:
            local.close()
    return {
        "jobs": total_jobs,
        "seconds": round(span, 3),
        "jobs_per_second": round(total_jobs / span, 1),
        "submit_seconds": round(submit_seconds, 3),
        "cpu_ms_per_job": {
            role: round((cpu_after[role] - cpu_before[role]) / total_jobs * 1000, 2) for role in cpu_before
        },
        "start_to_running_ms": {"p50": quantile_ms(to_running, 0.5), "p99": quantile_ms(to_running, 0.99)},
        "first_job_latency_ms": {"p50": quantile_ms(first_job, 0.5), "p99": quantile_ms(first_job, 0.99)},
        "get_operation": load,
        "get_operation_one_client": single,
        "get_operation_httpx": load_httpx,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--operations", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--get-seconds", type=float, default=5.0)
    parser.add_argument(
        "--node-resources", default=None, help="e.g. 'user_slots=8,cpu=8' (default: detected)"
    )
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--heartbeat-period", type=float, default=None, help="idle node heartbeat period (default: the CLI's)"
    )
    args = parser.parse_args()
    runs = [run_once(args) for _ in range(max(1, args.repeat))]
    rates = [run["jobs_per_second"] for run in runs]
    median_run = sorted(runs, key=lambda run: run["jobs_per_second"])[len(runs) // 2]
    print(
        json.dumps(
            {
                "name": "live_throughput",
                "parameters": {
                    "nodes": args.nodes,
                    "operations": args.operations,
                    "jobs_per_operation": args.jobs,
                    "command": "true",
                    "clients": args.clients,
                    "get_seconds": args.get_seconds,
                    "node_resources": args.node_resources or "detected",
                    "heartbeat_period": args.heartbeat_period or "default",
                    "repeat": len(runs),
                },
                "median": median_run,
                "jobs_per_second": {"median": statistics.median(rates), "min": min(rates), "max": max(rates)},
                "runs": runs,
                "targets": {"jobs_per_second": 200, "get_operation_p99_ms": 50},
                "machine": machine(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
