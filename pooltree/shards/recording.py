"""A recorded heartbeat sequence and its replay: the harness that proves two schedulers decide alike.

Node shards (issue 25) must start and preempt the same allocations as the single-process scheduler on the same
inputs. ``RecordingScheduler`` wraps a scheduler (the ``LiveScheduler`` methods ``start_operation``,
``process_heartbeat``, ``update_fair_share``), passes every call on and keeps the inputs in order in a
``Recording`` (operation starts, heartbeat maps, fair-share updates, with their times) and the decisions it saw.
``replay(recording, scheduler)`` drives another scheduler through the same inputs and returns its ``Decisions``:
per heartbeat, the allocations started and preempted, named by what is the same in every run (operation start
index, task, job index, node; preemption reason) rather than by the random operation and job ids. Ids in the
recorded heartbeats are translated to the replaying scheduler's own by those names; a heartbeat reporting a job
the replay did not start raises ``ReplayDivergence``; other differences show as unequal ``Decisions``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pooltree.node import wire
from pooltree.node.wire import HeartbeatRequest, parse_heartbeat

JobName = tuple[int, str, int]
"""(operation start index, task, job index): a job's name in every run."""
JobStart = tuple[JobName, int]
"""A job's name and which start of that name it is (a preempted or lost job starts again under its name)."""


class ReplayDivergence(Exception):
    """The replaying scheduler's answers cannot carry the recorded sequence on (it decided differently)."""


class Scheduler(Protocol):
    def start_operation(self, operation_type: str, spec: Any, user: str, now: float) -> Any: ...

    def process_heartbeat(self, heartbeat: HeartbeatRequest, now: float) -> dict[str, Any]: ...

    def update_fair_share(self, tree: str, now: float) -> None: ...


@dataclass
class Decisions:
    """Per heartbeat (in recorded order): started ``(job name, node)`` and preempted ``(job name, reason)``."""

    started: list[list[tuple[JobName, str]]] = field(default_factory=list)
    preempted: list[list[tuple[JobName, str]]] = field(default_factory=list)

    @property
    def started_count(self) -> int:
        return sum(len(batch) for batch in self.started)

    @property
    def preempted_count(self) -> int:
        return sum(len(batch) for batch in self.preempted)


@dataclass
class Recording:
    """Inputs in order: ``("start", spec, user, now)``, ``("heartbeat", map, now)``, ``("update", tree, now)``;
    the recorded run's operation ids (start order) and job ids by name and start, to translate its heartbeats."""

    events: list[tuple[Any, ...]] = field(default_factory=list)
    operation_ids: list[str] = field(default_factory=list)
    job_ids: dict[JobStart, str] = field(default_factory=dict)


class _Names:
    """One run's operation start indexes and job names, from its answers."""

    def __init__(self) -> None:
        self.operation_index: dict[str, int] = {}
        self.operation_ids: list[str] = []
        self.job_name: dict[str, JobName] = {}
        self.job_start: dict[str, JobStart] = {}
        self.job_ids: dict[JobStart, str] = {}
        self._starts: dict[JobName, int] = {}

    def started(self, operation_id: str) -> None:
        self.operation_index[operation_id] = len(self.operation_ids)
        self.operation_ids.append(operation_id)

    def decisions(self, address: str, answer: dict[str, Any]) -> tuple[list, list]:
        """One answer's started and preempted allocations by name (aborts for unknown jobs are not decisions)."""
        started: list[tuple[JobName, str]] = []
        preempted: list[tuple[JobName, str]] = []
        for spec in answer[wire.START]:
            name = (
                self.operation_index[spec["operation_id"]],
                str(spec.get("task_name", "main")),
                int(spec.get("job_index", 0)),
            )
            start = (name, self._starts.get(name, 0))
            self._starts[name] = start[1] + 1
            self.job_name[spec["job_id"]] = name
            self.job_start[spec["job_id"]] = start
            self.job_ids[start] = spec["job_id"]
            started.append((name, address))
        for job_id, reason, _ in answer[wire.PREEMPT]:
            preempted.append((self.job_name[job_id], reason))
        for entry in answer[wire.ABORT]:
            if entry["job_id"] in self.job_name and entry["reason"] != "unknown_job":
                preempted.append((self.job_name[entry["job_id"]], entry["reason"]))
        return started, preempted


class RecordingScheduler:
    """Passes calls on to ``scheduler`` and records them (``recording``) and its decisions (``decisions``)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.recording = Recording()
        self.decisions = Decisions()
        self._names = _Names()

    def start_operation(self, operation_type: str, spec: Any, user: str, now: float) -> Any:
        if operation_type != "vanilla":
            raise ValueError("the recording holds vanilla operations")
        op = self.scheduler.start_operation(operation_type, copy.deepcopy(spec), user, now)
        self.recording.events.append(("start", copy.deepcopy(spec), user, now))
        self._names.started(op.id)
        self.recording.operation_ids.append(op.id)
        return op

    def heartbeat(self, data: dict[str, Any], now: float) -> dict[str, Any]:
        """A node's heartbeat map, as the service gets it."""
        answer = self.scheduler.process_heartbeat(parse_heartbeat(data), now)
        self.recording.events.append(("heartbeat", copy.deepcopy(data), now))
        started, preempted = self._names.decisions(data[wire.NODE_ADDRESS], answer)
        self.decisions.started.append(started)
        self.decisions.preempted.append(preempted)
        self.recording.job_ids.update(self._names.job_ids)
        return answer

    def update_fair_share(self, tree: str, now: float) -> None:
        self.scheduler.update_fair_share(tree, now)
        self.recording.events.append(("update", tree, now))


HeartbeatSender = Callable[[dict[str, Any], float], dict[str, Any]]
"""Carries one heartbeat map at a time to a scheduler and returns its answer map."""


def replay(recording: Recording, scheduler: Scheduler, send: HeartbeatSender | None = None) -> Decisions:
    """Drive ``scheduler`` through ``recording``; its decisions. Heartbeats go to ``send`` when given (node
    shard processes over HTTP, say), else parsed to ``scheduler.process_heartbeat``."""
    if send is None:

        def send(data: dict[str, Any], now: float) -> dict[str, Any]:
            return scheduler.process_heartbeat(parse_heartbeat(data), now)

    names = _Names()
    recorded_name = {job_id: start for start, job_id in recording.job_ids.items()}
    out = Decisions()
    for event in recording.events:
        if event[0] == "start":
            _, spec, user, now = event
            names.started(scheduler.start_operation("vanilla", copy.deepcopy(spec), user, now).id)
        elif event[0] == "update":
            scheduler.update_fair_share(event[1], event[2])
        else:
            _, data, now = event
            answer = send(_translate(data, recording, names, recorded_name), now)
            started, preempted = names.decisions(data[wire.NODE_ADDRESS], answer)
            out.started.append(started)
            out.preempted.append(preempted)
    return out


def _translate(
    data: dict[str, Any], recording: Recording, names: _Names, recorded_name: dict[str, JobStart]
) -> dict[str, Any]:
    """A recorded heartbeat with the replaying scheduler's operation and job ids."""
    out = copy.deepcopy(data)
    operations = dict(zip(recording.operation_ids, names.operation_ids, strict=False))
    for key in (wire.RUNNING_JOBS, wire.FINISHED_JOBS):
        for entry in out.get(key, []):
            name = recorded_name.get(entry["job_id"])
            replayed = names.job_ids.get(name) if name is not None else None
            if replayed is None:
                raise ReplayDivergence(
                    f"the heartbeat reports job {entry['job_id']} that the replay did not start"
                )
            entry["job_id"] = replayed
            entry["operation_id"] = operations[entry["operation_id"]]
    return out
