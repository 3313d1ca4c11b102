"""Heartbeats processed on the service's event loop (``heartbeat_flight.HeartbeatFlight``): the scheduling
lock wakes the loop when released (``live/lock.py``), the group commit has event-loop waiters
(``GroupCommit.wait_async``), and over real HTTP a heartbeat that meets a held lock is answered after the lock is
released while the loop keeps answering other requests."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from pooltree.node import wire
from pooltree.server.live.commit import GroupCommit
from pooltree.server.live.lock import SchedulingLock
from pooltree.server.service import SchedulerService
from pooltree.server.store import JobRecord, open_store

sys.path.insert(0, str(Path(__file__).parent))
from heartbeat_maps import node_heartbeat, published

WAIT = 30.0
TOKEN = "ytct-0000-" + "7a11" * 8
SECRET = "ptns-test-node-secret-" + "cd" * 16


def _record(job_id: str) -> JobRecord:
    return JobRecord("op", job_id, "running", "n1", 1.0, None, None, {})


def test_a_release_by_another_thread_wakes_the_loop() -> None:
    lock = SchedulingLock()

    async def main() -> float:
        loop = asyncio.get_running_loop()
        holder_ready = threading.Event()

        def hold() -> None:
            with lock:
                holder_ready.set()
                time.sleep(0.2)

        thread = threading.Thread(target=hold)
        thread.start()
        holder_ready.wait(WAIT)
        assert not lock.acquire(blocking=False)
        released = lock.released(loop)
        began = time.monotonic()
        await asyncio.wait_for(released, WAIT)
        assert lock.acquire(blocking=False)
        lock.release()
        thread.join(WAIT)
        return time.monotonic() - began

    assert asyncio.run(main()) < WAIT


def test_one_release_wakes_every_waiter_of_a_loop_at_once() -> None:
    """Heartbeats parked on a held lock are woken by one call into their loop (each call writes to the loop's
    pipe: with hundreds parked behind a fair-share update, one per waiter was hundreds of system calls)."""
    lock = SchedulingLock()

    async def main() -> int:
        loop = asyncio.get_running_loop()
        calls = []
        threadsafe = loop.call_soon_threadsafe

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(args[0])
            return threadsafe(*args, **kwargs)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        holder_ready, go = threading.Event(), threading.Event()

        def hold() -> None:
            with lock:
                holder_ready.set()
                go.wait(WAIT)

        thread = threading.Thread(target=hold)
        thread.start()
        holder_ready.wait(WAIT)
        waiters = [lock.released(loop) for _ in range(5)]
        go.set()
        await asyncio.wait_for(asyncio.gather(*waiters), WAIT)
        thread.join(WAIT)
        return len(calls)

    assert asyncio.run(main()) == 1


def test_the_loop_leaves_the_lock_to_a_thread_waiting_for_it() -> None:
    """Heartbeats on the loop come back to back; were the loop to take the lock whenever it is free, a command's
    thread waiting for it could wait for ever (the start of 200 operations timed out under 300 nodes)."""
    lock = SchedulingLock()
    assert lock.try_enter()
    assert not lock.try_enter()  # never re-entered by its own holder's thread
    waiting = threading.Thread(target=lambda: lock.acquire() and lock.release())
    waiting.start()
    deadline = time.monotonic() + WAIT
    while not lock._blocked and time.monotonic() < deadline:
        time.sleep(0.001)
    lock.release()
    waiting.join(WAIT)
    assert not waiting.is_alive() and lock.try_enter()
    lock.release()
    # a free lock with a thread on its way into it (woken, not yet holding it) is left to that thread
    lock._blocked = 1
    assert not lock.try_enter()
    lock._blocked = 0
    assert lock.try_enter()
    lock.release()


def test_loop_waiters_share_one_batch_and_a_failure_reaches_each() -> None:
    writes: list[list[str]] = []
    gate = threading.Event()
    fail = {"next": False}

    def write(records: Sequence[JobRecord]) -> None:
        gate.wait(WAIT)
        writes.append([r.id for r in records])
        if fail["next"]:
            raise OSError("disk full")

    commits = GroupCommit(write)

    async def main() -> list[Any]:
        first = asyncio.ensure_future(commits.wait_async(commits.submit([_record("j0")])))
        while not commits._committing:
            await asyncio.sleep(0.001)
        rest = [
            asyncio.ensure_future(commits.wait_async(commits.submit([_record(f"j{i}")])))
            for i in range(1, 10)
        ]
        gate.set()
        await asyncio.wait_for(asyncio.gather(first, *rest), WAIT)
        fail["next"] = True
        failing = [
            asyncio.ensure_future(commits.wait_async(commits.submit([_record(f"k{i}")]))) for i in range(3)
        ]
        return await asyncio.wait_for(asyncio.gather(*failing, return_exceptions=True), WAIT)

    try:
        errors = asyncio.run(main())
    finally:
        commits.close()
    assert writes[0] == ["j0"] and sorted(writes[1]) == sorted(f"j{i}" for i in range(1, 10))
    assert len(writes) == 3 and all(isinstance(error, OSError) for error in errors)


def test_a_batch_end_wakes_its_loop_once_with_its_committer_and_after_the_write() -> None:
    """A batch's end resolves every event-loop waiter of it, its committer among them, by one call into their loop
    (each call is a wake-up of the loop's thread), and only once its records are stored."""
    gate = threading.Event()
    stored: list[str] = []

    def write(records: Sequence[JobRecord]) -> None:
        gate.wait(WAIT)
        stored.extend(r.id for r in records)

    commits = GroupCommit(write)

    async def waiter(job_id: str) -> None:
        await commits.wait_async(commits.submit([_record(job_id)]))
        assert job_id in stored  # acknowledged means stored

    async def main() -> int:
        loop = asyncio.get_running_loop()
        calls = []
        threadsafe = loop.call_soon_threadsafe

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(args[0])
            return threadsafe(*args, **kwargs)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        deadline = time.monotonic() + WAIT
        first = asyncio.ensure_future(waiter("j0"))
        while not commits._committing and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        rest = [asyncio.ensure_future(waiter(f"j{i}")) for i in range(1, 5)]
        while commits._submitted < 5 and time.monotonic() < deadline:  # each waits from its submit's step on
            await asyncio.sleep(0.001)
        gate.set()
        await asyncio.wait_for(asyncio.gather(first, *rest), WAIT)
        return len(calls)

    try:
        wakeups = asyncio.run(main())
    finally:
        commits.close()
    assert commits.batches == 2 and sorted(stored) == [f"j{i}" for i in range(5)]
    assert wakeups == 2  # one per batch: the write's completion is no wake-up of its own


@pytest.mark.anyio
async def test_a_heartbeat_waits_for_a_held_lock_without_blocking_the_loop(tmp_path: Path) -> None:
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        create_default_tree=True,
        token=TOKEN,
        node_secret=SECRET,
    )
    await service.start()
    transport = httpx.ASGITransport(app=service.asgi, client=("127.0.0.1", 1234))
    held, release = threading.Event(), threading.Event()

    def slow_update() -> None:  # a fair-share update holding the lock on another thread
        with service.scheduler.lock:
            held.set()
            release.wait(WAIT)

    holder = threading.Thread(target=slow_update)
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", headers={"Authorization": f"OAuth {TOKEN}"}
        ) as client:
            started = await client.post(
                "/api/v4/start_operation",
                json={
                    "operation_type": "vanilla",
                    "spec": {"tasks": {"main": {"command": "true", "job_count": 2}}},
                },
            )
            assert started.status_code == 200, started.text
            # the heartbeat below starts the operation's jobs only from a tree that has it published
            assert await asyncio.to_thread(published, service.scheduler, started.json()["operation_id"], WAIT)
            holder.start()
            assert await asyncio.to_thread(held.wait, WAIT)
            beat = asyncio.ensure_future(
                client.post(
                    wire.HEARTBEAT_PATH, content=_heartbeat("n1"), headers={"X-Pooltree-Node-Secret": SECRET}
                )
            )
            throttle = service.scheduler.heartbeat_throttle
            for _ in range(int(WAIT / 0.01)):
                if throttle.in_flight == 1:
                    break
                await asyncio.sleep(0.01)
            assert throttle.in_flight == 1 and not beat.done()
            # the loop answers other requests while the heartbeat waits for the lock
            whoami = await asyncio.wait_for(client.get("/auth/whoami"), WAIT)
            assert whoami.status_code == 200 and not beat.done()
            release.set()
            answer = await asyncio.wait_for(beat, WAIT)
            assert answer.status_code == 200, answer.text
            assert len(wire.decode(answer.content)[wire.START]) == 2  # scheduled once the lock was free
            assert throttle.in_flight == 0
    finally:
        release.set()
        if holder.is_alive():
            holder.join(WAIT)
        await service.stop()
        service.store.close()


def _heartbeat(address: str) -> bytes:
    return wire.encode(node_heartbeat(address, limits={"cpu": 4, "user_slots": 4, "memory": 8 << 30}))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
