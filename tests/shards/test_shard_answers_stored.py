"""The leader answers a shard's heartbeat only once its job records are stored, on the thread that finishes
heartbeats (``host.NodeShards._finish``), while the shard's own leader thread goes on with its next heartbeats: a
job is stored before its node is told to start it, a finished job is acknowledged only once durable, and a failed
write answers an error (the node retries) instead of the start. Real shard processes, real HTTP on 127.0.0.1, a
real SQLite store whose job writes the test holds."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from held_store import HeldStore
from polling import wait_for

from pooltree.config import parse_pool_trees
from pooltree.node import wire
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store
from pooltree.shards.host import NodeShards, ShardSettings, shard_of
from pooltree.shards.verdicts import UNUSED_PROOFS

HEARTBEAT = "/internal/node_heartbeat"
WAIT = 30.0
LIMITS = {"user_slots": 2, "cpu": 2, "memory": 4 << 30}


@pytest.fixture
def sharded(tmp_path: Path) -> Iterator[tuple[SchedulerService, HeldStore]]:
    store = HeldStore(open_store(f"sqlite:///{tmp_path / 'sharded.db'}"))
    service = SchedulerService(store, authentication=False)  # type: ignore[arg-type]
    service.scheduler.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), None, 0.0)
    service.shards = NodeShards(2, ShardSettings("127.0.0.1", False, None, None, "test"), service)
    try:
        yield service, store
    finally:
        service.shards.close()


def _heartbeat(address: str, finished: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return wire.heartbeat(
        address,
        sequence=0,
        time=0.0,
        resource_limits=LIMITS,
        resource_usage={},
        memory_limit=LIMITS["memory"],
        memory_usage=0,
        memory_meter="none",
        running_jobs=[],
        finished_jobs=finished or [],
    )


def _two_nodes_of_one_shard(service: SchedulerService) -> tuple[str, str, str]:
    """Two node addresses owned by the same shard, and that shard's URL."""
    addresses = [f"n{index}" for index in range(20)]
    first = addresses[0]
    second = next(a for a in addresses[1:] if shard_of(a, 2) == shard_of(first, 2))
    assert service.shards is not None
    url = service.shards.url_for(first, "127.0.0.1")
    assert url is not None
    return first, second, url


def test_a_start_is_answered_only_once_stored_while_the_shard_s_next_heartbeat_is_processed(
    sharded: tuple[SchedulerService, HeldStore],
) -> None:
    service, store = sharded
    op = service.scheduler.start_operation(
        "vanilla", {"tasks": {"main": {"command": "true", "job_count": 2}}}, "u", 1.0
    )
    first, second, url = _two_nodes_of_one_shard(service)
    store.hold = True
    with httpx.Client(timeout=WAIT) as client, ThreadPoolExecutor(2) as sending:
        answer: Future[httpx.Response] = sending.submit(client.post, url + HEARTBEAT, json=_heartbeat(first))
        assert store.entered.wait(WAIT)  # the heartbeat's job records are being written...
        started = [job for job in service.scheduler.jobs.values() if job.address == first]
        assert len(started) == 2 and all(store.get_job(op.id, job.id) is None for job in started)
        # ...its node has not been told to start them, and the shard's next heartbeat is processed meanwhile (the
        # shard's leader thread does not wait for the store)
        other = sending.submit(client.post, url + HEARTBEAT, json=_heartbeat(second))
        wait_for(lambda: second in service.scheduler.nodes, timeout=WAIT)
        assert not answer.done()
        store.release.set()
        response = answer.result(WAIT)
        assert response.status_code == 200, response.text
        assert other.result(WAIT).status_code == 200
    specs = response.json()[wire.START]
    assert sorted(spec["job_id"] for spec in specs) == sorted(job.id for job in started)
    assert all(store.get_job(op.id, spec["job_id"]) is not None for spec in specs)


def test_a_finished_job_is_acknowledged_only_once_stored(sharded: tuple[SchedulerService, HeldStore]) -> None:
    service, store = sharded
    op = service.scheduler.start_operation(
        "vanilla", {"tasks": {"main": {"command": "true", "job_count": 3}}}, "u", 1.0
    )
    first, _, url = _two_nodes_of_one_shard(service)
    with httpx.Client(timeout=WAIT) as client, ThreadPoolExecutor(1) as sending:
        started = client.post(url + HEARTBEAT, json=_heartbeat(first)).json()[wire.START][0]["job_id"]
        report = wire.finished_job(started, op.id, "main", "completed", 2.0, 3.0)
        store.hold = True
        answer = sending.submit(client.post, url + HEARTBEAT, json=_heartbeat(first, [report]))
        assert store.entered.wait(WAIT)
        assert not answer.done()
        assert store.get_job(op.id, started).state == "running"  # type: ignore[union-attr]
        store.release.set()
        response = answer.result(WAIT)
    assert response.status_code == 200, response.text
    assert response.json()[wire.ACKNOWLEDGE] == [started]
    assert store.get_job(op.id, started).state == "completed"  # type: ignore[union-attr]


def test_a_failed_write_answers_an_error_not_the_start(sharded: tuple[SchedulerService, HeldStore]) -> None:
    service, store = sharded
    service.scheduler.start_operation(
        "vanilla", {"tasks": {"main": {"command": "true", "job_count": 2}}}, "u", 1.0
    )
    first, _, url = _two_nodes_of_one_shard(service)
    store.fail = True
    with httpx.Client(timeout=WAIT) as client:
        response = client.post(url + HEARTBEAT, json=_heartbeat(first))
    assert response.status_code >= 500
    assert "the test's disk is gone" in response.headers["X-YT-Error"]
    assert service.scheduler.heartbeat_throttle.in_flight == 0  # out of flight, as after any answer


def test_the_proof_of_the_next_heartbeat_takes_no_hold_of_the_lock_of_its_own(
    sharded: tuple[SchedulerService, HeldStore],
) -> None:
    """The leader proves a forwarded heartbeat's node's next heartbeat in the hold that processed it (the node's
    jobs still in the cache, no second wait for the lock): one hold per heartbeat, and the proof still made (a
    heartbeat equal to the proven one is then answered by the shard)."""
    service, _ = sharded
    assert service.shards is not None
    first, _, url = _two_nodes_of_one_shard(service)
    lock, verdicts = service.scheduler.lock, service.shards.verdicts
    with httpx.Client(timeout=WAIT) as client:
        assert client.post(url + HEARTBEAT, json=_heartbeat(first)).status_code == 200  # registers the node
        for serial in range(UNUSED_PROOFS - 1):  # each differs from the proven one (its alerts): forwarded
            heartbeat = _heartbeat(first)
            heartbeat[wire.ALERTS] = [{"code": 1, "message": f"alert {serial}"}]
            holds, proofs = sum(lock.holds), verdicts.proofs_made
            assert client.post(url + HEARTBEAT, json=heartbeat).status_code == 200
            assert (sum(lock.holds) - holds, verdicts.proofs_made - proofs) == (1, 1)
        forwarded = sum(service.shards.answered)
        assert client.post(url + HEARTBEAT, json=heartbeat).status_code == 200
    assert sum(service.shards.answered) == forwarded  # answered by the shard on the last proof


def test_answers_one_commit_stores_together_go_to_their_shard_in_one_message_each_once_stored(
    sharded: tuple[SchedulerService, HeldStore],
) -> None:
    """Two heartbeats of one shard processed while the store holds the first one's records: once it lets go,
    their records are stored in one commit and their answers reach the shard as one message
    (``("replies", [...])``), each node still getting its own starts, all stored before it hears of them."""
    service, store = sharded
    assert service.shards is not None
    op = service.scheduler.start_operation(
        "vanilla", {"tasks": {"main": {"command": "true", "job_count": 6}}}, "u", 1.0
    )
    first, second, url = _two_nodes_of_one_shard(service)
    third = next(f"n{index}" for index in range(20, 60) if shard_of(f"n{index}", 2) == shard_of(first, 2))
    store.hold = True
    with httpx.Client(timeout=WAIT) as client, ThreadPoolExecutor(3) as sending:
        answers = [sending.submit(client.post, url + HEARTBEAT, json=_heartbeat(first))]
        assert store.entered.wait(
            WAIT
        )  # the first heartbeat's records are being written (the finisher waits)
        answers += [
            sending.submit(client.post, url + HEARTBEAT, json=_heartbeat(node)) for node in (second, third)
        ]
        wait_for(lambda: service.shards._finisher.queued() == 2, timeout=WAIT)  # both processed, handed over
        messages, replies = service.shards.reply_messages, service.shards.replies
        store.release.set()
        responses = [answer.result(WAIT) for answer in answers]
    assert [response.status_code for response in responses] == [200, 200, 200]
    assert (service.shards.reply_messages - messages, service.shards.replies - replies) == (2, 3)
    for node, response in zip((first, second, third), responses, strict=True):
        specs = response.json()[wire.START]
        assert sorted(spec["job_id"] for spec in specs) == sorted(
            job.id for job in service.scheduler.jobs.values() if job.address == node
        )
        assert len(specs) == 2 and all(store.get_job(op.id, spec["job_id"]) is not None for spec in specs)
