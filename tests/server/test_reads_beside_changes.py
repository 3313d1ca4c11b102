"""Reads that need no scheduling lock are answered while changes wait for it: commands run on worker threads in
two queues (``app.COMMAND_THREADS`` each), so starts blocked on the lock (held by a fair-share update or
heartbeats) never hold every thread a ``list_operations`` could run on."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from busy_lock import held_elsewhere

from pooltree.server.app import COMMAND_THREADS
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
