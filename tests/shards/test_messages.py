"""A heartbeat packed by a shard for the pipe is the same request when the leader unpacks it."""

from __future__ import annotations

import pickle

import numpy as np

from pooltree.node import wire
from pooltree.shards.messages import pack, unpack


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
    back = unpack(pickle.loads(pickle.dumps(pack(request))))
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
