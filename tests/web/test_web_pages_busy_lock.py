"""The web pages do not wait for the scheduling lock: while a slow heartbeat holds it, a page read in the last
second is answered from what it read then (``RecentReads``); a page whose last read is older waits for the lock."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from pooltree.server.live.reads import RECENT_READ_PERIOD
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

TOKEN = "s3cret-token-0123456789"
WAIT = 30.0
SPEC = {"tasks": {"main": {"command": "true", "job_count": 2, "cpu_limit": 1}}}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[SchedulerService]:
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), token=TOKEN, create_default_tree=True
    )
    await service.start()
    try:
        yield service
    finally:
        await service.stop()
        service.store.close()


@pytest.mark.anyio
async def test_pages_are_answered_while_a_slow_heartbeat_holds_the_lock(service: SchedulerService) -> None:
    now = [1000.0]
    service.web.reads.clock = lambda: now[0]
    service.commands.clock = lambda: now[0]  # the operation page's map too (get_operation's rule)
    op = service.scheduler.start_operation("vanilla", SPEC, "root", service.clock())
    pages = ["/", "/nodes", "/history", f"/operation/{op.id}", "/operations"]
    transport = httpx.ASGITransport(app=service.app)
    headers = {"Authorization": f"OAuth {TOKEN}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as web:
        for path in pages:
            assert (await web.get(path)).status_code == 200, path
        holder_has_lock, release = threading.Event(), threading.Event()

        def slow_heartbeat() -> None:
            with service.scheduler.lock:
                holder_has_lock.set()
                release.wait(WAIT)

        threading.Thread(target=slow_heartbeat, daemon=True).start()
        assert await asyncio.to_thread(holder_has_lock.wait, WAIT)
        try:
            served = service.web.reads.served
            for path in pages:
                page = await asyncio.wait_for(web.get(path), WAIT)
                assert page.status_code == 200, path
            assert service.web.reads.served - served >= 4  # scheduling, nodes, history, operation
            now[0] += RECENT_READ_PERIOD + 0.5  # what was read is too old now: a read waits for the lock
            late = asyncio.ensure_future(web.get("/nodes"))
            done, _ = await asyncio.wait({late}, timeout=0.5)
            assert not done
        finally:
            release.set()
        assert (await asyncio.wait_for(late, WAIT)).status_code == 200
