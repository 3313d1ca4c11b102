"""A recorded run of the single-process scheduler with starts, completions and preemptions (three nodes without
processes, two pools), shared by the harness's tests and the node shard processes' proof."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pooltree.config import parse_pool_trees
from pooltree.node import wire
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store
from pooltree.shards.recording import Decisions, RecordingScheduler

PREEMPTING = {
    "default": {
        "config": {"fair_share_starvation_timeout": 1000, "fair_share_starvation_tolerance": 1.0},
        "pools": {"a": {}, "b": {}},
    }
}
NOT_PREEMPTING = {
    "default": {"config": {"preemption_satisfaction_threshold": 100.0}, "pools": {"a": {}, "b": {}}}
}
LIMITS = {"user_slots": 2, "cpu": 2, "memory": 8 << 30}


def make_scheduler(path: Path, trees: dict[str, Any]) -> LiveScheduler:
    live = LiveScheduler(open_store(f"sqlite:///{path}"))
    live.apply_pool_trees(parse_pool_trees(trees), None, 0.0)
    return live


Memory = Callable[[str, float, float], float]
"""A running job's measured memory: (its operation id, its start, now) -> bytes (0: not measured)."""


class Node:
    """A node without processes: a job runs its operation's duration, then is reported completed; ``memory``
    gives the running jobs' measured memory (none by default). A running job reports one slot and one cpu, or
    with ``as_started`` the resources of its start entry (as the node agent does)."""

    def __init__(
        self,
        address: str,
        durations: dict[str, float],
        memory: Memory | None = None,
        as_started: bool = False,
    ) -> None:
        self.address = address
        self.durations = durations
        self.memory = memory
        self.as_started = as_started
        self.resources: dict[str, dict[str, float]] = {}
        self.running: dict[str, tuple[str, float, float]] = {}
        self.finished: dict[str, dict[str, Any]] = {}

    def heartbeat(self, now: float) -> dict[str, Any]:
        for job_id, (operation_id, start, end) in list(self.running.items()):
            if end <= now:
                del self.running[job_id]
                self.finished[job_id] = wire.finished_job(
                    job_id, operation_id, "main", "completed", start, now
                )
        running = [
            wire.running_job(
                job_id,
                operation_id,
                "main",
                start_time=start,
                resource_usage=self.resources[job_id] if self.as_started else {"user_slots": 1, "cpu": 1},
                memory_usage=self.memory(operation_id, start, now) if self.memory is not None else 0,
            )
            for job_id, (operation_id, start, _) in self.running.items()
        ]
        return wire.heartbeat(
            self.address,
            sequence=0,
            time=now,
            resource_limits=LIMITS,
            resource_usage={},
            memory_limit=8 << 30,
            memory_usage=0,
            memory_meter="none",
            running_jobs=running,
            finished_jobs=list(self.finished.values()),
        )

    def apply(self, answer: dict[str, Any], now: float) -> None:
        for job_id in answer[wire.ACKNOWLEDGE]:
            self.finished.pop(job_id, None)
        stopped = [entry[0] for entry in answer[wire.PREEMPT]] + [
            entry["job_id"] for entry in answer[wire.ABORT]
        ]
        for job_id in stopped:
            if job_id in self.running:
                operation_id, start, _ = self.running.pop(job_id)
                self.finished[job_id] = wire.finished_job(
                    job_id, operation_id, "main", "aborted", start, now, abort_reason="preemption"
                )
        for spec in answer[wire.START]:
            operation_id = spec["operation_id"]
            self.running[spec["job_id"]] = (operation_id, now, now + self.durations[operation_id])
            self.resources[spec["job_id"]] = spec["resources"]


def record_run(path: Path) -> tuple[RecordingScheduler, Decisions]:
    recorder = RecordingScheduler(make_scheduler(path, PREEMPTING))
    durations: dict[str, float] = {}
    nodes = [Node(f"n{i}", durations) for i in range(3)]
    vanilla = {"command": "true", "cpu_limit": 1}
    long = recorder.start_operation(
        "vanilla", {"pool": "a", "tasks": {"main": {**vanilla, "job_count": 12}}}, "u", 0.0
    )
    durations[long.id] = 30.0
    now = 0.0
    while now < 12.0:
        now = round(now + 0.25, 2)
        if now == 4.0:
            short = recorder.start_operation(
                "vanilla", {"pool": "b", "tasks": {"main": {**vanilla, "job_count": 8}}}, "v", now
            )
            durations[short.id] = 1.5
        if now == int(now):
            recorder.update_fair_share("default", now)
        node = nodes[int(now * 4) % len(nodes)]
        node.apply(recorder.heartbeat(node.heartbeat(now), now), now)
    return recorder, recorder.decisions


Arrivals = dict[float, list[tuple[str, int, float]]]
"""Per moment, the operations submitted then: (pool, job count, each job's duration)."""


def drive(
    recorder: RecordingScheduler,
    nodes: list[Node],
    durations: dict[str, float],
    arrivals: Arrivals,
    until: float,
    update_every: float = 1.0,
    after: Callable[[], None] | None = None,
) -> tuple[RecordingScheduler, Decisions]:
    """Every 0.25 s until ``until``: the operations arriving then, a fair-share update every ``update_every``
    seconds, and one node's heartbeat (the nodes in turn); ``after`` is called after every heartbeat."""
    vanilla = {"command": "true", "cpu_limit": 1}
    now = 0.0
    while now < until:
        for pool, count, duration in arrivals.get(now, []):
            spec = {"pool": pool, "tasks": {"main": {**vanilla, "job_count": count}}}
            durations[recorder.start_operation("vanilla", spec, "u", now).id] = duration
        if now % update_every == 0:
            recorder.update_fair_share("default", now)
        node = nodes[int(now * 4) % len(nodes)]
        node.apply(recorder.heartbeat(node.heartbeat(now), now), now)
        if after is not None:
            after()
        now = round(now + 0.25, 2)
    return recorder, recorder.decisions


def record_quiet_run(
    path: Path, memory: Memory | None = None, trees: dict[str, Any] | None = None
) -> tuple[RecordingScheduler, Decisions]:
    """A run with long quiet stretches between busy ones, on four nodes heartbeating once a second each: one
    operation fills every node and completes; the nodes idle; a second one starts more jobs than fit and a third
    in the other pool starves until it preempts; then everything completes and the nodes idle again. The jobs
    report ``memory`` when given; ``trees`` (default ``PREEMPTING``) are the pool trees."""
    recorder = RecordingScheduler(make_scheduler(path, PREEMPTING if trees is None else trees))
    durations: dict[str, float] = {}
    nodes = [Node(f"n{i}", durations, memory) for i in range(4)]
    arrivals = {0.0: [("a", 8, 6.0)], 10.0: [("a", 12, 16.0)], 12.0: [("b", 4, 2.0)]}
    return drive(recorder, nodes, durations, arrivals, 40.0)


MIB = 1 << 20


def wavering_memory(operation_id: str, start: float, now: float) -> float:
    """Measured memory that moves at every heartbeat: below the jobs' reserve (336 MiB), except for the jobs
    started in [10, 11) s (the second operation's first ones): after 3 s they go above it and grow for 3 s (each
    report raises the accounted usage), then stay flat above it."""
    step = int(now * 4) % 7
    age = now - start
    if not 10.0 <= start < 11.0 or age < 3.0:
        return (100 + step) * MIB
    return (400 + 10 * min(age, 6.0)) * MIB


BUSY = {
    "default": {
        "config": {"fair_share_starvation_timeout": 1000, "fair_share_starvation_tolerance": 1.0},
        "pools": {"a": {}, "b": {}, "c": {"resource_limits": {"cpu": 5}}},
    }
}


def record_busy_run(
    path: Path, scheduler: LiveScheduler | None = None, after: Callable[[], None] | None = None
) -> tuple[RecordingScheduler, Decisions]:
    """A run where the shards must follow each other between fair-share updates: eight nodes, each heartbeating
    once per 2-second period (an update every period), operations in three pools (one with a cpu limit below what
    its operation asks) whose jobs of several lengths end and start within periods, and one that arrives later,
    starves and preempts. ``scheduler`` (made with ``BUSY``) is recorded instead of a new one; ``after`` is called
    after every heartbeat."""
    recorder = RecordingScheduler(make_scheduler(path, BUSY) if scheduler is None else scheduler)
    durations: dict[str, float] = {}
    nodes = [Node(f"n{i}", durations) for i in range(8)]
    arrivals: Arrivals = {
        0.0: [("a", 40, 3.25), ("c", 30, 2.75), ("a", 10, 25.0)],
        0.5: [("b", 6, 4.75)],
        1.0: [("a", 30, 1.75)],
        9.0: [("b", 12, 6.0)],
    }
    return drive(recorder, nodes, durations, arrivals, 30.0, update_every=2.0, after=after)


def record_full_run(path: Path) -> tuple[RecordingScheduler, Decisions]:
    """A busy run where most heartbeats of full nodes report nothing new: six nodes heartbeating every 1.5 s
    (an update every second); long jobs (40 s) and short ones (1.25 s, ending at nearly every heartbeat of their
    node) of pool ``a`` fill every node, so jobs start and end somewhere at almost every heartbeat while the
    nodes full of long jobs stay quiet; an operation in pool ``b`` arrives at 12 s, starves and preempts on
    full nodes. The nodes report their jobs with the resources of their start (``as_started``)."""
    recorder = RecordingScheduler(make_scheduler(path, PREEMPTING))
    durations: dict[str, float] = {}
    nodes = [Node(f"n{i}", durations, as_started=True) for i in range(6)]
    arrivals: Arrivals = {0.0: [("a", 6, 40.0)], 2.0: [("a", 60, 1.25)], 12.0: [("b", 6, 5.0)]}
    return drive(recorder, nodes, durations, arrivals, 30.0)
