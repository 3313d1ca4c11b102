"""`TimeLimits`: a tree's ``time_limit`` and ``job_time_limit`` rules applied each period (`SchedulerCore`'s part).

The rules themselves are in `time_limits.py` (YTsaurus's operation ``time_limit``, error 1202 for a job past its
``job_time_limit``). This part only decides which operations can have something due and visits them in
registration order, so the stops and failures and their order are those of a walk over every operation.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

from pooltree.strategy.model import AbortReason
from pooltree.strategy.time_limits import (
    job_time_limit,
    job_time_limit_error,
    operation_time_limit,
    operation_time_limit_error,
)
from pooltree.tree.delta import RuntimeTree

_UNSET = object()

_DEADLINE_SLACK = 1e-3
"""Seconds before its ``start + time_limit`` an operation joins the checked ones (float rounding; early is harmless:
the check itself is exact)."""


class _LimitWatch:
    """The operations `TimeLimits.enforce` must look at; every other one has nothing that can be due.

    ``order``: operation → serial (registration order). ``deadlines``: a heap of ``(start + time_limit, serial,
    operation)``, moved to ``expired`` once reached (an operation past its limit stays there until it leaves);
    ``job_limited``: operations with a ``job_time_limit``; ``always``: operations whose spec is a plain map (it
    may change in place) or that the pool tree did not hold when attached. Entries of operations that left are
    dropped from the sets at once and from the heap when they surface (their serial no longer matches).
    """

    __slots__ = ("always", "deadlines", "expired", "job_limited", "order", "serial")

    def __init__(self) -> None:
        self.order: dict[str, int] = {}
        self.serial = 0
        self.deadlines: list[tuple[float, int, str]] = []
        self.expired: set[str] = set()
        self.job_limited: set[str] = set()
        self.always: set[str] = set()

    def forget(self, operation_id: str) -> None:
        if self.order.pop(operation_id, None) is not None:
            self.expired.discard(operation_id)
            self.job_limited.discard(operation_id)
            self.always.discard(operation_id)


class TimeLimits:
    """The operations of one tree whose ``time_limit`` or ``job_time_limit`` can be due, and their enforcement.

    ``pool_tree``, ``strategy`` and ``controllers`` are the `SchedulerCore`'s own (read, never replaced)."""

    def __init__(self, pool_tree: RuntimeTree, strategy: Any, controllers: Mapping[str, Any]) -> None:
        self.pool_tree = pool_tree
        self.strategy = strategy
        self.controllers = controllers
        self.watch = _LimitWatch()
        self.specs: dict[str, tuple[Any, float | None, dict[str, Any] | None]] = {}
        """Operation → (its spec, ``time_limit``, memo of per-task ``job_time_limit``) while the spec is that frozen
        object (`limits_of`)."""

    def add(self, operation_id: str) -> None:
        """Sort a newly registered (or attached) operation into the watch by the limits its spec has."""
        watch = self.watch
        watch.forget(operation_id)
        watch.serial += 1
        watch.order[operation_id] = watch.serial
        op = self.pool_tree.operations.get(operation_id)
        if op is None or isinstance(op.spec, Mapping):
            watch.always.add(operation_id)  # read anew every period, as the walk did
            return
        limit, job_limits = self.limits_of(operation_id, op.spec)
        if limit is not None:
            heapq.heappush(watch.deadlines, (op.start_time + limit, watch.serial, operation_id))
        if job_limits is not None:
            watch.job_limited.add(operation_id)

    def forget(self, operation_id: str) -> None:
        self.watch.forget(operation_id)

    def _rewatch(self) -> None:
        self.watch = _LimitWatch()
        for operation_id in self.controllers:
            self.add(operation_id)

    def enforce(
        self, now: float, failed: list[tuple[str, dict[str, Any]]]
    ) -> list[tuple[str, dict[str, Any]]]:
        """Stop the allocations past their job's ``job_time_limit`` (abort reason ``job_time_limit_exceeded``,
        delivered in their nodes' next heartbeats) and append to ``failed`` (operations already failed by other
        checks, which are not visited) the operations past their ``time_limit`` with YTsaurus's error."""
        watch = self.watch
        if len(watch.order) != len(self.controllers):
            self._rewatch()  # controllers changed behind attach_controller / detach_controller (read from the
            # next period on; this one still visits the watch it started with, as before)
        deadlines = watch.deadlines
        order = watch.order
        while deadlines and deadlines[0][0] <= now + _DEADLINE_SLACK:
            _deadline, serial, operation_id = heapq.heappop(deadlines)
            if order.get(operation_id) == serial:
                watch.expired.add(operation_id)  # from now on checked every period (the check is exact)
        candidates = (watch.expired | watch.job_limited | watch.always) - {op for op, _ in failed}
        for operation_id in sorted(candidates, key=order.__getitem__):
            op = self.pool_tree.operations.get(operation_id)
            if op is None:
                continue
            limit, job_limits = self.limits_of(operation_id, op.spec)
            if limit is not None and now - op.start_time > limit:
                failed.append((operation_id, operation_time_limit_error(limit, operation_id)))
                continue
            if job_limits is None:
                continue  # no user job of the spec has a job_time_limit
            runtime = self.strategy.operations.get(operation_id)
            if runtime is None or op.spec is None:
                continue
            self._stop_jobs_past_limit(runtime, op.spec, job_limits, now)
        return failed

    def _stop_jobs_past_limit(self, runtime: Any, spec: Any, job_limits: dict[str, Any], now: float) -> None:
        """Stop the operation's allocations that ran longer than their task's ``job_time_limit``."""
        for allocation in list(runtime.lists):
            job_limit = job_limits.get(allocation.task, _UNSET)
            if job_limit is _UNSET:
                job_limit = job_limits[allocation.task] = job_time_limit(spec, allocation.task)
            if job_limit is None or now - allocation.start_time <= job_limit or allocation.preempted:
                continue
            self.strategy.stop_allocation(
                allocation,
                AbortReason.JOB_TIME_LIMIT_EXCEEDED,
                f"Job time limit exceeded: the job ran {now - allocation.start_time:g}s, its job_time_limit "
                f"is {job_limit:g}s",
                now,
                error=job_time_limit_error(job_limit),
            )

    def limits_of(self, operation_id: str, spec: Any) -> tuple[float | None, dict[str, Any] | None]:
        """The spec's ``time_limit`` and a memo of its per-task ``job_time_limit`` (``None``: no user job has one).

        Kept per operation while its spec is the same frozen object (every period asks again); a spec given as
        a plain map may change in place and is read anew each time.
        """
        cached = self.specs.get(operation_id)
        if cached is not None and cached[0] is spec:
            return cached[1], cached[2]
        limit = operation_time_limit(spec)
        if spec is None:
            names: list[str] = []
        elif isinstance(spec, Mapping):
            names = [
                *(spec.get("tasks") or {}),
                *(n for n in ("mapper", "reducer") if spec.get(n) is not None),
            ]
        else:
            user_jobs = getattr(spec, "user_jobs", None)
            names = list(user_jobs()) if user_jobs is not None else []
        has_job_limits = any(job_time_limit(spec, name) is not None for name in names)
        job_limits: dict[str, Any] | None = {} if has_job_limits else None
        if spec is not None and not isinstance(spec, Mapping):
            if len(self.specs) > 2 * len(self.controllers) + 64:
                self.specs = {key: value for key, value in self.specs.items() if key in self.controllers}
            self.specs[operation_id] = (spec, limit, job_limits)
        return limit, job_limits
