"""A simulated exec node for the benches: its heartbeats in the real wire format, its jobs without processes.

``SimNode`` builds a node's heartbeat body (``pooltree.node.wire``, the module the node agent and the scheduler
share) and applies the scheduler's answers: started jobs "run" ``job_seconds`` stretched by ``job_jitter`` and are
then reported completed until acknowledged; preempted and aborted ones are reported aborted. ``memory_meter``: each
running job's memory measured anew every heartbeat and its statistics sent at the agent's backoff, as the node
agent reports them. ``live_nodes.py`` drives many
from its driver processes against a real scheduler; ``heartbeat_profile.py``, ``heartbeat_cold.py``,
``job_rows.py`` and ``read_snapshot.py`` in process.
"""

from __future__ import annotations

import random
from typing import Any

from pooltree.node import wire

METERED_BYTES = 256 * 2**20
"""A simulated job's memory when its allocation reserves none (``SimNode.memory_meter``)."""
METERED_LOW, METERED_HIGH = 0.5, 0.9
"""The share of a simulated job's memory its node measures, drawn anew each heartbeat (``SimNode.memory_meter``)."""


def _statistics(reserve: float, memory: float, seconds: float) -> dict[str, float]:
    """A running job's statistics so far under the names the node agent sends (``node.job.job_statistics``)."""
    elapsed = max(seconds, 0.0)
    return {
        "user_job/max_memory": round(memory),
        "user_job/memory_reserve": round(reserve),
        "job_proxy/max_memory": 0,
        "job_proxy/memory_reserve": 0,
        "job_proxy/estimated_memory": 0,
        "user_job/cumulative_memory_reserve": round(reserve * elapsed),
        "user_job/cumulative_max_memory": round(memory * elapsed),
        "time/total": round(elapsed * 1000.0),
        "time/exec": round(elapsed * 1000.0),
    }


class SimNode:
    """One exec node without processes: jobs finish ``job_seconds`` after their start, each stretched by a factor
    drawn uniformly from [1 - job_jitter, 1 + job_jitter] (seeded by the address), so that jobs started together
    do not all finish together and the run reaches a steady turnover."""

    def __init__(
        self,
        address: str,
        cpu: float,
        memory: float,
        job_seconds: float,
        job_jitter: float = 0.0,
        memory_meter: bool = False,
    ) -> None:
        self.address = address
        self.limits = {"user_slots": cpu, "cpu": cpu, "memory": memory, "network": 100.0}
        self.job_seconds = job_seconds
        self.job_jitter = job_jitter
        self.random = random.Random(address)
        self.running: dict[str, dict[str, Any]] = {}
        """job id → its start entry plus ``finish_at``."""
        self.jobs_log: list[tuple[str, str, float, str, int]] | None = None
        """When set (``bench/live_restart.py``): every job's events as (event, job id, time, operation id, job
        index), event ``start``, ``completed``, ``aborted`` or ``acknowledged``."""
        self.finished: dict[str, dict[str, Any]] = {}
        self.sequence = 0
        self.memory_meter = memory_meter
        """Report each running job as the node agent does (``node/agent.py``): its memory measured anew every
        heartbeat, a share of the job's memory (its reserve, else ``METERED_BYTES``) drawn from [``METERED_LOW``,
        ``METERED_HIGH``] and reported never below the reserve (``wire.counted_memory``), and the running jobs'
        statistics so far in one heartbeat every ``wire.RUNNING_STATISTICS_BACKOFF`` seconds. Off: no measured
        memory, no statistics, the same entries every heartbeat."""
        self._statistics_sent: float | None = None
        """When the running jobs' statistics were last sent (``memory_meter``); None: never."""
        self._view: tuple[list[dict[str, Any]], dict[str, float], float] | None = None
        """The running jobs' entries, their summed usage and the first ``finish_at``, as last computed: kept until
        the running set changes (the same values each heartbeat recomputed; the driver's CPU is the machine's)."""

    def body(self, now: float) -> bytes:
        if self._view is None or self._view[2] <= now:
            for job_id, job in list(self.running.items()):
                if job["finish_at"] <= now:
                    del self.running[job_id]
                    self._view = None
                    self.finished[job_id] = wire.finished_job(
                        job_id, job["operation_id"], job["task_name"], "completed", job["start_time"], now
                    )
                    self._log("completed", job_id, now, job)
        self.sequence += 1
        if self._view is None:
            usage: dict[str, float] = {}
            for job in self.running.values():
                for key, value in job["resources"].items():
                    usage[key] = usage.get(key, 0.0) + float(value)
            running = [
                wire.running_job(
                    job_id,
                    job["operation_id"],
                    job["task_name"],
                    start_time=job["start_time"],
                    resource_usage=job["resources"],
                )
                for job_id, job in self.running.items()
            ]
            first = min((job["finish_at"] for job in self.running.values()), default=float("inf"))
            self._view = (running, usage, first)
        running, usage, _ = self._view
        measured = 0.0
        if self.memory_meter:
            running, measured = self._metered(running, now)
        heartbeat = wire.heartbeat(
            self.address,
            sequence=self.sequence,
            time=now,
            resource_limits=self.limits,
            resource_usage=usage,
            memory_limit=self.limits["memory"],
            memory_usage=measured,
            memory_meter="psutil" if self.memory_meter else "none",
            running_jobs=running,
            finished_jobs=list(self.finished.values()),
        )
        return wire.encode(heartbeat)

    def _metered(self, entries: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], float]:
        """The running entries with this heartbeat's memory and the statistics due (new maps: the kept view stays
        as computed), and the measured memory's sum."""
        out, total, draw = [], 0.0, self.random.uniform
        last = self._statistics_sent
        with_statistics = last is None or not 0 <= now - last < wire.RUNNING_STATISTICS_BACKOFF
        if with_statistics:
            self._statistics_sent = now
        for entry in entries:
            reserve = float(entry.get("resource_usage", {}).get("memory", 0.0))
            memory = float(int((reserve or METERED_BYTES) * draw(METERED_LOW, METERED_HIGH)))
            metered = {**entry, "memory_usage": wire.counted_memory(memory, reserve)}
            if with_statistics:
                metered["statistics"] = _statistics(reserve, memory, now - entry["start_time"])
            out.append(metered)
            total += memory
        return out, total

    def apply(self, response: dict[str, Any], now: float) -> int:
        """Apply an answer; returns how many jobs it started."""
        for job_id in response.get(wire.ACKNOWLEDGE, ()):
            if self.finished.pop(job_id, None) is not None:
                self._log("acknowledged", job_id, now, None)
        stops = [entry[0] for entry in response.get(wire.PREEMPT, ())]
        stops += [
            entry["job_id"] if isinstance(entry, dict) else entry for entry in response.get(wire.ABORT, ())
        ]
        for job_id in stops:
            job = self.running.pop(job_id, None)
            if job is not None:
                self._view = None
                self.finished[job_id] = wire.finished_job(
                    job_id, job["operation_id"], job["task_name"], "aborted", job["start_time"], now
                )
                self._log("aborted", job_id, now, job)
        started = 0
        for spec in response.get(wire.START, ()):
            if spec["job_id"] in self.running or spec["job_id"] in self.finished:
                continue
            self._view = None
            self.running[spec["job_id"]] = {
                "operation_id": spec["operation_id"],
                "task_name": spec.get("task_name", "main"),
                "resources": spec.get("resources") or {"user_slots": 1.0},
                "start_time": now,
                "finish_at": now
                + self.job_seconds * (1.0 + self.job_jitter * (2.0 * self.random.random() - 1.0)),
                "job_index": int(spec.get("job_index", -1)),
            }
            self._log("start", spec["job_id"], now, self.running[spec["job_id"]])
            started += 1
        return started

    def _log(self, event: str, job_id: str, now: float, job: dict[str, Any] | None) -> None:
        if self.jobs_log is not None:
            operation, index = (job["operation_id"], job["job_index"]) if job is not None else ("", -1)
            self.jobs_log.append((event, job_id, now, operation, index))
