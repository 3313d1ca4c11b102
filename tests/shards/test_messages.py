"""A heartbeat a shard forwards over the pipe is the same request when the leader unpacks it, errors included."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from pooltree.node import wire
from pooltree.server.heartbeats import decode_heartbeat
from pooltree.server.protocol import YtError
from pooltree.shards.messages import heartbeat_address, pack, unpack


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
