"""Heartbeat throttling as YTsaurus does it (soft / hard concurrent heartbeat limits, heartbeat_process_backoff):
a heartbeat past the limits has its reports taken and nothing scheduled, says ``scheduling_skipped`` with a
backoff period, and overload shows as the ``heartbeats_throttled`` alert and in ``/metrics``; the node backs
off on such an answer."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from pooltree.node import wire
from pooltree.node.agent import NodeAgent
from pooltree.node.executor import JobExecutor
from pooltree.node.service import HeartbeatClients, NodeLoop
from pooltree.resources import vector
from pooltree.server.http_protocol import ARRIVED
from pooltree.server.live.throttle import HeartbeatThrottle, ThrottleSettings
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

sys.path.insert(0, str(Path(__file__).parent))
from heartbeat_maps import node_heartbeat, published

TOKEN = "ytct-0000-" + "c3" * 16
SECRET = "node-secret-" + "5" * 24
WAIT = 30.0


def test_limits_decide_as_ytsaurus_does() -> None:
    throttle = HeartbeatThrottle(ThrottleSettings(soft_limit=1, hard_limit=2, process_backoff=5.0))
    assert throttle.enter(None, 100.0) is None  # nothing in flight
    assert throttle.enter(99.0, 100.0) == "soft"  # one in flight, node heard from 1 s ago
    assert throttle.enter(90.0, 100.0) == "hard"  # two in flight: the hard limit, for every node
    throttle.leave()
    throttle.leave()
    assert throttle.in_flight == 1
    assert throttle.enter(90.0, 100.0) is None  # one in flight, node silent longer than the backoff
    assert throttle.enter(None, 100.0) == "hard"  # two in flight: every node
    assert throttle.throttled == {"soft": 1, "hard": 2, "queued": 0}
    assert throttle.max_in_flight == 3
    assert throttle.recently_throttled(100.0) and not throttle.recently_throttled(1000.0)
    assert throttle.backoff_period(1.0, 60.0) == 5.0 and throttle.backoff_period(1.0, 8.0) == 2.0
    with pytest.raises(ValueError):
        ThrottleSettings(soft_limit=3, hard_limit=2)


def test_a_heartbeat_that_waited_in_the_loop_is_throttled() -> None:
    """Heartbeats run on the event loop one after the other: an overloaded scheduler queues them before they are in
    flight, so how long one waited for its handler is a limit of its own (``queued``)."""
    throttle = HeartbeatThrottle(ThrottleSettings(queued_limit=1.0, process_backoff=5.0))
    assert throttle.enter(99.0, 100.0, queued=0.5) is None
    assert throttle.enter(99.0, 100.0, queued=1.5) == "queued"
    assert throttle.enter(None, 100.0, queued=9.0) is None  # a new node registers whatever the wait
    assert throttle.enter(90.0, 100.0, queued=9.0) is None  # so does one silent longer than the backoff
    assert throttle.throttled == {"soft": 0, "hard": 0, "queued": 1}
    with pytest.raises(ValueError):
        ThrottleSettings(queued_limit=0)


@pytest.mark.anyio
async def test_the_service_throttles_a_heartbeat_the_loop_kept_waiting(tmp_path: Path) -> None:
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        create_default_tree=True,
        token=TOKEN,
        node_secret=SECRET,
    )
    await service.start()
    lag = {"seconds": 0.0}

    async def behind(
        scope: dict[str, Any], receive: Any, send: Any
    ) -> None:  # as the HTTP protocol stamps it
        scope[ARRIVED] = asyncio.get_running_loop().time() - lag["seconds"]
        await service.asgi(scope, receive, send)

    transport = httpx.ASGITransport(app=behind, client=("127.0.0.1", 1234))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:

            async def beat() -> dict[str, Any]:
                answer = await client.post(
                    "/internal/node_heartbeat",
                    content=_heartbeat("n1"),
                    headers={"X-Pooltree-Node-Secret": SECRET},
                )
                assert answer.status_code == 200, answer.text
                return answer.json()

            assert wire.SCHEDULING_SKIPPED not in await beat()  # registers the node
            lag["seconds"] = 3.0
            skipped = await beat()
            assert skipped[wire.SCHEDULING_SKIPPED] is True and skipped[wire.HEARTBEAT_PERIOD] == 5.0
            assert service.scheduler.heartbeat_throttle.throttled["queued"] == 1
            lag["seconds"] = 0.0
            assert wire.SCHEDULING_SKIPPED not in await beat()
            # the backlog is visible before any throttling: the waits summed, the longest kept
            metrics = (await client.get("/metrics", headers={"Authorization": f"OAuth {TOKEN}"})).text
            assert "pooltree_scheduler_heartbeat_queue_wait_seconds_count 3.0" in metrics
            waited = float(_sample(metrics, "pooltree_scheduler_heartbeat_queue_wait_seconds_sum"))
            longest = float(_sample(metrics, "pooltree_scheduler_heartbeat_queue_wait_max_seconds"))
            assert 3.0 <= waited < 3.5 and 3.0 <= longest < 3.5
    finally:
        await service.stop()
        service.store.close()


def _sample(metrics: str, name: str) -> str:
    """The value of the unlabelled sample ``name`` in a ``/metrics`` text."""
    found = re.search(rf"^{name} (\S+)$", metrics, re.MULTILINE)
    assert found is not None, name
    return found.group(1)


def _heartbeat(address: str) -> bytes:
    return json.dumps(node_heartbeat(address)).encode()


async def _until_in_flight(throttle: HeartbeatThrottle, count: int) -> None:
    for _ in range(int(WAIT / 0.01)):
        if throttle.in_flight == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{throttle.in_flight} heartbeats in flight, expected {count}")


@pytest.mark.anyio
async def test_heartbeat_past_the_hard_limit_schedules_nothing_and_is_visible(tmp_path: Path) -> None:
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        create_default_tree=True,
        token=TOKEN,
        node_secret=SECRET,
        throttle_settings=ThrottleSettings(soft_limit=1, hard_limit=1, process_backoff=5.0),
    )
    await service.start()
    transport = httpx.ASGITransport(app=service.app, client=("127.0.0.1", 1234))
    throttle = service.scheduler.heartbeat_throttle
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", headers={"Authorization": f"OAuth {TOKEN}"}
        ) as client:
            response = await client.post(
                "/api/v4/start_operation",
                json={
                    "operation_type": "vanilla",
                    "spec": {"tasks": {"main": {"command": "true", "job_count": 4}}},
                },
            )
            assert response.status_code == 200, response.text
            # the first heartbeat below starts the operation's jobs only from a tree that has it published
            assert await asyncio.to_thread(
                published, service.scheduler, response.json()["operation_id"], WAIT
            )

            async def beat(address: str) -> dict[str, Any]:
                answer = await client.post(
                    "/internal/node_heartbeat",
                    content=_heartbeat(address),
                    headers={"X-Pooltree-Node-Secret": SECRET},
                )
                assert answer.status_code == 200, answer.text
                return answer.json()

            service.scheduler.lock.acquire()  # the first heartbeat waits for the lock: one in flight
            try:
                first = asyncio.create_task(beat("n1"))
                await _until_in_flight(throttle, 1)
                second = asyncio.create_task(beat("n2"))
                await _until_in_flight(throttle, 2)
            finally:
                service.scheduler.lock.release()
            answers = await asyncio.wait_for(asyncio.gather(first, second), WAIT)
            assert len(answers[0][wire.START]) == 2 and not answers[0].get(wire.SCHEDULING_SKIPPED)
            assert answers[1][wire.START] == [] and answers[1][wire.SCHEDULING_SKIPPED] is True
            assert answers[1][wire.HEARTBEAT_PERIOD] == 5.0
            assert throttle.in_flight == 0 and throttle.throttled == {"soft": 0, "hard": 1, "queued": 0}
            # the scheduler's alerts are read from the read snapshot: shown from the next publication (the
            # service's loop publishes one at least every fair-share period)
            throttled: list[dict[str, Any]] = []
            deadline = asyncio.get_running_loop().time() + WAIT
            while not throttled and asyncio.get_running_loop().time() < deadline:
                alerts = (await client.get("/api/v4/get", params={"path": "//sys/scheduler/@alerts"})).json()
                throttled = [
                    a for a in alerts["value"] if a["attributes"]["alert_type"] == "heartbeats_throttled"
                ]
                if not throttled:
                    await asyncio.sleep(0.05)
            assert throttled and throttled[0]["attributes"]["throttled_by_hard_limit"] == 1
            metrics = (await client.get("/metrics")).text
            assert 'pooltree_scheduler_heartbeats_throttled_total{limit="hard"} 1.0' in metrics
            assert "pooltree_scheduler_heartbeats_in_flight_max 2.0" in metrics
            assert 'pooltree_alerts{scope="scheduler",type="heartbeats_throttled"} 1.0' in metrics
            again = await beat("n2")  # the next heartbeat is not throttled and schedules
            assert len(again[wire.START]) == 2 and wire.SCHEDULING_SKIPPED not in again
    finally:
        await service.stop()
        service.store.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_node_backs_off_on_a_skipped_scheduling(tmp_path: Path) -> None:
    answers = [
        wire.response(
            start=[], preempt=[], abort=[], acknowledge=[], heartbeat_period=4.0, scheduling_skipped=True
        ),
        wire.response(start=[], preempt=[], abort=[], acknowledge=[], heartbeat_period=1.0),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answers.pop(0))

    async def main() -> list[tuple[bool, float, int]]:
        executor = JobExecutor(tmp_path / "node", memory_meter="psutil")
        agent = NodeAgent("n1", executor, vector(user_slots=1, cpu=1, memory=1 << 30))
        loop = NodeLoop(agent, "http://scheduler")
        seen = []
        try:
            async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
                clients = HeartbeatClients(scheduler=client, listener=client)
                for _ in range(2):
                    assert await loop.heartbeat_once(clients)
                    seen.append((loop.throttled, loop.period, loop.stats.throttled))
        finally:
            await executor.shutdown()
        return seen

    assert asyncio.run(main()) == [(True, 4.0, 1), (False, 1.0, 1)]


def test_the_queued_limit_is_a_quarter_second_and_can_be_set_for_comparisons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("POOLTREE_HEARTBEAT_QUEUED_LIMIT", raising=False)
    assert ThrottleSettings().queued_limit == 0.25
    monkeypatch.setenv("POOLTREE_HEARTBEAT_QUEUED_LIMIT", "1")
    assert ThrottleSettings().queued_limit == 1.0
    for bad in ("0", "-1", "soon", "61"):
        monkeypatch.setenv("POOLTREE_HEARTBEAT_QUEUED_LIMIT", bad)
        assert ThrottleSettings().queued_limit == 0.25
