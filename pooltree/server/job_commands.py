"""Job commands of the HTTP API (yt-http-api.md §7): ``list_jobs``, ``get_job``, ``abort_job`` and
``get_job_stderr``, the job attribute maps the ``yt`` client reads, and the store of a job's whole stderr.

``JobCommands(scheduler, operation_id)`` is a ``CommandProvider``; ``OperationCommands`` makes one (its ``jobs``)
and hands it the operation id reader it uses for its own commands (``operation_alias`` resolved). Jobs of live
operations are read from ``LiveScheduler``; those of finished operations of earlier runs from the store.
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Callable
from typing import Any

from pooltree.server.commands import CommandContext, CommandRegistry
from pooltree.server.live import NO_SUCH_JOB, LiveJob, LiveScheduler, no_such_operation
from pooltree.server.operation_times import iso_time
from pooltree.server.protocol import YtError, parameter_error
from pooltree.server.store import JobRecord

STDERR_PREFIX = "job_stderr/"
"""Store key of a job's whole stderr (uploaded by its node when longer than the heartbeat report's tail)."""


def job_attributes(job: LiveJob) -> dict[str, Any]:
    """A job as ``list_jobs`` / ``get_job`` return it."""
    attributes: dict[str, Any] = {
        "id": job.id,
        "job_id": job.id,
        "operation_id": job.operation_id,
        "type": "vanilla",
        "job_type": "vanilla",
        "state": job.state,
        "address": job.address,
        "task_name": job.task_name,
        "job_index": job.job_index,
        "pool_tree": job.tree,
        "job_competition_id": job.competition_id,
        "has_competitors": job.has_competitors,
        "start_time": iso_time(job.start_time),
        "stderr_size": job.stderr_size,
        "statistics": job.statistics,
    }
    if job.finish_time is not None:
        attributes["finish_time"] = iso_time(job.finish_time)
    if job.error is not None:
        attributes["error"] = job.error
    if job.exit_code is not None:
        attributes["exit_code"] = job.exit_code
    if job.abort_reason is not None:
        attributes["abort_reason"] = job.abort_reason
    if job.interruption_reason is not None:
        attributes["interruption_reason"] = job.interruption_reason
    exec_attributes = job.exec_attributes()
    if exec_attributes is not None:
        attributes["exec_attributes"] = exec_attributes
    if job.interruption_info is not None:
        attributes["interruption_info"] = job.interruption_info
        attributes["preemption_reason"] = job.interruption_info.get("preemption_reason")
        if "preempted_for" in job.interruption_info:
            attributes["preempted_for"] = job.interruption_info["preempted_for"]
    return attributes


class JobCommands:
    """The job commands over a ``LiveScheduler``."""

    def __init__(self, scheduler: LiveScheduler, operation_id: Callable[[CommandContext], str]) -> None:
        self.scheduler = scheduler
        self.operation_id = operation_id
        """The command's ``operation_id`` (or its ``operation_alias`` resolved), checked."""

    def jobs(self, operation_id: str) -> list[LiveJob]:
        """An operation's jobs, oldest first: live ones from the scheduler, those of a finished one from the store."""
        with self.scheduler.lock:
            op = self.scheduler.operations.get(operation_id)
            if op is not None:
                return sorted(op.jobs.values(), key=lambda j: (j.start_time, j.id))
        if self.scheduler.store.get_operation(operation_id) is None:
            raise no_such_operation(operation_id)
        return [LiveJob.from_record(r) for r in self.scheduler.store.list_jobs(operation_id)]

    def list_jobs(self, ctx: CommandContext) -> dict[str, Any]:
        operation_id = self.operation_id(ctx)
        jobs = self.jobs(operation_id)
        state_counts = Counter(j.state for j in jobs)
        state = ctx.str_param("job_state", None)
        address = ctx.str_param("address", None)
        if state is not None:
            jobs = [j for j in jobs if j.state == state]
        if address is not None:
            jobs = [j for j in jobs if j.address == address]
        competition = ctx.str_param("job_competition_id", None)
        if competition is not None:  # a job and its speculative copy
            jobs = [j for j in jobs if j.competition_id == competition]
        if ctx.param("with_competitors", None) is not None:
            with_competitors = ctx.bool_param("with_competitors")
            jobs = [j for j in jobs if j.has_competitors == with_competitors]
        offset = ctx.int_param("offset", 0)
        limit = ctx.int_param("limit", 1000)
        if offset < 0 or limit < 0:
            raise parameter_error("limit" if limit < 0 else "offset", "must be non-negative")
        page = jobs[offset : offset + limit]
        return {
            "jobs": [job_attributes(j) for j in page],
            "cypress_job_count": len(jobs),
            "controller_agent_job_count": len(jobs),
            "scheduler_job_count": len(jobs),
            "archive_job_count": 0,
            "type_counts": {"vanilla": len(jobs)},
            "state_counts": dict(state_counts),
            "errors": [],
        }

    def _job(self, ctx: CommandContext) -> LiveJob:
        operation_id = self.operation_id(ctx)
        job_id = ctx.str_param("job_id")
        with self.scheduler.lock:
            op = self.scheduler.operations.get(operation_id)
            if op is not None and job_id in op.jobs:
                return op.jobs[job_id]
        record: JobRecord | None = self.scheduler.store.get_job(operation_id, job_id)
        if record is None:
            raise YtError(
                f"No such job {job_id} in operation {operation_id}",
                code=NO_SUCH_JOB,
                attributes={"job_id": job_id, "operation_id": operation_id},
            )
        return LiveJob.from_record(record)

    def get_job(self, ctx: CommandContext) -> dict[str, Any]:
        return job_attributes(self._job(ctx))

    def abort_job(self, ctx: CommandContext) -> None:
        """Abort a running job (``user_request``); its node kills it at its next heartbeat and the operation's
        controller runs the job again, as YTsaurus does."""
        job_id = ctx.str_param("job_id")
        with self.scheduler.lock:
            job = self.scheduler.jobs.get(job_id)
            node = self.scheduler.nodes.get(job.address) if job is not None else None
            if job is None or job.state != "running" or node is None:
                raise YtError(
                    f"No such running job {job_id}",
                    code=NO_SUCH_JOB,
                    attributes={"job_id": job_id},
                )
            if not any(entry.get("job_id") == job_id for entry in node.aborts):
                node.aborts.append({"job_id": job_id, "reason": "user_request"})
                self.scheduler.generation.bump_node(job.address)

    def store_stderr(self, operation_id: str, job_id: str, data: bytes) -> None:
        """Keep a job's whole stderr its node uploaded (the heartbeat report carries only its tail)."""
        known = False
        with self.scheduler.lock:
            op = self.scheduler.operations.get(operation_id)
            known = op is not None and job_id in op.jobs
        if not known and self.scheduler.store.get_job(operation_id, job_id) is None:
            raise YtError(
                f"No such job {job_id} in operation {operation_id}",
                code=NO_SUCH_JOB,
                attributes={"job_id": job_id, "operation_id": operation_id},
            )
        self.scheduler.store.set_value(STDERR_PREFIX + job_id, base64.b64encode(data).decode("ascii"))

    def get_job_stderr(self, ctx: CommandContext) -> bytes:
        job = self._job(ctx)
        uploaded = self.scheduler.store.get_value(STDERR_PREFIX + job.id)
        if isinstance(uploaded, str):
            return base64.b64decode(uploaded)
        return job.stderr.encode("utf-8", "replace")

    def register_commands(self, registry: CommandRegistry) -> None:
        registry.register("list_jobs", self.list_jobs)
        registry.register("get_job", self.get_job)
        registry.register("abort_job", self.abort_job, output_type="null", is_volatile=True)
        registry.register("get_job_stderr", self.get_job_stderr, output_type="binary")
