"""Reads that need no scheduling lock are answered while changes wait for it: commands run on worker threads in
two queues (``app.COMMAND_THREADS`` each), so starts blocked on the lock (held by a fair-share update or
heartbeats) never hold every thread a ``list_operations`` could run on."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from busy_lock import held_elsewhere
from live_cluster import Cluster, auth_headers

from pooltree.server.app import COMMAND_THREADS, YtApi
from pooltree.server.commands import CommandContext, Encoded
from pooltree.server.operation_listing import OperationListing
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

TOKEN = "ytct-0000-" + "d1ec" * 8
START = {"operation_type": "vanilla", "spec": {"tasks": {"main": {"command": "true", "job_count": 1}}}}
ANSWER_WITHIN = 10.0
"""Seconds a read may take while the lock is held (the holder keeps it for ``busy_lock.WAIT``, 30 s)."""


@pytest.mark.anyio
async def test_a_listing_is_answered_while_starts_wait_for_the_lock(tmp_path: Path) -> None:
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), create_default_tree=True, token=TOKEN
    )
    await service.start()
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=service.asgi),
        base_url="http://test",
        headers={"Authorization": f"OAuth {TOKEN}"},
        timeout=60,
    )
    try:
        first = await client.post("/api/v4/start_operation", json=START)
        assert first.status_code == 200, first.text
        with held_elsewhere(service.scheduler.lock):
            # more starts than a queue has threads: each blocks on the lock in its thread
            starts = [
                asyncio.ensure_future(client.post("/api/v4/start_operation", json=START))
                for _ in range(COMMAND_THREADS + 1)
            ]
            deadline = time.monotonic() + ANSWER_WITHIN
            while service.scheduler.lock._blocked < COMMAND_THREADS:  # every thread of theirs waits on it
                assert time.monotonic() < deadline, "the starts never reached the lock"
                await asyncio.sleep(0.01)
            listing = await asyncio.wait_for(client.get("/api/v4/list_operations"), ANSWER_WITHIN)
            assert listing.status_code == 200, listing.text
            assert [op["id"] for op in listing.json()["operations"]] == [first.json()["operation_id"]]
            assert not any(start.done() for start in starts)  # the lock is still held: they still wait
        answers = await asyncio.gather(*starts)
        assert all(answer.status_code == 200 for answer in answers)
    finally:
        await client.aclose()
        await service.stop()


def test_a_read_thread_takes_the_next_read_while_the_event_loop_is_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read thread that ends a command takes the next one queued without a turn of the event loop: with anyio's
    limiter the turn was handed on by the loop (three turns of a busy loop per command), so a ~1 ms listing waited
    ~130 ms for a thread beside 50 clients (``live_queue.py``)."""
    gate = threading.Event()
    entered: list[int] = []
    original_listing = OperationListing.list_operations_encoded
    original_body = YtApi._read_body

    def listing(self: OperationListing, ctx: CommandContext) -> Encoded:
        entered.append(len(entered))
        if len(entered) <= COMMAND_THREADS:  # the first listings hold every read thread until the gate opens
            assert gate.wait(ANSWER_WITHIN)
        return original_listing(self, ctx)

    blocked: list[bool] = []

    def block_the_loop() -> None:
        """On the event loop: open the gate and wait (bounded) for the queued listing to start meanwhile."""
        gate.set()
        deadline = time.monotonic() + ANSWER_WITHIN
        while len(entered) <= COMMAND_THREADS and time.monotonic() < deadline:
            time.sleep(0.001)  # the loop is held on purpose: only threads may move the listing on
        blocked.append(len(entered) > COMMAND_THREADS)

    async def read_body(request: Any) -> bytes:
        body = await original_body(request)
        if request.path_params.get("command") == "list_operations" and len(entered) == COMMAND_THREADS:
            # the last listing: queued for a thread before the loop runs its next callback, this one
            asyncio.get_running_loop().call_soon(block_the_loop)
        return body

    monkeypatch.setattr(OperationListing, "list_operations_encoded", listing)
    monkeypatch.setattr(YtApi, "_read_body", staticmethod(read_body))
    cluster = Cluster(tmp_path, nodes=0)
    try:
        url = f"{cluster.url}/api/v4/list_operations"
        with ThreadPoolExecutor(COMMAND_THREADS + 1) as clients:
            first = [
                clients.submit(httpx.get, url, headers=auth_headers(), timeout=60)
                for _ in range(COMMAND_THREADS)
            ]
            deadline = time.monotonic() + ANSWER_WITHIN
            while len(entered) < COMMAND_THREADS:
                assert time.monotonic() < deadline, "the first listings never reached their threads"
                time.sleep(0.01)
            last = clients.submit(httpx.get, url, headers=auth_headers(), timeout=60)
            answers = [future.result(60) for future in [*first, last]]
        assert all(answer.status_code == 200 for answer in answers)
        assert blocked == [True], "the queued listing waited for the event loop to start"
    finally:
        cluster.close()
