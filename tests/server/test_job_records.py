"""A job's store record (``LiveJob.record``) keeps only the fields that differ from their defaults, and reads back
(``LiveJob.from_record``, through a real store) as the job it was made from; rows that older builds wrote, with
every field, read as before."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from job_record_reference import read_every_field

from pooltree.server.live.model import LiveJob
from pooltree.server.store import JobRecord, open_store

STORED = (
    "id",
    "operation_id",
    "task_name",
    "job_index",
    "address",
    "tree",
    "start_time",
    "state",
    "finish_time",
    "error",
    "exit_code",
    "abort_reason",
    "interruption_reason",
    "statistics",
    "stderr",
    "stderr_size",
    "interruption_info",
    "gpu_devices",
    "job_competition_id",
    "has_competitors",
)
"""The fields a record carries (not the runtime-only ``allocation_id`` and ``missed_heartbeats``)."""


def _running() -> LiveJob:
    return LiveJob("j1", "op1", "main", 7, "n1:9012", "default", 10.5)


def _finished_with_everything() -> LiveJob:
    job = _running()
    job.state = "aborted"
    job.finish_time = 20.25
    job.error = {"code": 1, "message": "boom", "attributes": {"preemption_reason": "x"}}
    job.exit_code = 0  # a falsy value that is not the default (None): kept
    job.abort_reason = "preemption"
    job.interruption_reason = "preemption"
    job.statistics = {"user_job/max_memory": 123}
    job.stderr = "err"
    job.stderr_size = 3
    job.interruption_info = {"interruption_reason": "preemption", "time": 19.0}
    job.gpu_devices = (0, 2)
    job.job_competition_id = "j0"
    job.has_competitors = True
    return job


def _fields(job: LiveJob) -> dict[str, object]:
    return {name: getattr(job, name) for name in STORED}


def test_a_running_jobs_document_holds_only_task_index_and_tree() -> None:
    assert _running().record().document == {"task_name": "main", "job_index": 7, "tree": "default"}
    finished = _running()
    finished.state, finished.finish_time, finished.exit_code = "completed", 11.0, 0
    assert finished.record().document == {
        "task_name": "main",
        "job_index": 7,
        "tree": "default",
        "exit_code": 0,
    }


def test_job_records_read_back_as_their_jobs_through_the_store(store_url: str) -> None:
    store = open_store(store_url)
    try:
        jobs = [_running(), dataclasses.replace(_finished_with_everything(), id="j2")]
        store.put_jobs([job.record() for job in jobs])
        for job in jobs:
            stored = store.get_job(job.operation_id, job.id)
            assert stored is not None
            assert _fields(LiveJob.from_record(stored)) == _fields(job)
        listed = {record.id: _fields(LiveJob.from_record(record)) for record in store.list_jobs("op1")}
        assert listed == {job.id: _fields(job) for job in jobs}
    finally:
        store.close()


def test_a_record_with_every_field_written_reads_as_the_compact_one() -> None:
    """Rows written before the documents were compact hold every field, defaults included."""
    for job in (_running(), _finished_with_everything()):
        compact = job.record()
        full = {
            "task_name": job.task_name,
            "job_index": job.job_index,
            "tree": job.tree,
            "error": job.error,
            "exit_code": job.exit_code,
            "abort_reason": job.abort_reason,
            "interruption_reason": job.interruption_reason,
            "statistics": job.statistics,
            "stderr": job.stderr,
            "stderr_size": job.stderr_size,
            "interruption_info": job.interruption_info,
            "gpu_devices": list(job.gpu_devices),
            "job_competition_id": job.job_competition_id,
            "has_competitors": job.has_competitors,
        }
        old = JobRecord(*dataclasses.astuple(compact)[:-1], document=full)  # type: ignore[misc]
        assert _fields(LiveJob.from_record(old)) == _fields(LiveJob.from_record(compact)) == _fields(job)


_DOCUMENT_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from(["", "x", "7", 0.0, 2.5]),
    st.lists(st.integers(0, 3), max_size=3),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 3), max_size=2),
)


def _outcome(read: Callable[[JobRecord], LiveJob], record: JobRecord) -> Any:
    try:
        return _fields(read(record))
    except (TypeError, ValueError):  # of two bad fields, either may be the one refused
        return "refused"


@settings(max_examples=400, deadline=None)
@given(
    document=st.dictionaries(
        st.sampled_from([*STORED[2:], "allocation_id", "missed_heartbeats", "unknown"]),
        _DOCUMENT_VALUES,
        max_size=8,
    ),
    state=st.sampled_from(["running", "completed", "aborted"]),
    finish_time=st.none() | st.just(12.0),
)
def test_a_record_reads_as_each_field_read_by_name(
    document: dict[str, Any], state: str, finish_time: float | None
) -> None:
    """Any document, with any of the fields (nulls, falsy and odd values, unknown keys, the runtime-only fields
    that a record never carries): ``from_record``, which reads only the keys the document has, gives the job (or
    the refusal) that reading every field by name gives."""
    record = JobRecord("op1", "j1", state, "n1:9012", 10.5, finish_time, None, document)
    assert _outcome(LiveJob.from_record, record) == _outcome(read_every_field, record)
