"""``LocalCluster``: one scheduler and N exec nodes as child processes of ``pooltree local`` on this machine.

The scheduler prints ``listening on URL`` once it accepts connections; the cluster waits for that and for its API,
then starts the nodes (each ``pooltree node`` with its own address and sandbox root under ``DATA/nodes``, sized by
``sizing.size_nodes`` unless ``--node-resources`` says otherwise). ``supervise`` restarts a node that dies (after
a backoff; one in a crash loop is left down with a line naming it); the scheduler's death stops the cluster;
``stop`` ends the nodes first (they abort and report their jobs), then the scheduler, SIGKILL after a bounded wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from pooltree.errors import PooltreeError
from pooltree.local.sizing import NodeSizing, check_node_limits, size_nodes
from pooltree.node.agent import detect_resource_limits
from pooltree.node.service import parse_resources_option
from pooltree.security.credentials import (
    NODE_SECRET_FILE,
    TOKEN_FILE,
    ensure_secret_file,
    new_node_secret,
    new_token,
)

READY_PREFIX = "listening on "
"""What ``pooltree scheduler`` prints on stdout, before its URL, once it accepts connections."""
ROLE_PREFIX = "role: "
START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
NODE_RESTART_BACKOFF = 0.5
NODE_RESTART_MAX_BACKOFF = 10.0
"""A dead node is restarted after 0.5 s, doubling with each death in the window, at most 10 s."""
NODE_RESTART_LIMIT = 5
NODE_RESTART_WINDOW = 60.0
"""A node that died this many times within the window is left down (a crash loop, not a one-off death)."""


class LocalCluster:
    """One scheduler and N node processes (``sys.executable -m pooltree.cli ...``) under one data directory."""

    def __init__(
        self,
        data: Path,
        *,
        nodes: int = 2,
        port: int = 0,
        node_resources: str | None = None,
        node_heartbeat_timeout: float = 60.0,
        memory_meter: str = "auto",
        heartbeat_period: float = 1.0,
        fair_share_update_period: float = 1.0,
        isolation: str = "auto",
        read_process: bool = False,
    ) -> None:
        self.data = data
        self.read_process = read_process
        """The scheduler's ``--read-process`` (``pooltree/reads``)."""
        self.isolation = isolation
        """The nodes' ``--isolation`` (``node/isolation.py``)."""
        self.heartbeat_period = heartbeat_period
        self.fair_share_update_period = fair_share_update_period
        self.nodes = nodes
        self.port = port
        self.node_resources = node_resources
        self.node_heartbeat_timeout = node_heartbeat_timeout
        self.memory_meter = memory_meter
        self.scheduler: asyncio.subprocess.Process | None = None
        self.node_processes: list[asyncio.subprocess.Process] = []
        self.url: str | None = None
        self.node_exits: list[list[float]] = []
        """Per node, the monotonic times it exited unexpectedly (restarts are bounded by these)."""
        self.given_up: set[int] = set()
        """Nodes that kept dying and are no longer restarted (the cluster goes on without them)."""
        self._restart_at: dict[int, float] = {}
        self._stopping = False
        self.token_file = data / TOKEN_FILE
        self.node_secret_file = data / NODE_SECRET_FILE
        self.token_created = False
        self.sizing = self._size()
        """Each node's ``--resources`` and what start-up says about them (``sizing.py``)."""

    def _size(self) -> NodeSizing:
        if self.node_resources is None:
            return size_nodes(self.nodes)
        given = detect_resource_limits(parse_resources_option(self.node_resources, "--node-resources"))
        return NodeSizing(self.node_resources, check_node_limits(given))

    @staticmethod
    def _command(*args: str) -> list[str]:
        return [sys.executable, "-m", "pooltree.cli", *args]

    async def start(self) -> str:
        """Start the scheduler, wait for its URL and API, start the nodes; returns the proxy URL."""
        self.data.mkdir(parents=True, exist_ok=True)
        self.token_created = not self.token_file.exists()
        ensure_secret_file(self.token_file, "token", new_token)
        ensure_secret_file(self.node_secret_file, "node secret", new_node_secret)
        self.scheduler = await asyncio.create_subprocess_exec(
            *self._command(
                "scheduler",
                "--data",
                str(self.data),
                "--token-file",
                str(self.token_file),
                "--node-secret-file",
                str(self.node_secret_file),
                "--port",
                str(self.port),
                "--create-default-tree",
                "--node-heartbeat-timeout",
                str(self.node_heartbeat_timeout),
                "--heartbeat-period",
                str(self.heartbeat_period),
                "--fair-share-update-period",
                str(self.fair_share_update_period),
                "--read-process" if self.read_process else "--no-read-process",
            ),
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self.url = await self._read_ready_line(self.scheduler)
        for index in range(self.nodes):
            self.node_processes.append(await self._start_node(index))
            self.node_exits.append([])
        await self._wait_api(self.url)
        return self.url

    async def _start_node(self, index: int) -> asyncio.subprocess.Process:
        """Start node ``node-INDEX`` (the same address and sandbox root each time: a restarted node kills the
        job processes its predecessor left there before it heartbeats)."""
        assert self.url is not None
        address = f"node-{index}"
        args = ["node", "--scheduler", self.url, "--address", address]
        args += ["--root", str(self.data / "nodes" / address), "--memory-meter", self.memory_meter]
        args += ["--node-secret-file", str(self.node_secret_file), "--isolation", self.isolation]
        node_resources = self.sizing.resources
        if node_resources:
            args += ["--resources", node_resources]
        return await asyncio.create_subprocess_exec(*self._command(*args), start_new_session=True)

    async def _read_ready_line(self, process: asyncio.subprocess.Process) -> str:
        assert process.stdout is not None
        try:
            async with asyncio.timeout(START_TIMEOUT):
                while True:
                    line = await process.stdout.readline()
                    if not line:
                        code = await process.wait()
                        raise PooltreeError(f"the scheduler exited with status {code} before listening")
                    text = line.decode("utf-8", "replace").strip()
                    if text.startswith(READY_PREFIX):
                        return text[len(READY_PREFIX) :]
        except TimeoutError:
            raise PooltreeError(f"the scheduler did not start within {START_TIMEOUT:.0f} s") from None

    async def _wait_api(self, url: str) -> None:
        async with httpx.AsyncClient(timeout=2.0) as client:
            for _ in range(200):
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{url}/api/v4")).status_code == 200:
                        return
                await asyncio.sleep(0.05)
        raise PooltreeError(f"the scheduler at {url} does not answer /api/v4")

    def exited(self) -> str | None:
        """A description of the scheduler's exit, or None while it runs (nodes are supervised by ``supervise``)."""
        if self.scheduler is not None and self.scheduler.returncode is not None:
            return f"the scheduler exited with {_exit_status(self.scheduler.returncode)}"
        return None

    async def supervise(self, now: float | None = None) -> list[str]:
        """Restart nodes that died (after a short backoff growing with repeated deaths); a node that died
        ``NODE_RESTART_LIMIT`` times within ``NODE_RESTART_WINDOW`` seconds is left down and the cluster goes on
        with the others. Returns what happened, one line per event, for the log."""
        if self._stopping:
            return []
        now = time.monotonic() if now is None else now
        events: list[str] = []
        for index, process in enumerate(self.node_processes):
            if process.returncode is None or index in self.given_up:
                continue
            if index not in self._restart_at:
                exits = [t for t in self.node_exits[index] if now - t < NODE_RESTART_WINDOW] + [now]
                self.node_exits[index] = exits
                status = _exit_status(process.returncode)
                if len(exits) >= NODE_RESTART_LIMIT:
                    self.given_up.add(index)
                    running = self.nodes - len(self.given_up)
                    events.append(
                        f"node-{index} exited with {status} ({len(exits)} times in {NODE_RESTART_WINDOW:.0f} s); "
                        f"not restarting it, the cluster goes on with {running} of {self.nodes} nodes"
                    )
                    continue
                delay = min(NODE_RESTART_BACKOFF * 2 ** (len(exits) - 1), NODE_RESTART_MAX_BACKOFF)
                self._restart_at[index] = now + delay
                events.append(f"node-{index} exited with {status}; restarting it in {delay:.1f} s")
            if now >= self._restart_at[index]:
                del self._restart_at[index]
                self.node_processes[index] = await self._start_node(index)
                events.append(f"node-{index} restarted (pid {self.node_processes[index].pid})")
        return events

    async def stop(self) -> None:
        """Nodes first (they abort their jobs and report), then the scheduler; SIGKILL after a bounded wait."""
        self._stopping = True
        await _terminate(self.node_processes)
        if self.scheduler is not None:
            await _terminate([self.scheduler])


def _exit_status(code: int) -> str:
    """``status 3`` or ``signal SIGKILL`` (asyncio reports death by a signal as a negative return code)."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"


async def _terminate(processes: Sequence[asyncio.subprocess.Process]) -> None:
    alive = [process for process in processes if process.returncode is None]
    for process in alive:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
    if not alive:
        return
    _, pending = await asyncio.wait([asyncio.ensure_future(p.wait()) for p in alive], timeout=STOP_TIMEOUT)
    for process in alive:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
    for task in pending:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5.0)
