"""Speculative jobs: a second copy of a job that runs too long; the first copy to complete wins, the other is aborted.

What YTsaurus's controller agent does (its speculative and competitive job managers, ``task.cpp``), restated:

* A job's ``job_speculation_timeout`` is its user job's (a vanilla task, ``mapper``, ``reducer``), else the
  operation spec's. When a running job has run that long, its task asks for a speculative copy (a *candidate*).
* The request is refused while the task already has ``max_speculative_job_count_per_task`` speculative requests in
  flight (candidates waiting plus pairs running; spec option, default 10, 0 when ``try_avoid_duplicating_jobs``),
  while the job already has a candidate or a running copy, and once its competition has a completed job.
* A candidate counts as a pending job of its task (demand). The task starts a copy only when it has no regular
  pending job left; the copy's allocation is computed like any job of the task, on whatever node the strategy
  offers (YTsaurus does not keep it off the original's node).
* The first competitor to complete wins and is counted once. The other is aborted: ``speculative_run_won`` when the
  winner was the copy (the original lost), ``speculative_run_lost`` when the original won. A competitor that
  reports an end after the competition was won is counted as aborted with that reason, whatever it reported.
* A competitor that fails or is aborted while the other still runs is counted (failed jobs count towards
  ``max_failed_job_count``) but its job does not go back to pending: the other carries on. The last one's end
  is an ordinary end (a failure or abort returns the job to pending).
* Gang tasks never speculate: a copy of a ranked job would be a second holder of its rank.

pooltree also treats an interrupted completion (the scheduler asked the job to finish early) like an unsuccessful
end while a competitor runs: the competitor covers the whole job, so the partial result is dropped.

`SpeculativeJobs` is the part of an operation controller (``OperationControllerBase.speculation``) that keeps
this state; the controller calls it at every start and end, ``SchedulerCore.launch_speculative_jobs`` calls
:meth:`SpeculativeJobs.speculate` each fair-share period (the simulator and the live service both), and the
strategy stops the losers it hands out (:meth:`SpeculativeJobs.take_losers`). This module imports nothing from
the strategy (the strategy reads it by duck typing).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SPECULATIVE_RUN_WON = "speculative_run_won"
"""Abort reason of an original job whose speculative copy completed first (YTsaurus ``SpeculativeRunWon``)."""
SPECULATIVE_RUN_LOST = "speculative_run_lost"
"""Abort reason of a speculative copy whose original completed first (YTsaurus ``SpeculativeRunLost``)."""
SPECULATIVE_ABORT_REASONS = frozenset({SPECULATIVE_RUN_WON, SPECULATIVE_RUN_LOST})

DEFAULT_MAX_SPECULATIVE_JOB_COUNT_PER_TASK = 10
"""YTsaurus's default of the spec's ``max_speculative_job_count_per_task``."""

WON = "won"
"""`SpeculativeJobs.on_finished`: the job completed first while a competitor runs (counted as completed)."""
LOST = "lost"
"""The job ended after its competitor completed: counted as aborted with the loser's reason, never again."""
DROPPED = "dropped"
"""The job ended without completing while its competitor runs: counted, but the job stays with the competitor."""


@dataclass
class Competition:
    """The allocations running one job: the original and at most one speculative copy (YTsaurus's competition)."""

    id: str
    """The original allocation's id (YTsaurus's ``job_competition_id`` is the original job's id)."""
    task: str
    job: Any
    """The controller's job the competitors run (a copy runs an equal job object)."""
    members: list[Any] = field(default_factory=list)
    """The running allocations, in start order."""
    speculative_id: str | None = None
    """The allocation id of the running speculative copy, if one was started."""
    candidate: bool = False
    """A copy was requested and waits to be scheduled."""
    in_flight: bool = False
    """The request counts against the task's cap (from the request until the pair is back to one job)."""
    completed: bool = False
    """A competitor completed: the rest are losers."""


class SpeculativeJobs:
    """The speculative jobs of one operation controller: timeouts per task, the cap, competitions and losers."""

    def __init__(self, timeouts: Mapping[str, float], max_per_task: int) -> None:
        self.timeouts = dict(timeouts)
        """Task → ``job_speculation_timeout`` in seconds (tasks without one never speculate)."""
        self.max_per_task = max_per_task
        """``max_speculative_job_count_per_task``: speculative requests in flight per task at most."""
        self._deadlines: list[tuple[float, int, str]] = []
        """(start + timeout, serial, allocation id) of running jobs not yet past their timeout."""
        self._serial = 0
        self._overdue: dict[str, Competition] = {}
        """Allocation id → its competition: running jobs past their timeout, in order (those the cap held back
        wait here; so do those with a copy, in case the pair breaks up)."""
        self._by_allocation: dict[str, Competition] = {}
        self._candidates: dict[str, dict[str, Competition]] = {}
        """Task → competition id → competition with a requested copy, in request order."""
        self._in_flight: Counter[str] = Counter()
        """Task → speculative requests counting against the cap (candidates and running pairs)."""
        self._room = False
        """A request left the cap since the last `speculate` (held-back jobs may be registered now)."""
        self.losers: list[tuple[str, str, str]] = []
        """(allocation id, abort reason, explanation) of competitors to abort, for the strategy to stop."""
        self.counters: dict[str, Counter[str]] = {task: Counter() for task in self.timeouts}
        """Task → counts of its speculative copies: ``started``, ``completed`` (won), ``aborted``, ``failed``."""

    # ------------------------------------------------------------------ what the controller reads

    def pending_count(self, task: str) -> int:
        """Requested copies of ``task`` waiting to be scheduled (they count as the task's pending jobs)."""
        found = self._candidates.get(task)
        return len(found) if found else 0

    @property
    def pending_total(self) -> int:
        return sum(len(found) for found in self._candidates.values())

    def candidate(self, task: str) -> Any:
        """The job the task's next speculative copy would run, or None."""
        found = self._candidates.get(task)
        if not found:
            return None
        return next(iter(found.values())).job

    def competition_of(self, allocation_id: str) -> Competition | None:
        return self._by_allocation.get(allocation_id)

    def loser_reason(self, allocation_id: str) -> str | None:
        """The abort reason of a running allocation whose competitor already completed (a loser that may report
        an end of its own before the stop reaches it: YTsaurus aborts such a completing job), else None."""
        competition = self._by_allocation.get(allocation_id)
        if competition is None or not competition.completed:
            return None
        return SPECULATIVE_RUN_LOST if allocation_id == competition.speculative_id else SPECULATIVE_RUN_WON

    # ------------------------------------------------------------------ starts and ends

    def on_started(self, allocation: Any, job: Any, now: float, *, speculative: bool) -> None:
        """A job of the operation started in ``allocation`` (``speculative``: the task's first candidate's copy)."""
        task = allocation.task
        if speculative:
            candidates = self._candidates[task]
            competition_id = next(iter(candidates))
            competition = candidates.pop(competition_id)
            competition.candidate = False
            competition.speculative_id = allocation.id
            self.counters[task]["started"] += 1
        else:
            if task not in self.timeouts:
                return
            competition = Competition(allocation.id, task, job)
        competition.members.append(allocation)
        self._by_allocation[allocation.id] = competition
        self._serial += 1
        heapq.heappush(self._deadlines, (now + self.timeouts[task], self._serial, allocation.id))

    def on_finished(self, allocation: Any, finished: Any) -> str | None:
        """Account an ended allocation in its competition. Returns `WON`, `LOST`, `DROPPED` (see there) or None:
        the job had no competitor, and its end is an ordinary one for the controller."""
        competition = self._by_allocation.pop(allocation.id, None)
        self._overdue.pop(allocation.id, None)
        if competition is None:
            return None
        competition.members = [m for m in competition.members if m.id != allocation.id]
        copy = allocation.id == competition.speculative_id
        counters = self.counters[competition.task]
        if competition.completed:  # a loser (stopped, or it ended on its own before the stop arrived)
            if copy:
                counters["aborted"] += 1
            if not competition.members:
                self._settle(competition)
            return LOST
        clean = finished.state == "completed" and allocation.preemption is None
        if not competition.members:  # the last competitor: an ordinary end
            self._settle(competition)
            if copy:
                counters["completed" if clean else finished.state] += 1
            return None
        if clean:
            competition.completed = True
            reason = SPECULATIVE_RUN_WON if copy else SPECULATIVE_RUN_LOST
            for other in competition.members:
                self.losers.append(
                    (
                        other.id,
                        reason,
                        f"Job {competition.job.task}/{competition.job.index}: its "
                        f"{'speculative copy' if copy else 'original run'} {allocation.id} completed first",
                    )
                )
            if copy:
                counters["completed"] += 1
            return WON
        # failed, aborted or interrupted while the competitor runs: the competitor carries on with the job
        if copy:
            counters["aborted" if finished.state == "completed" else finished.state] += 1
        self._release(competition)
        return DROPPED

    def _settle(self, competition: Competition) -> None:
        """The competition has no running member any more: forget it (and its request, if one waits)."""
        if competition.candidate:
            del self._candidates[competition.task][competition.id]
            competition.candidate = False
        self._release(competition)

    def _release(self, competition: Competition) -> None:
        if competition.in_flight:
            competition.in_flight = False
            self._in_flight[competition.task] -= 1
            self._room = True

    def take_losers(self) -> list[tuple[str, str, str]]:
        """The competitors to abort since the last call (and forget them)."""
        losers, self.losers = self.losers, []
        return losers

    # ------------------------------------------------------------------ the period's check

    def speculate(self, now: float) -> bool:
        """Request copies of the jobs that have now run longer than their timeout, as far as the cap allows.
        Returns whether a request was registered (the task's pending jobs grew)."""
        deadlines = self._deadlines
        arrived = False
        while deadlines and deadlines[0][0] <= now:
            _deadline, _serial, allocation_id = heapq.heappop(deadlines)
            competition = self._by_allocation.get(allocation_id)
            if competition is not None:
                self._overdue[allocation_id] = competition
                arrived = True
        if not (arrived or self._room) or not self._overdue:
            self._room = False
            return False
        self._room = False
        registered = False
        for allocation_id, competition in list(self._overdue.items()):
            if competition.completed or self._by_allocation.get(allocation_id) is not competition:
                del self._overdue[allocation_id]
                continue
            if competition.candidate or len(competition.members) != 1:
                continue  # a copy waits or runs; kept: the job may need another if the pair breaks up
            task = competition.task
            if self._in_flight[task] >= self.max_per_task:
                continue
            competition.candidate = True
            competition.in_flight = True
            self._in_flight[task] += 1
            self._candidates.setdefault(task, {})[competition.id] = competition
            registered = True
        return registered

    # ------------------------------------------------------------------ progress

    def progress(self) -> dict[str, dict[str, int]]:
        """Per task, its speculative copies (YTsaurus's per-task ``speculative_job_counter``): ``pending``
        (requested), ``running``, ``completed`` (won), ``aborted`` (lost or aborted), ``failed``."""
        running: Counter[str] = Counter()
        for competition in {id(c): c for c in self._by_allocation.values()}.values():
            if competition.speculative_id is not None and any(
                m.id == competition.speculative_id for m in competition.members
            ):
                running[competition.task] += 1
        return {
            task: {
                "pending": self.pending_count(task),
                "running": running[task],
                "completed": counters["completed"],
                "aborted": counters["aborted"],
                "failed": counters["failed"],
            }
            for task, counters in sorted(self.counters.items())
        }


def speculation_from_spec(spec: Any, tasks: Iterable[Any]) -> SpeculativeJobs | None:
    """The speculative-job part for an operation with ``spec`` (an ``OperationSpec``) and controller ``tasks``
    (``TaskSpec``), or None when no task can speculate: no timeout anywhere, a cap of 0
    (``max_speculative_job_count_per_task: 0`` or ``try_avoid_duplicating_jobs``), or only gang tasks.

    A task's timeout is its user job's ``job_speculation_timeout`` (the vanilla task of that name, else
    ``mapper`` / ``reducer`` when the operation has only that one), else the spec's."""
    if spec is None:
        return None
    cap = getattr(spec, "max_speculative_job_count_per_task", DEFAULT_MAX_SPECULATIVE_JOB_COUNT_PER_TASK)
    if getattr(spec, "try_avoid_duplicating_jobs", False) or cap == 0:
        return None
    user_jobs: dict[str, Any] = dict(spec.user_jobs()) if hasattr(spec, "user_jobs") else {}
    default = getattr(spec, "job_speculation_timeout", None)
    timeouts: dict[str, float] = {}
    for task in tasks:
        if task.gang_size is not None:
            continue
        job = user_jobs.get(task.name)
        if job is None and len(user_jobs) == 1:
            job = next(iter(user_jobs.values()))
        timeout = getattr(job, "job_speculation_timeout", None) if job is not None else None
        if timeout is None:
            timeout = default
        if timeout is not None:
            timeouts[task.name] = float(timeout)
    return SpeculativeJobs(timeouts, cap) if timeouts else None
