"""The plain reference read of a stored job record (``LiveJob.from_record`` as it was before session 39: every
field read from the document by name), shared by the tests that compare the faster read against it."""

from __future__ import annotations

from pooltree.server.live.model import LiveJob
from pooltree.server.store import JobRecord


def read_every_field(record: JobRecord) -> LiveJob:
    """The reference: ``from_record`` as it was, each field read from the document by name."""
    doc = record.document
    return LiveJob(
        id=record.id,
        operation_id=record.operation_id,
        task_name=doc.get("task_name", "main"),
        job_index=int(doc.get("job_index", 0)),
        address=record.address,
        tree=doc.get("tree", ""),
        start_time=record.start_time,
        state=record.state,
        finish_time=record.finish_time,
        error=doc.get("error"),
        exit_code=doc.get("exit_code"),
        abort_reason=doc.get("abort_reason"),
        interruption_reason=doc.get("interruption_reason"),
        statistics=dict(doc.get("statistics") or {}),
        stderr=doc.get("stderr") or "",
        stderr_size=int(doc.get("stderr_size") or 0),
        interruption_info=doc.get("interruption_info"),
        gpu_devices=tuple(doc.get("gpu_devices") or ()),
        job_competition_id=doc.get("job_competition_id"),
        has_competitors=bool(doc.get("has_competitors")),
    )
