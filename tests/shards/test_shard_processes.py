"""Node shards in processes decide as the single-process scheduler: the recorded run (starts, completions,
preemptions) is replayed into a scheduler service whose heartbeats go over HTTP to two real shard processes
(each node to the shard its address hashes to), and the started and preempted allocations are the recorded ones.
Also: answers name the node's shard, a malformed heartbeat is refused by the shard itself, and a killed shard is
started again while the leader answers its nodes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from node_bodies import idle_heartbeat
from polling import wait_for
from recorded_run import (
    BUSY,
    PREEMPTING,
    record_busy_run,
    record_full_run,
    record_quiet_run,
    record_run,
)

from pooltree.config import parse_pool_trees
from pooltree.node import wire
from pooltree.server.live.model import LiveVanillaController
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store
from pooltree.shards import remote
from pooltree.shards.host import NodeShards, ShardSettings, shard_of
from pooltree.shards.recording import ReplayDivergence, replay
from pooltree.shards.remote import ProcessShardStarts
from pooltree.strategy import FinishedAllocation

HEARTBEAT = "/internal/node_heartbeat"
SYNC_WAIT = 20.0
"""Seconds a sync in the tests below may wait (above what a shard ending takes to be seen by its reader)."""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@contextlib.contextmanager
def sharded_service(
    tmp_path: Path, trees: dict[str, Any], starts: bool
) -> Iterator[tuple[SchedulerService, Clock, ProcessShardStarts | None]]:
    """A scheduler service (loops not started: the replay drives updates) with two shard processes; with
    ``starts`` they also run their nodes' passes."""
    clock = Clock()
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'sharded.db'}"), authentication=False, clock=clock
    )
    service.scheduler.apply_pool_trees(parse_pool_trees(trees), None, 0.0)
    shard_starts = ProcessShardStarts(service.scheduler, 2) if starts else None
    service.shards = NodeShards(
        2,
        ShardSettings("127.0.0.1", False, None, None, "test", leader_clock=True),
        service,
        shard_starts,
    )
    try:
        yield service, clock, shard_starts
    finally:
        service.shards.close()


@pytest.fixture
def sharded(tmp_path: Path) -> Iterator[tuple[SchedulerService, Clock]]:
    with sharded_service(tmp_path, PREEMPTING, False) as (service, clock, _):
        yield service, clock


def _sender(service: SchedulerService, clock: Clock, client: httpx.Client, seen: dict[str, str]) -> Any:
    def send(data: dict[str, Any], now: float) -> dict[str, Any]:
        address = data[wire.NODE_ADDRESS]
        assert service.shards is not None
        url = seen.get(address) or service.shards.url_for(address, "127.0.0.1")
        assert url is not None
        clock.now = now  # the leader stamps the heartbeat with its clock
        service.shards.sync()  # the shards know the leader's state generation and clock before the heartbeat
        response = client.post(url + HEARTBEAT, json=data)
        assert response.status_code == 200, response.text
        answer = response.json()
        seen[address] = answer.pop(wire.HEARTBEAT_URL)  # the node's shard, where its next heartbeats go
        return answer

    return send


@pytest.mark.parametrize("run", [record_run, record_quiet_run, record_full_run])
def test_shard_processes_decide_as_one_process(
    tmp_path: Path, sharded: tuple[SchedulerService, Clock], run: Any
) -> None:
    recorder, recorded = run(tmp_path / "recorded.db")
    addresses = {
        event[1][wire.NODE_ADDRESS] for event in recorder.recording.events if event[0] == "heartbeat"
    }
    assert {shard_of(address, 2) for address in addresses} == {0, 1}  # both shards take heartbeats
    service, clock = sharded
    seen: dict[str, str] = {}
    with httpx.Client(timeout=30.0) as client:
        decisions = replay(recorder.recording, service.scheduler, _sender(service, clock, client, seen))
    assert decisions.started_count > 10 and decisions.preempted_count > 0
    assert decisions == recorded
    assert len(set(seen.values())) == 2  # each node kept to its own shard's URL
    # the shards answered the heartbeats proven empty themselves (their notes reach the leader within 0.5 s)
    assert service.shards is not None
    forwarded = sum(service.shards.answered)
    wait_for(lambda: sum(service.shards.answered_locally) + forwarded == len(recorded.started), timeout=10.0)
    assert sum(service.shards.answered_locally) > 0


def test_a_shard_far_behind_the_log_takes_a_new_copy_and_decides_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the increment log bounded at 3 entries (`remote.LOG_LIMIT`), the shard furthest behind is not followed
    past it: it takes a new copy of the truth at its next pass instead, and the busy run still decides as
    recorded."""
    monkeypatch.setattr(remote, "LOG_LIMIT", 3)
    recorder, recorded = record_busy_run(tmp_path / "recorded.db")
    with sharded_service(tmp_path, BUSY, True) as (service, clock, starts):
        assert starts is not None
        with httpx.Client(timeout=30.0) as client:
            decisions = replay(recorder.recording, service.scheduler, _sender(service, clock, client, {}))
        assert decisions == recorded
        assert starts.snapshots > 2 and starts.dropped == 0  # copies again past the bound


@pytest.mark.parametrize("run", ["busy", "quiet"])
def test_shard_processes_that_start_allocations_decide_as_one_process(tmp_path: Path, run: str) -> None:
    """The stages of every forwarded heartbeat run in the replica held by the node's shard process (snapshot and
    increments over its pass pipe, claims back to the leader, which lets its lock go meanwhile): the busy run (a
    limited pool, starving preemption, eight nodes) and the quiet one decide as recorded. The increments go as
    batches of the tree's log (`increments.py`); passes proven empty by the strategy's rule are not sent."""
    if run == "busy":
        recorder, recorded = record_busy_run(tmp_path / "recorded.db")
        trees = BUSY
    else:
        recorder, recorded = record_quiet_run(tmp_path / "recorded.db")
        trees = PREEMPTING
    with sharded_service(tmp_path, trees, True) as (service, clock, starts):
        assert starts is not None
        with httpx.Client(timeout=30.0) as client:
            decisions = replay(recorder.recording, service.scheduler, _sender(service, clock, client, {}))
        assert decisions == recorded
        assert recorded.started_count > 20 and recorded.preempted_count > 0
        # every pass ran in a shard process: each copied the truth once, then followed it by increments
        assert starts.passes > 0 and starts.leader_passes == 0
        assert starts.snapshots == 2 and starts.dropped == 0
        # every publish but the first went as its changes from the one before, operations added and removed
        # too (a replica holding another base fails its pass and takes a new copy: none did)
        assert starts.published_whole == 1 and starts.published_as_changes > 10
        assert all(cpu > 0 for cpu in starts.shard_cpu)
        # the increments went as batches of one log per tree, each pickled once for both processes
        assert sum(log.encoded_bytes for log in starts.logs.values()) > 0
        # and passes the strategy's own rule proved empty were not sent to a shard (decided the same)
        assert starts.proven_empty > 0
        # claims granted ahead (one allocation per job that ended on the node since its last pass): most starts
        # took a grant instead of a round trip to the leader; the unused grants were taken back
        used = starts.grants_made - starts.grants_taken_back
        assert used > 0 and starts.claims + used == recorded.started_count + refused(starts)
        assert starts.granted_starts == used
        if run == "busy":
            assert starts.grants_taken_back > 0 and starts.claims < recorded.started_count / 2


def refused(starts: ProcessShardStarts) -> int:
    """Claims the leader answered with no allocation (none in these replays: `_remote_claim` counts them)."""
    return starts.claims_refused


def test_grants_given_back_as_aborts_instead_of_taken_back_decide_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay tells an inexact take-back apart: grants returned to their controllers as aborted allocations
    (their jobs queued last, their attempts counted) start other jobs than the single process did."""

    def give_back(self: Any, allocation: Any) -> None:
        self.on_allocation_finished(allocation, FinishedAllocation(allocation.id, "aborted"), 0.0)

    monkeypatch.setattr(LiveVanillaController, "take_back", give_back)
    recorder, recorded = record_busy_run(tmp_path / "recorded.db")
    with sharded_service(tmp_path, BUSY, True) as (service, clock, starts):
        assert starts is not None
        with httpx.Client(timeout=30.0) as client, contextlib.suppress(ReplayDivergence):
            decisions = replay(recorder.recording, service.scheduler, _sender(service, clock, client, {}))
            assert decisions != recorded
        assert starts.grants_taken_back > 0


def test_a_shard_refuses_a_malformed_heartbeat_and_comes_back_after_a_kill(
    sharded: tuple[SchedulerService, Clock],
) -> None:
    service, _ = sharded
    assert service.shards is not None
    url = service.shards.url_for("n0", "127.0.0.1")
    assert url is not None
    with httpx.Client(timeout=30.0) as client:
        refused = client.post(url + HEARTBEAT, json={"node_address": 7})
        assert refused.status_code == 400 and "node_address" in refused.headers["X-YT-Error"]
        # a node's body the shard does not read (no verdict of it there) is refused by the leader, alike
        forwarded = client.post(url + HEARTBEAT, json={"node_address": "n0", "resource_limits": 5})
        assert forwarded.status_code == 400 and "resource_limits" in forwarded.headers["X-YT-Error"]
        assert "n0" not in service.scheduler.nodes
        index = shard_of("n0", 2)
        pid = service.shards.pids()[index]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: service.shards.pids()[index] not in (None, pid), timeout=60.0)
        restarted = service.shards.url_for("n0", "127.0.0.1")
        assert restarted is not None and restarted != url
        answer = client.post(restarted + HEARTBEAT, json=idle_heartbeat("n0"))
        assert answer.status_code == 200 and answer.json()[wire.HEARTBEAT_URL] == restarted
    assert service.shards.restarts == 1


def test_a_sync_does_not_wait_for_a_shard_that_ended_before_answering_it(
    sharded: tuple[SchedulerService, Clock],
) -> None:
    """A shard that ends after a sync counted it (killed before its reader saw the end) is dropped from the sync:
    the sync returns once the reader sees the end, and does not wait its timeout (``TimeoutError``) for an answer
    that never comes (CI's flaky ``test_shard_kill``, session 33)."""
    service, _ = sharded
    shards = service.shards
    assert shards is not None
    index = shard_of("n0", 2)
    pid = shards.pids()[index]
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # counted by the sync, alive, but it answers nothing
    failed: list[BaseException] = []

    def sync() -> None:
        try:
            shards.sync(timeout=SYNC_WAIT)
        except BaseException as error:
            failed.append(error)

    syncing = threading.Thread(target=sync)
    syncing.start()
    try:
        wait_for(
            lambda: bool(shards._syncs), timeout=30.0
        )  # the sync was sent and waits for the stopped shard
    finally:
        os.kill(pid, signal.SIGKILL)
    syncing.join(timeout=SYNC_WAIT + 30.0)
    assert not syncing.is_alive()
    assert failed == []
    wait_for(lambda: shards.pids()[index] not in (None, pid), timeout=60.0)
    shards.sync()  # the restarted shard answers syncs


def test_a_shard_answers_what_its_heartbeat_protocol_hands_to_uvicorn_as_before(
    sharded: tuple[SchedulerService, Clock],
) -> None:
    """The shard's listener takes plain heartbeats past uvicorn (``HeartbeatProtocol``); another method or path
    and a chunked heartbeat go to uvicorn's protocol and are answered as before (405, 404, the heartbeat's answer)."""
    service, _ = sharded
    assert service.shards is not None
    url = service.shards.url_for("n1", "127.0.0.1")
    assert url is not None
    body = json.dumps(idle_heartbeat("n1")).encode()
    with httpx.Client(timeout=30.0) as client:
        assert client.get(url + HEARTBEAT).status_code == 405
        assert client.post(url + "/internal/other", content=body).status_code == 404
        chunked = client.post(url + HEARTBEAT, content=iter([body[:10], body[10:]]))
        assert chunked.status_code == 200, chunked.text
        plain = client.post(url + HEARTBEAT, content=body)
        assert plain.status_code == 200, plain.text
        assert plain.json()[wire.HEARTBEAT_URL] == chunked.json()[wire.HEARTBEAT_URL] == url
