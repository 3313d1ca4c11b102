"""Fair-share updates of the live trees: when a tree is due, publishing it, and the event log they feed.

A part of ``LiveScheduler`` (``scheduler.py``, ``scheduler.updates``) that works on the scheduler's state under its
lock. A tree with operations that can run now is *stale*: published before the next heartbeat schedules and by the
service's loop at once. A tree whose inputs changed is *dirty*: published at its next period.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from pooltree.errors import PooltreeError
from pooltree.server.live.model import MAX_STALE_TREE_ROUNDS
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.update_steps import UpdateRead, compute_update

if TYPE_CHECKING:
    from pooltree.server.live.scheduler import LiveScheduler

HOLD_BUDGET = 0.002
"""Seconds of preemptible list configuration per hold of the scheduling lock (`FairShareUpdates.finish_in_parts`):
at 1,000 nodes and 200 running operations a period configures ~160 operations' lists, ~18 ms in one hold."""
LISTS_PER_PART = 4
"""Operations' lists configured between two looks at the clock."""
WAITERS_TIMEOUT = 0.1
"""The longest wait, between two holds of an update, for the heartbeats that waited to be served."""
COMPUTE_ATTEMPTS = 2
"""Times an update computed outside the lock is read and computed again when its tree changed meanwhile, before it
runs whole under the lock."""


class FairShareUpdates:
    """The fair-share updates of ``LiveScheduler``."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self.scheduler = scheduler
        self.last_update: dict[str, float] = {}
        """Tree → when it was last published."""
        self.fair_share_updates: Counter[str] = Counter()
        """Full fair-share updates run per tree (the periodic ones and those events asked for)."""
        self.published_updates = 0
        """Fair-share updates published so far, every tree (readers of published views key on it)."""
        self.stale_trees: set[str] = set()
        """Trees with operations that can run now: published before the next heartbeat is scheduled and by the
        service's loop without waiting for the period."""
        self.dirty: set[str] = set()
        """Trees whose fair-share inputs changed since their last update: published at the next period."""
        self.updating = False
        """Inside an update (operations it finishes do not publish again)."""
        self.unfinished: set[str] = set()
        """Trees a stale publish left with preemptible lists to configure (`finish_unfinished`, the service's loop)."""
        self.computing: set[str] = set()
        """Trees whose update is being computed outside the lock (`publish_computed_apart`): a stale publish of
        one waits for it (the computation owns the tree's caches)."""
        self.deferring = False
        """Inside a heartbeat's reports whose stale trees the heartbeat publishes computed apart before it
        schedules (`LiveJobs._locked_heartbeat`, `publish_stale_apart`): `refresh_stale_trees` leaves them to it."""
        self.computes_overtaken = 0
        """Updates computed outside the lock and not published because the tree changed meanwhile."""

    @property
    def waiting(self) -> bool:
        """Whether a stale tree waits for the next heartbeat or command to publish it (`refresh_stale_trees`): not
        one whose update is being computed apart, which that update publishes (read without the lock: a hint)."""
        stale = self.stale_trees
        return bool(stale) and not stale <= self.computing

    def refresh_stale_trees(self, now: float) -> None:
        """Publish the trees where operations were activated (another one finished, a limit was raised) now
        instead of at the next periodic update: the strategy only schedules operations of a published tree, so
        otherwise the freed capacity idles for up to a fair-share period plus a node heartbeat period."""
        scheduler = self.scheduler
        if self.updating or self.deferring:
            return
        computing: set[str] = set()
        for _ in range(MAX_STALE_TREE_ROUNDS):
            trees = self.stale_trees - computing
            if not trees:
                break
            tree = min(trees)
            self.stale_trees.discard(tree)
            if tree in self.computing:  # its update, computed now, publishes it (or reads it again)
                computing.add(tree)
                self.stale_trees.add(tree)
                continue
            if tree in scheduler.cores:
                # the lists the publish leaves are configured in parts by the service's loop (`finish_unfinished`)
                self.update_tree(tree, now, in_parts=self.in_parts)
                if not scheduler.cores[tree].finish_update(0):
                    self.unfinished.add(tree)
                else:
                    scheduler.snapshots.tree_finished(tree)

    def publish_stale_apart(self, now: float) -> None:
        """Publish the stale trees before a heartbeat takes the lock for its own work (on a heartbeat thread, the
        lock not held), each as the periodic update's snapshot step (`publish_computed_apart`): one hold reads the
        input, the fair share and the strategy's tree are computed without the lock, one hold publishes; the lists
        the publish leaves are configured by the service's loop in short holds (`finish_unfinished`), as a stale
        publish under the lock leaves them. The heartbeat's hold (`refresh_stale_trees`) then finds them published
        and schedules against the same snapshot; a tree made stale in between is published there, whole. Not when
        this thread holds the lock (the computation would hold it), nor with node shards (`in_parts`)."""
        scheduler = self.scheduler
        lock = scheduler.lock
        if not self.in_parts or lock.held:
            return
        for _ in range(MAX_STALE_TREE_ROUNDS):
            with lock:
                if self.updating:
                    return
                trees = [tree for tree in self.stale_trees - self.computing if tree in scheduler.cores]
                if not trees:
                    return
                tree = min(trees)
            core = self.publish_computed_apart(tree, now, stale_only=True)
            if core is not None:
                with lock:
                    if scheduler.cores.get(tree) is core:
                        if not core.finish_update(0):
                            self.unfinished.add(tree)
                        else:
                            scheduler.snapshots.tree_finished(tree)

    def update_fair_share(self, tree: str, now: float) -> None:
        """The periodic update of one tree: finish completed operations, recompute shares, publish, fail the
        operations the alerts condemn. Each step is one hold of the scheduling lock, and the publish's end (the
        preemptible lists of the operations whose shares moved, `SchedulerCore.finish_update`) is cut into holds
        of about `HOLD_BUDGET`, with the heartbeats that waited let in between (`SchedulingLock.let_waiters_in`):
        heartbeats are served while the update runs, each against a whole state (the last publish's snapshot,
        and each operation's lists configured from its old or its new shares, as YTsaurus's node shards see an
        operation's preemptible list updated while they schedule)."""
        try:
            self._update_fair_share(tree, now)
        finally:
            # the snapshots its publications replaced are freed out of its holds
            if not self.scheduler.lock.held:
                self.scheduler.snapshots.release_retired()

    def _update_fair_share(self, tree: str, now: float) -> None:
        scheduler = self.scheduler
        lock = scheduler.lock
        with lock:
            if tree not in scheduler.cores:
                return
            scheduler.now = max(scheduler.now, now)
            for op in list(scheduler.operations.values()):
                if tree in op.trees:
                    scheduler.commands.check_completion(op, now)
            # time_limit / job_time_limit (the core's rule): jobs past their limit are stopped at their nodes'
            # next heartbeats, operations past theirs fail.
            for operation_id, error in scheduler.cores[tree].enforce_time_limits(now):
                op = scheduler.operations.get(operation_id)
                if op is not None and not op.is_final:
                    scheduler.commands.finish_operation(operation_id, "failed", now, error=error)
            scheduler.cores[tree].launch_speculative_jobs(now)  # copies of jobs past job_speculation_timeout
        core = scheduler.cores.get(tree)
        if core is not None:
            self.finish_in_parts(core)  # what a stale publish left
        lock.let_waiters_in(WAITERS_TIMEOUT)
        if self.in_parts:
            core = self.publish_computed_apart(tree, now)
        else:
            with lock:
                core = scheduler.cores.get(tree)
                if core is not None:
                    self.update_tree(tree, now)
        if core is None:
            return
        self.finish_in_parts(core)
        with lock:
            if tree not in scheduler.cores:
                return
            for operation_id, error in scheduler.alert_center.operations_to_fail(now, tree):
                if operation_id in scheduler.operations:
                    scheduler.commands.finish_operation(operation_id, "failed", now, error=error)

    def publish_computed_apart(
        self, tree: str, now: float, *, stale_only: bool = False
    ) -> SchedulerCore | None:
        """The snapshot step of a periodic update with its computation outside the scheduling lock: the input read
        and the publish each take one hold, the fair share and the build run between them
        (`pooltree.strategy.update_steps`) while heartbeats and commands are served. When the tree changed
        meanwhile (`SchedulerCore.update_is_current`), the update is read and computed again, at most
        `COMPUTE_ATTEMPTS` times, then run whole under the lock. The tree's core (None when it left).
        ``stale_only`` (`publish_stale_apart`): nothing is done (None) unless, at the first read, the tree is still
        stale and no other update computes it."""
        scheduler = self.scheduler
        lock = scheduler.lock
        for attempt in range(COMPUTE_ATTEMPTS):
            with lock:
                core = scheduler.cores.get(tree)
                if core is None:
                    return None
                if stale_only and attempt == 0 and (tree not in self.stale_trees or tree in self.computing):
                    return None  # published meanwhile, or its update is computed by another thread
                update = self.read_tree(tree, core, now)
                self.computing.add(tree)
            try:
                computed = compute_update(update, core.phase_times)
            except BaseException as error:
                with lock:
                    self.computing.discard(tree)  # whatever ends the computation: a stale publish may run
                    current = core.update_is_current(update)
                    # nothing changed under it: the computation's own failure; an interrupt or exit (not an
                    # ``Exception``) is never taken for a change of the tree and computed again
                    if current or not isinstance(error, Exception):
                        raise
                self.computes_overtaken += 1
                continue
            lock.let_waiters_in(WAITERS_TIMEOUT)
            with lock:
                self.computing.discard(tree)
                if scheduler.cores.get(tree) is not core:
                    return None
                if core.publish_update(computed, in_parts=True):
                    self.published(tree, core, now)
                    return core
            self.computes_overtaken += 1
        with lock:
            core = scheduler.cores.get(tree)
            if core is not None:
                self.update_tree(tree, now, in_parts=True)
            return core

    @property
    def in_parts(self) -> bool:
        """Whether a periodic update's end is run in parts (`finish_in_parts`): not with node shards, whose
        replicas copy the truth's lists and whose proofs hold against a state published whole."""
        scheduler = self.scheduler
        return scheduler.tree_pass is None and not scheduler.generation.watch_updates

    def finish_unfinished(self) -> None:
        """Configure, in parts, the lists the stale publishes left (called by the service's loop off the loop)."""
        scheduler = self.scheduler
        with scheduler.lock:
            trees, self.unfinished = self.unfinished, set()
            cores = [core for tree in sorted(trees) if (core := scheduler.cores.get(tree)) is not None]
        for core in cores:
            self.finish_in_parts(core)

    def finish_in_parts(self, core: SchedulerCore) -> None:
        """Run the end of ``core``'s last update in holds of the lock of about `HOLD_BUDGET` each, letting the
        heartbeats that waited in between. Another update of the tree, which finishes this one first, or the
        tree's removal ends it early."""
        scheduler = self.scheduler
        lock = scheduler.lock
        # read without the lock: a publish that leaves lists after this look notes them in `unfinished`
        try:
            while not core.update_finished:
                lock.let_waiters_in(WAITERS_TIMEOUT)
                with lock:
                    if scheduler.cores.get(core.pool_tree.name) is not core:
                        return
                    began = time.perf_counter()
                    while not core.finish_update(LISTS_PER_PART):
                        if time.perf_counter() - began >= HOLD_BUDGET:
                            break
                    else:
                        scheduler.views.forget(core.pool_tree.name)  # a view read meanwhile counted old lists
                        scheduler.snapshots.tree_finished(core.pool_tree.name)
                        return
        finally:
            if not lock.held:  # the snapshot the last part replaced is freed out of the hold
                scheduler.snapshots.release_retired()

    def needs_update(self, tree: str, now: float, period: float) -> bool:
        """Whether ``tree`` is due an update: at once when operations wait to run (stale); at its period when
        its inputs changed (dirty), when operations run in it (usage, demand and starvation move with time) or
        when a pool has integral guarantees (volumes accumulate with time). A tree holding only pending
        operations and no change would recompute the same shares, so it is left alone."""
        scheduler = self.scheduler
        if tree in self.stale_trees:
            return True
        last = self.last_update.get(tree)
        if last is None:
            return True
        if now - last < period:
            return False
        if tree in self.dirty:
            return True
        pool_tree = scheduler.registry.trees.get(tree)
        if pool_tree is None:
            return False
        root = pool_tree.root
        if root.running_operation_count or root.lightweight_running_operation_count:
            return True
        return any(
            pool.config is not None and pool.config.integral_guarantees.guarantee_type != "none"
            for pool in pool_tree.pools.values()
        )

    def mark_dirty(self, tree: str) -> None:
        """Inputs of ``tree`` changed outside the operation commands (nodes): publish at the next period."""
        self.dirty.add(tree)

    def update_tree(self, tree: str, now: float, *, in_parts: bool = False) -> None:
        """Publish ``tree`` now; ``in_parts``: its update's end is left to the caller (`finish_in_parts`)."""
        self.stale_trees.discard(tree)
        self.dirty.discard(tree)
        updating, self.updating = self.updating, True
        try:
            self.publish_tree(tree, now, in_parts=in_parts)
        finally:
            self.updating = updating

    def publish_tree(self, tree: str, now: float, *, in_parts: bool = False) -> None:
        core = self.scheduler.cores[tree]
        self.finish_completed(core, now)
        core.update_fair_share(now, in_parts=in_parts)
        self.published(tree, core, now)

    def read_tree(self, tree: str, core: SchedulerCore, now: float) -> UpdateRead:
        """Under the lock: the first step of an update computed apart (`publish_computed_apart`), as
        `update_tree` begins."""
        self.stale_trees.discard(tree)
        self.dirty.discard(tree)
        updating, self.updating = self.updating, True
        try:
            self.finish_completed(core, now)
            return core.read_update(now)
        finally:
            self.updating = updating

    def finish_completed(self, core: SchedulerCore, now: float) -> None:
        """Finish the operations whose controllers completed before the tree is read."""
        scheduler = self.scheduler
        for operation_id, controller in list(core.controllers.items()):
            op = scheduler.operations.get(operation_id)
            if op is not None and not op.is_final and controller.is_completed:
                scheduler.commands.finish_operation(operation_id, "completed", now)

    def published(self, tree: str, core: SchedulerCore, now: float) -> None:
        """What follows a publish of ``tree``: counts, views, the event log, the generation, the listeners."""
        scheduler = self.scheduler
        self.fair_share_updates[tree] += 1
        self.published_updates += 1
        self.last_update[tree] = now
        scheduler.views.forget(tree)
        self.drain(core)
        scheduler.generation.updated(tree, core)
        for listener in scheduler.update_listeners:
            listener(tree, now)
        scheduler.snapshots.tree_published(tree)

    def operation_shares(self, tree: str, operation_id: str) -> dict[str, Any] | None:
        """One operation's shares and starvation in the last published update of ``tree``; zero shares for a
        pending operation started since (what the next update would show); None for a running one not yet
        published."""
        scheduler = self.scheduler
        core = scheduler.cores.get(tree)
        result = core.last_result if core is not None else None
        if result is None:
            return None
        if operation_id not in result.elements:
            tree_op = core.pool_tree.operations.get(operation_id)
            if tree_op is None or tree_op.running:
                return None
            return {
                "fair_share_ratio": 0.0,
                "usage_ratio": 0.0,
                "demand_ratio": 0.0,
                "starvation_status": "non_starving",
            }
        element = result.elements[operation_id]
        view: dict[str, Any] = {
            "fair_share_ratio": float(max(element.fair_share, default=0.0)),
            "usage_ratio": float(max(element.usage_share, default=0.0)),
            "demand_ratio": float(max(element.demand_share, default=0.0)),
            "weight": float(element.weight),
        }
        try:
            view["starvation_status"] = core.strategy.element_view(operation_id)["starvation_status"]
        except (PooltreeError, KeyError):
            view["starvation_status"] = "non_starving"
        return view

    def drain(self, core: SchedulerCore) -> None:
        """Keep the core's events in the bounded event log (orchid ``scheduler/event_log``); a preempted
        allocation's event names its job and, YTsaurus style, ``preempted_for`` (operation, allocation, job)."""
        scheduler = self.scheduler
        events = core.drain_events()
        if not events:
            return
        job_of, log = scheduler.allocation_jobs.get, scheduler.event_log.append  # bound once a drain
        for event in events:
            allocation_id = event.get("allocation_id")
            if allocation_id is not None:
                job_id = job_of(allocation_id)
                if job_id is not None:
                    event["job_id"] = job_id
            if event.get("event") == "allocation_preempted" and event.get("preemptor_operation_id"):
                preemptor = event.get("preemptor_allocation_id")
                event["preempted_for"] = {
                    "operation_id": event["preemptor_operation_id"],
                    "allocation_id": preemptor,
                    "job_id": job_of(preemptor or ""),
                }
            log(event)
            scheduler.event_count += 1
