"""Test harness for the live cluster as real processes: ``pooltree scheduler`` / ``pooltree node`` /
``pooltree local`` started with ``sys.executable -m pooltree.cli`` on 127.0.0.1, free ports, tmp directories.

Every wait is bounded in time; every process started here is stopped (SIGTERM, bounded wait, SIGKILL) by
``Procs.close()``, and job processes left behind by a SIGKILLed node are killed by their sandbox root.

Schedulers run authenticated as in production: ``Procs.scheduler`` gives them ``ROOT_TOKEN`` and ``NODE_SECRET``
through 0600 files, ``Procs.node`` the node secret file, and ``client`` / ``yt_cli`` send ``ROOT_TOKEN``.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import yt.wrapper as ytw
from loopback import free_port as free_port  # re-exported: the live tests import it from here

from pooltree.node import wire
from pooltree.security.credentials import write_secret_file

PYTHON = sys.executable
YT = str(Path(sys.executable).parent / "yt")
READY_PREFIX = "listening on "
ORCHID = "//sys/scheduler/orchid/scheduler/pool_trees"
ROOT_TOKEN = "ytct-0000-" + "9a" * 16
ROOT_AUTH = {"Authorization": f"OAuth {ROOT_TOKEN}"}
"""The root token as a request's header."""
NODE_SECRET = "ptns-live-procs-" + "5c" * 16


def _read_lines(stream: Any, sink: queue.Queue[str]) -> None:
    for raw in iter(stream.readline, b""):
        sink.put(raw.decode("utf-8", "replace"))
    sink.put("")


class Procs:
    """The processes of one test: started with ``pooltree`` subcommands, all stopped by ``close()``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.processes: list[subprocess.Popen[bytes]] = []
        self.lines: dict[int, queue.Queue[str]] = {}
        self.stdout: dict[int, list[str]] = {}
        self.token_file = root / "root-token"
        self.node_secret_file = root / "node-secret"
        self.store_key_file = root / "store-key"
        """One store key for every scheduler of the test: schedulers sharing a store must share it."""
        write_secret_file(self.token_file, ROOT_TOKEN)
        write_secret_file(self.node_secret_file, NODE_SECRET)

    def spawn(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """``pooltree ARGS`` with this environment and ``env``'s variables on top of it."""
        log = open(self.root / f"proc-{len(self.processes)}-{args[0]}.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(
            [PYTHON, "-m", "pooltree.cli", *args],
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=None if env is None else {**os.environ, **env},
        )
        log.close()
        self.processes.append(process)
        sink: queue.Queue[str] = queue.Queue()
        self.lines[process.pid] = sink
        self.stdout[process.pid] = []
        threading.Thread(target=_read_lines, args=(process.stdout, sink), daemon=True).start()
        return process

    def read_until(self, process: subprocess.Popen[bytes], marker: str, timeout: float = 60.0) -> str:
        """The first stdout line of ``process`` containing ``marker`` (fails on exit or timeout)."""
        deadline = time.monotonic() + timeout
        sink = self.lines[process.pid]
        while time.monotonic() < deadline:
            try:
                line = sink.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.stdout[process.pid].append(line)
            if line == "":
                raise AssertionError(f"process exited ({process.wait(5)}) before printing {marker!r}")
            if marker in line:
                return line.strip()
        raise AssertionError(f"no {marker!r} within {timeout} s")

    def scheduler(
        self, data: Path, port: int = 0, *extra: str, env: dict[str, str] | None = None
    ) -> tuple[subprocess.Popen[bytes], str]:
        process = self.spawn(
            "scheduler", "--data", str(data), "--port", str(port), "--create-default-tree",
            "--token-file", str(self.token_file), "--node-secret-file", str(self.node_secret_file),
            "--store-key-file", str(self.store_key_file), *extra, env=env,
        )  # fmt: skip
        line = self.read_until(process, READY_PREFIX)
        return process, line[len(READY_PREFIX) :]

    def node(
        self, url: str, address: str, resources: str = "user_slots=2,cpu=2,memory=4Gi"
    ) -> subprocess.Popen[bytes]:
        return self.spawn(
            "node",
            "--scheduler",
            url,
            "--address",
            address,
            "--root",
            str(self.root / "nodes" / address),
            "--resources",
            resources,
            "--memory-meter",
            "psutil",
            "--node-secret-file",
            str(self.node_secret_file),
        )

    def stop(self, process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Signal ``process`` and wait (bounded); SIGKILL if it does not exit."""
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        return process.returncode

    def close(self) -> None:
        for process in reversed(self.processes):
            self.stop(process)
        kill_jobs_under(self.root)


def kill_jobs_under(root: Path) -> None:
    """Kill job processes whose working directory is under ``root`` (left behind by a SIGKILLed node)."""
    prefix = str(root.resolve())
    for proc in psutil.process_iter(["pid", "cwd"]):
        cwd = proc.info.get("cwd") or ""
        if cwd.startswith(prefix) and proc.pid != os.getpid():
            try:
                proc.kill()
            except psutil.Error:
                continue


def client(url: str, token: str | None = ROOT_TOKEN) -> ytw.YtClient:
    """The official Python client against ``url`` with ``token`` (root's by default; no proxy discovery)."""
    return ytw.YtClient(proxy=url, token=token, config={"proxy": {"enable_proxy_discovery": False}})


def yt_cli(
    url: str, home: Path, *args: str, check: bool = True, timeout: float = 60, token: str | None = ROOT_TOKEN
) -> subprocess.CompletedProcess[str]:
    """Run the official ``yt`` command with ``YT_PROXY=url``, ``YT_TOKEN=token`` and a private HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("YT_")}
    env.update(HOME=str(home), YT_PROXY=url)
    if token is not None:
        env["YT_TOKEN"] = token
    result = subprocess.run([YT, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, f"yt {' '.join(args)} failed ({result.returncode}):\n{result.stderr}"
    return result


def vanilla(command: str, job_count: int, *, pool: str | None = None, **spec: Any) -> ytw.VanillaSpecBuilder:
    builder = ytw.VanillaSpecBuilder().begin_task("main").command(command).job_count(job_count).end_task()
    if pool is not None:
        spec["pool"] = pool
    return builder.spec(spec) if spec else builder


def state(yt: ytw.YtClient, op_id: str) -> str:
    return yt.get_operation(op_id, attributes=["state"])["state"]


def slotless_heartbeat(address: str) -> bytes:
    """A node's first heartbeat in the wire format, offering no resources (so it is never given a job), with no
    jobs to report: for tests of who may heartbeat, not of scheduling."""
    return wire.encode(
        wire.heartbeat(
            address,
            sequence=1,
            time=0.0,
            resource_limits={"user_slots": 0, "cpu": 0, "memory": 0},
            resource_usage={},
            memory_limit=0.0,
            memory_usage=0,
            memory_meter="none",
            running_jobs=(),
            finished_jobs=(),
        )
    )


NODE_HEADERS = {"X-Pooltree-Node-Secret": NODE_SECRET, "Content-Type": wire.MEDIA_TYPE}
"""The headers of a node's heartbeat with the test cluster's node secret."""
