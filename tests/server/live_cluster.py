"""Test harness: a real scheduler (``serve`` under uvicorn on 127.0.0.1) and real ``NodeAgent``s in one background
event loop, driven from the test thread with httpx, ``yt.wrapper.YtClient`` and the ``yt`` CLI.

Every wait is bounded; ``stop()`` ends agents (their jobs are killed) and the scheduler.

The scheduler is authenticated as in production: ``ROOT_TOKEN`` is the superuser's token (pass it to clients, see
``client``) and nodes send ``NODE_SECRET``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import yt.wrapper as ytw
from polling import wait_for

from pooltree.node import wire
from pooltree.node.agent import NodeAgent
from pooltree.node.executor import JobExecutor
from pooltree.node.files import BlobCache, http_blob_source, upload_stderr
from pooltree.node.service import NODE_SECRET_HEADER
from pooltree.resources import vector
from pooltree.server.service import serve

GIB = 1024**3
YT = str(Path(sys.executable).parent / "yt")
"""The official ``yt`` CLI installed beside this interpreter."""
ROOT_TOKEN = "ytct-0000-" + "5eed" * 8
"""The superuser (root) token every test scheduler is started with."""
NODE_SECRET = "ptns-test-node-secret-" + "ab" * 16
"""The cluster node secret every test scheduler expects from its nodes."""


def client(url: str, token: str | None = ROOT_TOKEN, **config: object) -> ytw.YtClient:
    """The official Python client against ``url`` with ``token`` (root's by default), no proxy discovery."""
    return ytw.YtClient(proxy=url, token=token, config={"proxy": {"enable_proxy_discovery": False}, **config})


def auth_headers(token: str = ROOT_TOKEN) -> dict[str, str]:
    return {"Authorization": f"OAuth {token}"}


class Loop:
    """An asyncio loop in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def submit(self, coroutine: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, Any], timeout: float = 30.0) -> Any:
        return self.submit(coroutine).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


class Scheduler:
    """``serve(store_url)`` running in the loop until ``stop()`` (root token ``ROOT_TOKEN``, ``NODE_SECRET``)."""

    def __init__(self, loop: Loop, store_url: str, **kwargs: Any) -> None:
        kwargs.setdefault("token", ROOT_TOKEN)
        kwargs.setdefault("node_secret", NODE_SECRET)
        self.loop = loop
        ready: concurrent.futures.Future[str] = concurrent.futures.Future()
        self._stop: asyncio.Event | None = None

        async def main() -> None:
            self._stop = asyncio.Event()
            await serve(store_url, on_ready=ready.set_result, stop=self._stop, **kwargs)

        self.task = loop.submit(main())
        try:
            self.url = ready.result(timeout=30)
        except concurrent.futures.TimeoutError:
            if self.task.done():
                self.task.result()
            raise

    def stop(self) -> None:
        stop = self._stop
        if stop is not None:
            self.loop.loop.call_soon_threadsafe(stop.set)
        self.task.result(timeout=30)


class Node:
    """A ``NodeAgent`` with a real ``JobExecutor`` heartbeating to ``scheduler_url`` (switchable)."""

    def __init__(
        self,
        loop: Loop,
        root: Path,
        address: str,
        scheduler_url: str,
        *,
        slots: int = 2,
        node_secret: str | None = NODE_SECRET,
        period: float = 0.1,
        isolation: str = "auto",
        tags: Sequence[str] = (),
        statistics_backoff: float = wire.RUNNING_STATISTICS_BACKOFF,
    ) -> None:
        self.loop = loop
        self.scheduler_url = scheduler_url
        self.period = period
        self.tags = list(tags)
        """Node tags sent with every heartbeat (for pool trees' ``nodes_filter``)."""
        self.node_secret = node_secret
        self.heartbeats = 0
        self.errors: list[str] = []
        self.paused = False

        async def build() -> NodeAgent:
            executor = JobExecutor(
                root / address,
                memory_meter="psutil",
                memory_sample_period=0.1,
                abort_grace=0.5,
                isolation=isolation,
            )
            return NodeAgent(
                address,
                executor,
                vector(user_slots=slots, cpu=slots, memory=8 * GIB, network=100),
                running_statistics_backoff=statistics_backoff,
            )

        self.agent: NodeAgent = loop.run(build())
        self.agent.executor.file_source = BlobCache(
            root / address / ".files",
            http_blob_source(
                lambda: self.scheduler_url,
                lambda: {NODE_SECRET_HEADER: self.node_secret} if self.node_secret else {},
            ),
        ).get
        self._running = True
        self.task = loop.submit(self._loop())

    async def _loop(self) -> None:
        headers = {NODE_SECRET_HEADER: self.node_secret} if self.node_secret else {}
        async with httpx.AsyncClient(timeout=10) as client:
            while self._running:
                if not self.paused:
                    if self.agent.pending_stderr_uploads():
                        await asyncio.to_thread(upload_stderr, self.agent, self.scheduler_url, headers)
                    try:
                        body = self.agent.build_heartbeat()
                        if self.tags:
                            body["tags"] = self.tags
                        response = await client.post(
                            f"{self.scheduler_url}/internal/node_heartbeat", json=body, headers=headers
                        )
                        if response.status_code == 200:
                            body = response.json()
                            body.pop("heartbeat_period", None)
                            await self.agent.apply_response_map(body)
                            self.heartbeats += 1
                        else:
                            self.errors.append(response.text)
                    except httpx.HTTPError as error:
                        self.errors.append(str(error))
                await self.agent.wait_for_heartbeat_needed(self.period)

    def stop(self) -> None:
        self._running = False
        try:
            self.task.result(timeout=15)
        finally:
            self.loop.run(self.agent.shutdown())


class Cluster:
    """One scheduler on a SQLite file plus nodes; everything stopped by ``close()``."""

    def __init__(
        self,
        root: Path,
        *,
        nodes: int = 1,
        slots: int = 2,
        db: str | None = None,
        isolation: str = "auto",
        node_tags: Mapping[int, Sequence[str]] | None = None,
        statistics_backoff: float = wire.RUNNING_STATISTICS_BACKOFF,
        **kwargs: object,
    ) -> None:
        self.root = root
        self.db = db or f"sqlite:///{root / 'state.db'}"
        self.kwargs = {"create_default_tree": True, **kwargs}
        self.token = str(self.kwargs.get("token", ROOT_TOKEN))
        self.node_secret = str(self.kwargs.get("node_secret", NODE_SECRET))
        self.loop = Loop()
        self.scheduler: Scheduler | None = Scheduler(self.loop, self.db, **self.kwargs)
        self.nodes = [
            Node(
                self.loop,
                root / "nodes",
                f"node{i}",
                self.url,
                slots=slots,
                node_secret=self.node_secret,
                isolation=isolation,
                tags=(node_tags or {}).get(i, ()),
                statistics_backoff=statistics_backoff,
            )
            for i in range(nodes)
        ]

    @property
    def url(self) -> str:
        assert self.scheduler is not None
        return self.scheduler.url

    def restart_scheduler(self, while_down: Callable[[], object] | None = None) -> None:
        assert self.scheduler is not None
        self.scheduler.stop()
        self.scheduler = None
        if while_down is not None:
            while_down()
        self.scheduler = Scheduler(self.loop, self.db, **{**self.kwargs, "create_default_tree": False})
        for node in self.nodes:
            node.scheduler_url = self.url

    def client(self, token: str | None = None) -> ytw.YtClient:
        return client(self.url, token or self.token)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("YT_")}
        env.update(HOME=str(self.root), YT_PROXY=self.url, YT_TOKEN=self.token)
        result = subprocess.run([YT, *args], env=env, capture_output=True, text=True, timeout=60)
        if check:
            assert result.returncode == 0, f"yt {' '.join(args)} failed:\n{result.stderr}"
        return result

    def close(self) -> None:
        try:
            for node in self.nodes:
                node.stop()
        finally:
            if self.scheduler is not None:
                self.scheduler.stop()
            self.loop.close()


def run_python_callable(cluster: Cluster, python: str) -> tuple[str, list[bytes]]:
    """``job_functions.square_to_stderr`` as a vanilla task of 2 jobs started through ``yt.wrapper`` from a process
    of its own (``callable_client.py`` says why), run with the jobs' ``python``; waits for it to end and returns
    the operation id and its jobs' stderrs, having checked that it completed."""
    started = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("callable_client.py")),
            cluster.url,
            cluster.token,
            python,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert started.returncode == 0, started.stderr
    op_id = started.stdout.split()[-1]
    client = cluster.client()
    wait_for(lambda: client.get_operation(op_id)["state"] in ("completed", "failed", "aborted"), timeout=300)
    stderrs = [client.get_job_stderr(op_id, job["id"]).read() for job in client.list_jobs(op_id)["jobs"]]
    assert client.get_operation(op_id)["state"] == "completed", stderrs
    return op_id, stderrs
