"""The objects a heartbeat reads for each running job keep their fields in slots.

A loaded heartbeat reads, for every running job its node reports, the job's report (``RunningJobReport``: its id,
GPU devices, measured memory) and the scheduler's job (``LiveJob``: state, address, allocation, missed
heartbeats). At 1,000 nodes these objects come back to the CPU's caches once a heartbeat period, cold: on CPython
3.11 an instance without slots keeps its values in an array of their own beside the object, one more cold cache
line a read, and the reports of a start's ~10 heartbeats cost 14 -> 10 us of it with slots
(``bench/RESULTS.md``, session 38's ``startcore``). Nothing may give them a ``__dict__`` back unnoticed."""

from __future__ import annotations

import copy
import pickle

from pooltree.node.wire import RunningJobReport
from pooltree.server.live.model import LiveJob


def test_a_running_report_and_a_job_have_no_instance_dict() -> None:
    report = RunningJobReport("j", "op", "main", (1.0, 1.0, 0.0, 1.0, 0.0), 0.0, {}, ())
    job = LiveJob("j", "op", "main", 3, "n1", "default", 1.0, allocation_id="op/1")
    for value in (report, job):
        assert not hasattr(value, "__dict__"), type(value).__name__
        assert pickle.loads(pickle.dumps(value)) == value  # (node shards and tests copy them)
        assert copy.copy(value) == value
    assert job.record().id == "j" and job.competition_id == "j"
