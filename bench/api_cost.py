"""Scheduler CPU per API request, per command; prints one JSON object.

Starts ``pooltree local --nodes 1`` (real scheduler and node processes on 127.0.0.1, SQLite under a temporary
directory), creates pool ``queue`` with ``max_running_operation_count`` 0 and starts ``--operations`` (1,500)
operations into it (they stay pending, as in ``live_queue.py``). Then, for each of ``get_operation``,
``list_operations`` (newest 100; ``state=pending``; paging with ``cursor_time``) and ``start_operation``, one
client sends ``--requests`` (1,000) of the exact requests ``yt.wrapper`` sends (``live_common.YtRequests``) back
to back over one keep-alive connection, and the scheduler process's CPU seconds (``/proc``) over those requests
are divided by their count: the cost of one request with no queue in front of it, which is what bounds the
requests/s that ``live_queue.py``'s 50 clients can get. ``--rounds`` (3) repeats each command and reports the
median. ``--sim-nodes N`` adds N simulated nodes heartbeating every second meanwhile (``live_queue.SimulatedNodes``);
then the CPU per request also carries the heartbeats' share of the same seconds, so it is reported with the
heartbeats' own CPU measured alone just before (``heartbeat_cpu_per_second``).

Usage: .venv/bin/python bench/api_cost.py [--operations 1500] [--requests 1000] [--rounds 3] [--sim-nodes 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from live_common import Local, YtRequests, machine, process_cpu_seconds, quantile_ms, read_response, yt_client
from live_queue import START_SPEC, SimulatedNodes, create_queue_pool, run_queue

KINDS = ("get_operation", "list_newest", "list_pending", "list_cursor", "start_operation")


async def _send(
    requests: YtRequests, kind: str, count: int, op_ids: list[str], starts: list[str]
) -> list[float]:
    host, port = requests.host.split(":")
    rng = random.Random(7)
    reader, writer = await asyncio.open_connection(host, int(port))
    latencies = []
    try:
        for _ in range(count):
            if kind == "get_operation":
                data = requests.get_operation(rng.choice(op_ids))
            elif kind == "start_operation":
                data = requests.start_operation()
            else:
                data = requests.list_operations(KINDS.index(kind) - 1, rng.choice(starts))
            began = time.perf_counter()
            writer.write(data)
            await writer.drain()
            status = await asyncio.wait_for(read_response(reader), 60)
            latencies.append(time.perf_counter() - began)
            if status != 200:
                raise RuntimeError(f"{kind} answered {status}")
    finally:
        writer.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--operations", type=int, default=1500)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sim-nodes", type=int, default=0)
    parser.add_argument("--sim-drivers", type=int, default=3)
    args = parser.parse_args()
    report: dict[str, Any] = {
        "name": "api_cost",
        "parameters": vars(args),
        "machine_before": machine(),
    }
    with tempfile.TemporaryDirectory(prefix="pooltree-apicost-") as tmp:
        local = Local(Path(tmp) / "data", nodes=1)
        nodes: SimulatedNodes | None = None
        try:
            if args.sim_nodes > 0:
                secret = (Path(tmp) / "data" / "node_secret").read_text().strip()
                nodes = SimulatedNodes(local.url, secret, args.sim_nodes, args.sim_drivers, 1.0)
            client = yt_client(local.url, local.token)
            create_queue_pool(client)
            _, op_ids = run_queue(local.url, local.token, args.operations, 4, 0)
            starts = [o["start_time"] for o in client.list_operations(limit=1000)["operations"]]
            requests = YtRequests(local.url, local.token, START_SPEC)
            pid = local.scheduler_pid()
            assert pid is not None
            idle = None
            if nodes is not None:
                before = process_cpu_seconds(pid) or 0.0
                time.sleep(5.0)
                idle = ((process_cpu_seconds(pid) or 0.0) - before) / 5.0
                report["heartbeat_cpu_per_second"] = round(idle, 4)
            asyncio.run(_send(requests, "get_operation", 200, op_ids, starts))  # warm-up
            results: dict[str, Any] = {}
            for kind in KINDS:
                costs, p50s, p99s = [], [], []
                for _ in range(args.rounds):
                    before = process_cpu_seconds(pid) or 0.0
                    began = time.monotonic()
                    latencies = asyncio.run(_send(requests, kind, args.requests, op_ids, starts))
                    wall = time.monotonic() - began
                    used = (process_cpu_seconds(pid) or 0.0) - before
                    if idle is not None:
                        used -= idle * wall
                    costs.append(1000 * used / args.requests)
                    p50s.append(quantile_ms(latencies, 0.5) or 0.0)
                    p99s.append(quantile_ms(latencies, 0.99) or 0.0)
                results[kind] = {
                    "cpu_ms_per_request": round(statistics.median(costs), 3),
                    "rounds": [round(c, 3) for c in costs],
                    "p50_ms": statistics.median(p50s),
                    "p99_ms": statistics.median(p99s),
                }
            report["commands"] = results
        finally:
            if nodes is not None:
                nodes.close()
            local.close()
    report["machine_after"] = machine()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
