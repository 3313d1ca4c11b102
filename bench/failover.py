"""Benchmark scheduler failover on PostgreSQL: kill -9 of the leader with a hot standby running; prints one JSON.

Starts a private PostgreSQL server (``initdb`` in a temp dir, as in the test suite) unless ``--store`` names a
database, two ``pooltree scheduler`` processes on it (the first leads, the second stands by) and ``--nodes`` node
processes given both addresses (``--scheduler A,B``). Each round submits ``--operations`` operations of ``--jobs``
jobs of ``sleep --job-seconds`` to the leader, waits until their jobs run, SIGKILLs the leader and measures the time
until a ``start_operation`` sent to the survivor every 50 ms is answered (``time_to_answer_s``); the killed
scheduler is then started again on its port as the new standby. After ``--kills`` rounds every operation must
complete; reported: operations acknowledged, lost (acknowledged but missing or not completed) and duplicated (in
the store but never acknowledged), jobs lost (fewer completed than ``job_count``) and duplicated (more jobs than
``job_count`` were started), plus the machine's load.

Usage: .venv/bin/python bench/failover.py [--kills 5] [--nodes 2] [--operations 2] [--jobs 2] [--job-seconds 2]
       [--store postgresql://...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from loopback import free_port
from pg_server import PgServer
from polling import wait_for

READY = "listening on "


class Process:
    """A ``pooltree`` subcommand with its stdout lines in a queue."""

    def __init__(self, root: Path, name: str, *args: str) -> None:
        log = open(root / f"{name}.log", "ab")  # noqa: SIM115
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "pooltree.cli", *args],
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in iter(self.popen.stdout.readline, b""):
            self.lines.put(raw.decode("utf-8", "replace"))
        self.lines.put("")

    def wait_line(self, marker: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line == "":
                raise RuntimeError(f"process exited ({self.popen.wait(5)}) before printing {marker!r}")
            if marker in line:
                return line.strip()
        raise RuntimeError(f"no {marker!r} within {timeout} s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


HEADERS: dict[str, str] = {}
"""``Authorization`` with the superuser token both schedulers share (set in ``main``)."""


def call(url: str, command: str, timeout: float = 10.0, **params: Any) -> httpx.Response:
    return httpx.post(f"{url}/api/v4/{command}", json=params, headers=HEADERS, timeout=timeout)


def start(url: str, command: str, jobs: int) -> str | None:
    spec = {"tasks": {"main": {"command": command, "job_count": jobs}}}
    try:
        response = call(url, "start_operation", operation_type="vanilla", spec=spec)
    except httpx.HTTPError:
        return None
    return response.json()["operation_id"] if response.status_code == 200 else None


def running_jobs(url: str, op_ids: list[str]) -> int:
    total = 0
    for op in op_ids:
        try:
            response = call(url, "list_jobs", operation_id=op, job_state="running", limit=1000)
        except httpx.HTTPError:
            return -1
        if response.status_code != 200:
            return -1
        total += len(response.json()["jobs"])
    return total


def scheduler(root: Path, name: str, port: int, store: str) -> Process:
    data = root / name
    return Process(root, name, "scheduler", "--store", store, "--data", str(data), "--port", str(port),
                   "--create-default-tree", "--heartbeat-period", "0.2",
                   "--token-file", str(root / "token"), "--node-secret-file", str(root / "node_secret"),
                   "--store-key-file", str(root / "store_key"))  # fmt: skip


def write_secret(path: Path, value: str) -> None:
    path.write_text(value + "\n")
    path.chmod(0o600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--operations", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--job-seconds", type=float, default=2.0)
    parser.add_argument("--store", default=None, help="a PostgreSQL URL (default: a private server)")
    args = parser.parse_args()

    pg = PgServer.create() if args.store is None else None
    store = args.store or (pg.url if pg else "")
    root = Path(tempfile.mkdtemp(prefix="pooltree-failover-"))
    token = secrets.token_hex(16)
    write_secret(root / "token", token)
    write_secret(root / "node_secret", secrets.token_hex(16))
    HEADERS["Authorization"] = f"OAuth {token}"
    processes: list[Process] = []
    acknowledged: list[str] = []
    expected: dict[str, int] = {}
    times: list[float] = []
    try:
        ports = [free_port(), free_port()]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        schedulers: list[Process | None] = [scheduler(root, "s0", ports[0], store), None]
        schedulers[0].wait_line("role: leader")  # type: ignore[union-attr]
        schedulers[0].wait_line(READY)  # type: ignore[union-attr]
        schedulers[1] = scheduler(root, "s1", ports[1], store)
        schedulers[1].wait_line("role: standby")
        processes.extend(s for s in schedulers if s is not None)
        for index in range(args.nodes):
            node = Process(root, f"n{index}", "node", "--scheduler", ",".join(urls), "--address", f"n{index}",
                           "--root", str(root / "nodes" / f"n{index}"), "--memory-meter", "psutil",
                           "--resources", "user_slots=4,cpu=4,memory=4Gi",
                           "--node-secret-file", str(root / "node_secret"))  # fmt: skip
            processes.append(node)
        leader = 0
        for _ in range(args.kills):
            url = urls[leader]
            batch = [
                wait_for(lambda url=url: start(url, f"sleep {args.job_seconds}", args.jobs), 30)
                for _ in range(args.operations)
            ]
            acknowledged.extend(batch)
            expected.update(dict.fromkeys(batch, args.jobs))
            wait_for(lambda url=url, batch=batch: running_jobs(url, batch) > 0, 30)
            victim = schedulers[leader]
            assert victim is not None
            victim.stop(signal.SIGKILL)
            killed = time.monotonic()
            survivor = urls[1 - leader]
            answered = wait_for(lambda survivor=survivor: start(survivor, "true", 1), 60, period=0.05)
            times.append(time.monotonic() - killed)
            acknowledged.append(answered)
            expected[answered] = 1
            restarted = scheduler(root, f"s{leader}", ports[leader], store)
            restarted.wait_line("role: standby")
            schedulers[leader] = restarted
            processes.append(restarted)
            leader = 1 - leader
        url = urls[leader]

        def all_final() -> bool:
            for op in acknowledged:
                response = call(url, "get_operation", operation_id=op, attributes=["state"])
                if response.status_code != 200 or response.json()["state"] not in (
                    "completed",
                    "failed",
                    "aborted",
                ):
                    return False
            return True

        wait_for(all_final, 120, period=0.2)
        listed = {op["id"]: op for op in call(url, "list_operations", limit=1000).json()["operations"]}
        lost_ops = [op for op in acknowledged if listed.get(op, {}).get("state") != "completed"]
        duplicated_ops = [op for op in listed if op not in set(acknowledged)]
        jobs_lost = jobs_duplicated = 0
        for op in acknowledged:
            job_list = call(url, "list_jobs", operation_id=op, limit=10000).json()["jobs"]
            completed = sum(1 for job in job_list if job["state"] == "completed")
            jobs_lost += max(0, expected[op] - completed)
            jobs_duplicated += max(0, len(job_list) - expected[op])
        result = {
            "benchmark": "failover",
            "store": "postgresql",
            "kills": args.kills,
            "nodes": args.nodes,
            "operations_per_round": args.operations,
            "jobs_per_operation": args.jobs,
            "time_to_answer_s": {
                "median": round(statistics.median(times), 3),
                "max": round(max(times), 3),
                "all": [round(t, 3) for t in times],
            },
            "operations": {
                "acknowledged": len(acknowledged),
                "lost": len(lost_ops),
                "duplicated": len(duplicated_ops),
            },
            "jobs": {"lost": jobs_lost, "duplicated": jobs_duplicated},
            "machine": {
                "cpus": os.cpu_count(),
                "load_average_1m": round(os.getloadavg()[0], 2),
                "python": platform.python_version(),
            },
        }
        print(json.dumps(result, indent=2))
    finally:
        for process in reversed(processes):
            process.stop()
        if pg is not None:
            pg.destroy()


if __name__ == "__main__":
    main()
