"""Operation ``time_limit`` and job ``job_time_limit`` (pure rules; ``SchedulerCore.enforce_time_limits`` applies them).

YTsaurus's controller fails an operation that runs longer than its spec ``time_limit`` with the error
"Operation is running for too long, aborted" (attribute ``time_limit``, milliseconds); its job proxy ends a
user job that runs longer than ``job_time_limit`` with "Job time limit exceeded" (code 1202, attribute
``limit``). Durations here are seconds; specs may be ``OperationSpec`` models (typed, seconds) or plain maps as
YTsaurus writes them (milliseconds or strings with a unit).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pooltree.resources import parse_duration

OPERATION_TIME_LIMIT_MESSAGE = "Operation is running for too long, aborted"
JOB_TIME_LIMIT_EXCEEDED = 1202
JOB_TIME_LIMIT_MESSAGE = "Job time limit exceeded"


def _error(code: int, message: str, attributes: dict[str, Any]) -> dict[str, Any]:
    return {"code": code, "message": message, "attributes": attributes, "inner_errors": []}


def _seconds(source: Any, name: str, path: str) -> float | None:
    if source is None:
        return None
    if isinstance(source, Mapping):
        value = source.get(name)
        return None if value is None else parse_duration(value, f"{path}.{name}")
    value = getattr(source, name, None)
    return None if value is None else float(value)


def operation_time_limit(spec: Any) -> float | None:
    """The spec's ``time_limit`` in seconds, or None."""
    return _seconds(spec, "time_limit", "spec")


def user_jobs(spec: Any) -> dict[str, Any]:
    """Every user job of a spec (an ``OperationSpec`` or a plain map) by name: vanilla tasks, ``mapper``,
    ``reducer``."""
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        jobs = dict(spec.get("tasks") or {})
        for name in ("mapper", "reducer"):
            if spec.get(name) is not None:
                jobs.setdefault(name, spec[name])
        return jobs
    found = getattr(spec, "user_jobs", None)
    return dict(found()) if found is not None else {}


def job_time_limit(spec: Any, task: str) -> float | None:
    """``job_time_limit`` (seconds) of the user job that runs ``task``: a vanilla task, ``mapper`` or ``reducer``.

    A task name that is none of them takes the spec's only user job, if it has exactly one.
    """
    if spec is None:
        return None
    jobs = user_jobs(spec)
    job = jobs.get(task)
    if job is None and len(jobs) == 1:
        job = next(iter(jobs.values()))
    return _seconds(job, "job_time_limit", f"spec.tasks.{task}")


def operation_time_limit_error(limit: float, operation_id: str) -> dict[str, Any]:
    return _error(
        1, OPERATION_TIME_LIMIT_MESSAGE, {"time_limit": round(limit * 1000), "operation_id": operation_id}
    )


def job_time_limit_error(limit: float) -> dict[str, Any]:
    return _error(JOB_TIME_LIMIT_EXCEEDED, JOB_TIME_LIMIT_MESSAGE, {"limit": round(limit * 1000)})
