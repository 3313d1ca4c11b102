"""A heartbeat a shard forwards over the pipe is the same request when the leader unpacks it, errors included; the
proof the leader's reply carries is what the shard made of the body and the answer itself."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from node_bodies import idle_heartbeat
from recorded_run import PREEMPTING, make_scheduler, record_full_run, record_quiet_run, wavering_memory

from pooltree.node import wire
from pooltree.server.heartbeats import RunningReports, decode_heartbeat
from pooltree.server.protocol import YtError
from pooltree.shards import process as shard_process
from pooltree.shards.inprocess import InProcessShards
from pooltree.shards.messages import answer_reply, heartbeat_address, pack, unpack
from pooltree.shards.process import ShardSettings
from pooltree.shards.recording import replay
from pooltree.shards.verdicts import (
    LeaderVerdicts,
    Proof,
    StartEntryResources,
    expected_next,
    heartbeat_key,
    proven,
)


def test_a_packed_heartbeat_unpacks_to_the_same_request() -> None:
    data = wire.heartbeat(
        "n1",
        sequence=3,
        time=5.0,
        resource_limits={"user_slots": 4, "cpu": 4, "memory": 8 << 30, "gpu": 1},
        resource_usage={"cpu": 1},
        memory_limit=8 << 30,
        memory_usage=1 << 20,
        memory_meter="psutil",
        running_jobs=[
            wire.running_job(
                "j1",
                "o1",
                "main",
                start_time=1.0,
                resource_usage={"user_slots": 1, "cpu": 1.5},
                memory_usage=7.0,
                gpu_devices=[0, 1],
            )
        ],
        finished_jobs=[
            wire.finished_job("j2", "o1", "main", "failed", 1.0, 4.0, exit_code=3, abort_reason=None),
            wire.finished_job(
                "j3", "o2", "t", "aborted", 2.0, 4.5, abort_reason="preemption", gpu_devices=[1]
            ),
        ],
        tags=["ssd", "gpu"],
    )
    request = wire.parse_heartbeat(data)
    body = wire.encode(data)
    assert heartbeat_address(body) == "n1"
    back = unpack(pickle.loads(pickle.dumps(pack(body))))
    again = unpack(pack(body))  # with the node's running reports kept from the first
    assert again.running == back.running and np.array_equal(again.resource_limits, back.resource_limits)
    assert back.address == request.address and back.tags == request.tags
    assert np.array_equal(back.resource_limits, request.resource_limits)
    assert back.finished == request.finished and back.memory_meter == request.memory_meter
    assert back.alerts == request.alerts and len(back.running) == 1
    ours, theirs = back.running[0], request.running[0]
    assert (ours.job_id, ours.operation_id, ours.task_name, ours.memory_usage, ours.statistics) == (
        theirs.job_id,
        theirs.operation_id,
        theirs.task_name,
        theirs.memory_usage,
        theirs.statistics,
    )
    assert np.array_equal(ours.resource_usage, theirs.resource_usage)
    # the GPUs a job holds or held cross the pipe too (they were dropped by the packing before)
    assert back.running == request.running and ours.gpu_devices == (0, 1)
    assert back.finished[1].gpu_devices == (1,)


@pytest.mark.parametrize(
    "body",
    [
        b'{"node_address": "n1", "resource_limits": 5}',
        b'{"node_address": "n1", "resource_limits": {}, "running_jobs": [{"job_id": ""}]}',
        b'{"node_address": 7}',
        b"[1, 2]",
        b"not json",
        b"",
    ],
)
def test_a_malformed_body_is_refused_by_the_leader_as_the_shard_refused_it(body: bytes) -> None:
    with pytest.raises(YtError) as theirs:
        decode_heartbeat(body)
    with pytest.raises(YtError) as ours:
        unpack(pack(body))
    assert (ours.value.message, ours.value.attributes) == (theirs.value.message, theirs.value.attributes)
    # what the shard reads of it: the address only when it is a non-empty string (the rest not read)
    assert heartbeat_address(body) == ("n1" if body.startswith(b'{"node_address": "n1"') else None)


class _Bodies(InProcessShards):
    """``InProcessShards`` that keep the body of the heartbeat being processed (as its node would send it)."""

    body = b""

    def __call__(self, data: dict[str, Any], now: float) -> dict[str, Any]:
        self.body = wire.encode(data)
        return super().__call__(data, now)


@pytest.mark.parametrize("run", ["full", "wavering"])
def test_a_reply_s_proof_is_what_the_shard_made_of_the_body_and_the_answer(
    tmp_path: Path, run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key of the node's expected next heartbeat that a reply with a proof carries (made by the leader from
    its decoded heartbeat and its answer map) equals the key a shard made before from the node's body and the
    answer's JSON (``expected_next`` of them, ``heartbeat_key``), after the pipe's pickling; the period and shard
    URL are the answer's. Runs with starts (jobs reported as their start entries gave them) and with measured
    memory under and over the reserve (bounds)."""
    if run == "full":
        recorder, recorded = record_full_run(tmp_path / "recorded.db")
    else:
        recorder, recorded = record_quiet_run(tmp_path / "recorded.db", wavering_memory)
    scheduler = make_scheduler(tmp_path / "sharded.db", PREEMPTING)
    shards = _Bodies(scheduler, 2)
    replies: list[tuple[bytes, bytes, Any]] = []
    prove = LeaderVerdicts.prove

    def proving(self: LeaderVerdicts, heartbeat: Any, answer: dict[str, Any]) -> Proof | None:
        proof = prove(self, heartbeat, answer)
        if proof is not None:
            replies.append((shards.body, pickle.dumps(answer_reply(7, answer, proof, 1.0)), proof[:3]))
        return proof

    monkeypatch.setattr(LeaderVerdicts, "prove", proving)
    assert replay(recorder.recording, scheduler, shards) == recorded
    after_starts = bounded = 0
    for body, pickled, made in replies:
        request_id, status, answer_bytes, kept, clock = pickle.loads(pickled)
        answer = wire.decode(answer_bytes)
        expected = expected_next(decode_heartbeat(body, RunningReports()), answer, StartEntryResources())
        assert expected is not None
        generation, bounds, full, key, period, url = kept
        assert key == heartbeat_key(expected, bounds) and (generation, bounds, full) == made
        assert (request_id, status, clock, period, url) == (7, 200, 1.0, answer["heartbeat_period"], None)
        after_starts += bool(answer["start"])
        bounded += any(bound != float("inf") for bound in bounds.values())
    assert len(replies) >= 20 and shards.answered > 0
    assert after_starts > 0 if run == "full" else bounded > 0


def test_a_heartbeat_reporting_a_finished_job_is_forwarded_undecoded_though_its_verdict_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A shard answers no heartbeat with a finished job (``ShardNodes.answer``), so it does not decode one to find
    that out, even when the node's verdict holds (under load most heartbeats after a full node's proof report a
    finished job: ``bench/RESULTS.md``, session 34); the proven quiet heartbeat is still decoded and answered."""
    decoded: list[bytes] = []

    def counted(body: bytes, reports: RunningReports | None = None) -> wire.HeartbeatRequest:
        decoded.append(body)
        return decode_heartbeat(body, reports)

    monkeypatch.setattr(shard_process, "decode_heartbeat", counted)
    server = shard_process.ShardServer(cast(Any, None), ShardSettings("127.0.0.1", False, None, None, "test"))
    server.learn(4, 50.0)
    quiet = idle_heartbeat("n1", 2)
    answer = {"start": [], "preempt": [], "abort": [], "acknowledge": [], "heartbeat_period": 2.0}
    server.nodes.remember("n1", "10.0.0.1", proven((4, {}, None, decode_heartbeat(_json(quiet))), answer))
    with_finished = dict(quiet, finished_jobs=[wire.finished_job("j9", "o1", "main", "completed", 1.0, 2.0)])
    assert server.nodes.holds("n1", "10.0.0.1")
    # decoded, it would not be answered here either: the leader answers it, as before
    assert server.nodes.answer(decode_heartbeat(_json(with_finished)), "10.0.0.1", 50.0) is None
    assert server._arrived(_json(with_finished), "10.0.0.1") == (None, "n1")
    assert decoded == []
    local, address = server._arrived(_json(quiet), "10.0.0.1")
    assert address == "n1" and local is not None and json.loads(local)["heartbeat_period"] == 2.0
    assert decoded == [_json(quiet)]


def _json(data: dict[str, Any]) -> bytes:
    return json.dumps(data).encode()
