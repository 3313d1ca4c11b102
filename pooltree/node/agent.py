"""The node agent core: the state a heartbeat carries and how a heartbeat response is applied.

``NodeAgent`` wraps a ``JobExecutor``. ``build_heartbeat()`` returns a plain map: node address, resource limits
and usage (the sum of running jobs' allocation resources, as the scheduler counts them), measured memory, the
running jobs with their phase, memory (measured, never below the reserve: ``wire.counted_memory``) and statistics
(all running jobs' in one heartbeat every ``running_statistics_backoff``), and every finished job not yet
acknowledged. A finished job is re-sent in each heartbeat until the scheduler acknowledges its id, so a scheduler
restart loses no result; ``apply_heartbeat_response(start, preempt, abort, acknowledge)`` starts, interrupts and
aborts jobs and drops acknowledged reports. ``heartbeat_needed`` is set as soon as a job finishes, for an
out-of-turn heartbeat.
The HTTP loop that carries these maps lives elsewhere; nothing here does network I/O.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import psutil

from pooltree.errors import ConfigError, join_path
from pooltree.node import wire
from pooltree.node.executor import JobExecutor
from pooltree.node.job import JobResult, JobSpec
from pooltree.resources import MEMORY, Vector, parse_resources, resources_to_dict, vector, zeros

DEFAULT_NETWORK = 100.0
DEFAULT_REPORT_STDERR_LIMIT = 64 * 1024
DEFAULT_ABORT_REASON = "scheduler"


def detect_resource_limits(overrides: Mapping[str, Any] | None = None, path: str = "resources") -> Vector:
    """The node's resource limits: given values win; otherwise cpu count, total memory, user_slots = cpus,
    no gpu and network 100 (the YTsaurus default)."""
    cpus = float(os.cpu_count() or 1)
    detected = vector(
        user_slots=cpus, cpu=cpus, gpu=0, memory=float(psutil.virtual_memory().total), network=DEFAULT_NETWORK
    )
    given = parse_resources(overrides, path, missing=math.nan)
    return np.where(np.isnan(given), detected, given)


def _pairs(entries: Iterable[Any], path: str, fields: Sequence[str], defaults: Sequence[Any]) -> list[tuple]:
    """Normalise response entries given as ids, tuples or maps into tuples of ``fields``."""
    out: list[tuple] = []
    for index, entry in enumerate(entries):
        where = join_path(path, index)
        if isinstance(entry, str):
            values = [entry]
        elif isinstance(entry, Mapping):
            unknown = sorted(set(map(str, entry)) - set(fields))
            if unknown:
                raise ConfigError(join_path(where, unknown[0]), f"unknown field; known: {', '.join(fields)}")
            if "job_id" not in entry:
                raise ConfigError(join_path(where, "job_id"), "required field is missing")
            values = [entry.get(name, defaults[i]) for i, name in enumerate(fields)]
        elif isinstance(entry, list | tuple) and 1 <= len(entry) <= len(fields):
            values = list(entry)
        else:
            raise ConfigError(
                where, f"expected a job id, a list ({', '.join(fields)}) or a map, got {entry!r}"
            )
        values += list(defaults[len(values) :])
        if not isinstance(values[0], str) or not values[0]:
            raise ConfigError(join_path(where, "job_id"), f"expected a non-empty string, got {values[0]!r}")
        if len(fields) > 1 and (not isinstance(values[1], str) or not values[1]):
            raise ConfigError(join_path(where, fields[1]), f"expected a non-empty string, got {values[1]!r}")
        if len(fields) > 2:
            timeout = values[2]
            if (
                isinstance(timeout, bool)
                or not isinstance(timeout, int | float)
                or not 0 <= timeout < math.inf
            ):
                raise ConfigError(join_path(where, fields[2]), f"expected seconds >= 0, got {timeout!r}")
        out.append(tuple(values))
    return out


class NodeAgent:
    """Node-side state for heartbeats: limits, usage, running jobs, finished reports until acknowledged."""

    def __init__(
        self,
        address: str,
        executor: JobExecutor,
        resource_limits: Vector | None = None,
        *,
        clock: Callable[[], float] = time.time,
        report_stderr_limit: int = DEFAULT_REPORT_STDERR_LIMIT,
        default_interruption_timeout: float = 10.0,
        running_statistics_backoff: float = wire.RUNNING_STATISTICS_BACKOFF,
    ):
        if not isinstance(address, str) or not address:
            raise ConfigError("address", f"expected a non-empty node address, got {address!r}")
        self.address = address
        self.executor = executor
        self.resource_limits = (
            detect_resource_limits() if resource_limits is None else np.asarray(resource_limits, float)
        )
        if self.resource_limits.shape != zeros().shape or np.any(self.resource_limits < 0):
            raise ConfigError(
                "resource_limits", "expected a non-negative vector of user_slots, cpu, gpu, memory, network"
            )
        if math.isinf(executor.node_memory_limit):
            executor.node_memory_limit = float(self.resource_limits[MEMORY])
        self.report_stderr_limit = report_stderr_limit
        self.default_interruption_timeout = default_interruption_timeout
        if not 0 <= running_statistics_backoff < math.inf:
            raise ConfigError(
                "running_statistics_backoff", f"expected seconds >= 0, got {running_statistics_backoff!r}"
            )
        self.running_statistics_backoff = running_statistics_backoff
        self._clock = clock
        self._statistics_sent: float | None = None
        """When the running jobs' statistics were last sent (``running_statistics_backoff``); None: never."""
        self._sequence = 0
        self._unacknowledged: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._stderr_uploads: dict[str, str] = {}
        """Finished jobs whose stderr is longer than the report carries: job id → operation id."""
        self.heartbeat_needed = asyncio.Event()
        executor.add_listener(self._on_finish)

    def _on_finish(self, result: JobResult) -> None:
        report = result.to_dict()
        report["address"] = self.address
        report["stderr"] = self.executor.stderr(result.job_id, self.report_stderr_limit).decode(
            "utf-8", "replace"
        )
        if result.stderr_size > self.report_stderr_limit:  # the whole stderr goes by upload (node/files.py)
            self._stderr_uploads[result.job_id] = result.operation_id
        self._unacknowledged[result.job_id] = report
        self.heartbeat_needed.set()

    def resource_usage(self) -> Vector:
        """The sum of the running jobs' allocation resources (what the scheduler counts on this node)."""
        total = zeros()
        for job_id in self.executor.running_job_ids():
            spec = self.executor.spec(job_id)
            if spec is not None and spec.resources is not None:
                total = total + spec.resources
        return total

    def pending_stderr_uploads(self) -> list[tuple[str, str]]:
        """(job id, operation id) of finished, unacknowledged jobs whose whole stderr is still to be uploaded."""
        return [(job, op) for job, op in self._stderr_uploads.items() if job in self._unacknowledged]

    def stderr_uploaded(self, job_id: str) -> None:
        self._stderr_uploads.pop(job_id, None)

    def build_heartbeat(self) -> dict[str, Any]:
        """The heartbeat map: node state, running jobs, and finished-job reports not yet acknowledged."""
        self._sequence += 1
        self.heartbeat_needed.clear()
        running = []
        measured = 0.0
        now = self._clock()
        last = self._statistics_sent
        with_statistics = last is None or not 0 <= now - last < self.running_statistics_backoff
        if with_statistics:
            self._statistics_sent = now
        for job_id in self.executor.running_job_ids():
            spec = self.executor.spec(job_id)
            if spec is None:
                continue
            memory = self.executor.memory_usage(job_id)
            measured += memory
            reserve = 0.0 if spec.resources is None else float(spec.resources[MEMORY])
            statistics = self.executor.running_statistics(job_id) if with_statistics else None
            running.append(
                wire.running_job(
                    job_id,
                    spec.operation_id,
                    spec.task_name,
                    phase=self.executor.phase(job_id),
                    start_time=self.executor.start_time(job_id),
                    resource_usage=resources_to_dict(spec.resources),
                    memory_usage=wire.counted_memory(memory, reserve),
                    statistics=statistics,
                )
            )
            devices = self.executor.gpu_devices(job_id)
            if devices:
                running[-1][wire.GPU_DEVICES] = devices
        extra: dict[str, Any] = {}
        alerts = self.executor.alerts()
        if alerts:
            extra[wire.ALERTS] = alerts
        if self.executor.gpus.count:
            extra[wire.GPU_DEVICES] = [device.to_dict() for device in self.executor.gpus.devices]
        return wire.heartbeat(
            self.address,
            sequence=self._sequence,
            time=now,
            resource_limits=resources_to_dict(self.resource_limits),
            resource_usage=resources_to_dict(self.resource_usage()),
            memory_limit=self.executor.node_memory_limit,
            memory_usage=measured,
            memory_meter=self.executor.meter.name,
            running_jobs=running,
            finished_jobs=[dict(report) for report in self._unacknowledged.values()],
            **extra,
        )

    def unacknowledged_job_ids(self) -> list[str]:
        return list(self._unacknowledged)

    async def apply_heartbeat_response(
        self,
        start: Iterable[JobSpec | Mapping[str, Any]] = (),
        preempt: Iterable[Any] = (),
        abort: Iterable[Any] = (),
        acknowledge: Iterable[str] = (),
    ) -> dict[str, list[str]]:
        """Apply the scheduler's answer; everything is validated before anything is done.

        ``start``: job specs (or maps). ``preempt``: ``(job_id, reason, timeout)``: interruption with the
        operation's signal, then abort with ``reason``. ``abort``: ``(job_id, reason)`` or ids (reason
        ``scheduler``). ``acknowledge``: ids of finished jobs the scheduler has stored. Starting a job that is
        running or awaiting acknowledgement is a no-op, so a re-sent response is harmless; preempting or
        aborting a job the node no longer runs is skipped. Returns what was started, interrupted, aborted,
        acknowledged and skipped.
        """
        specs = [
            entry if isinstance(entry, JobSpec) else JobSpec.from_dict(entry, join_path("start", index))
            for index, entry in enumerate(start)
        ]
        preempts = _pairs(preempt, "preempt", ("job_id", "reason", "timeout"), (None, "preemption", None))
        aborts = _pairs(abort, "abort", ("job_id", "reason"), (None, DEFAULT_ABORT_REASON))
        acks = list(acknowledge)
        for index, job_id in enumerate(acks):
            if not isinstance(job_id, str) or not job_id:
                raise ConfigError(join_path("acknowledge", index), f"expected a job id, got {job_id!r}")
        summary: dict[str, list[str]] = {
            "acknowledged": [],
            "aborted": [],
            "interrupted": [],
            "started": [],
            "skipped": [],
        }
        for job_id in acks:
            self._stderr_uploads.pop(job_id, None)
            if self._unacknowledged.pop(job_id, None) is not None:
                self.executor.forget(job_id)
                summary["acknowledged"].append(job_id)
        running = set(self.executor.running_job_ids())
        for job_id, reason in aborts:
            if job_id in running:
                self.executor.abort(job_id, reason)
                summary["aborted"].append(job_id)
            else:
                summary["skipped"].append(job_id)
        for job_id, reason, timeout in preempts:
            if job_id in running:
                self.executor.interrupt(
                    job_id, self.default_interruption_timeout if timeout is None else timeout, reason
                )
                summary["interrupted"].append(job_id)
            else:
                summary["skipped"].append(job_id)
        for spec in specs:
            if spec.job_id in running or spec.job_id in self._unacknowledged:
                summary["skipped"].append(spec.job_id)
                continue
            await self.executor.start(spec)
            running.add(spec.job_id)
            summary["started"].append(spec.job_id)
        return summary

    async def apply_response_map(self, response: Mapping[str, Any]) -> dict[str, list[str]]:
        """``apply_heartbeat_response`` from a decoded response map (keys start, preempt, abort, acknowledge)."""
        body, _ = wire.split_response(response)
        return await self.apply_heartbeat_response(
            start=body[wire.START],
            preempt=body[wire.PREEMPT],
            abort=body[wire.ABORT],
            acknowledge=body[wire.ACKNOWLEDGE],
        )

    async def wait_for_heartbeat_needed(self, timeout: float) -> bool:
        """Wait until a job finishes (True) or ``timeout`` seconds pass (False): the agent's heartbeat pacing."""
        try:
            await asyncio.wait_for(self.heartbeat_needed.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def shutdown(self) -> None:
        """Stop every job (aborted, ``node_shutdown``); their reports stay until acknowledged."""
        await self.executor.shutdown()
