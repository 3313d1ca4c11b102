"""The read snapshot: what the orchid and the web pages show, published by the live scheduler with its trees.

YTsaurus serves its scheduler orchid from the fair-share tree snapshot published after each fair-share update.
Here ``ReadPublisher.publish`` captures a ``ReadSnapshot`` under the scheduling lock whenever what those readers
show changed as a whole: a tree's fair-share update published and run to its end (the views count its preemptible
lists), the pool trees or the users' default parent pools applied, and, for changes between updates (a start, a
node's heartbeat), at the latest one fair-share period after the change (``SchedulerService``'s loop,
``ReadPublisher.due``). Readers (``pooltree/server/orchid.py``, ``pooltree/web``) take ``publisher.current``, one
attribute read, and never the lock: each read sees the state of the last publication, whole.

The capture reads under the lock what can change after it (placements, strategy fields, nodes, alerts), copied or
never changed after; a tree's views are assembled from it and from the update's result (which no one changes) on
first read, off the lock (``views.ViewCapture``), as are the nodes' reads (``NodeCapture``: their fields taken a
column at a time under the lock) and what readers derive (the orchid document, a page's rows:
``ReadSnapshot.derived``, once per snapshot). Nothing in a snapshot is changed once published.

What only the web pages show per live operation (its brief and alerts, why its allocations wait, its configured
limits: ``OperationRead``) costs a look at each operation's state (``explain_pending``: nodes, pools, siblings): it
is captured only while a page that shows it was asked for in the last ``PAGE_WATCH`` seconds
(``ReadPublisher.watch_pages``), so an unwatched scheduler pays nothing for it, and then at most once per
``PAGE_READS_PERIOD`` (the pages' refresh; the publications between carry the last). A page opened after that long
reads an operation's map through ``get_operation`` (``OperationCommands.operation_attributes``: it waits for the
lock only when its kept map is over a second old and the lock is busy) and the per-operation columns from the next
publication on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import numpy as np

from pooltree.errors import PooltreeError
from pooltree.resources import resources_to_dict
from pooltree.server.live.alerts import explain_pending
from pooltree.server.live.views import ViewCapture, progress
from pooltree.server.tree_options import effective_tree_config

if TYPE_CHECKING:
    from pooltree.server.live.scheduler import LiveScheduler

T = TypeVar("T")

PAGE_WATCH = 30.0
"""Seconds after a page asked for the per-operation reads (``OperationRead``) that publications still capture them
(a page refreshes every 3 s)."""
PAGE_READS_PERIOD = 3.0
"""Seconds between two captures of the pages' per-operation reads (the pages refresh every 3 s): a publication in
between carries the last ones (at 10,000 operations they cost ~0.5 s of the lock: bench/RESULTS.md)."""
RETIRED_MAX = 4
"""Replaced snapshots kept for ``ReadPublisher.release_retired`` at most; past it the oldest is freed at once."""
MAX_DERIVED = 256
"""Derived values (orchid answers per path, page rows) kept per snapshot; past it the oldest are made again."""


class NodeRead(NamedTuple):
    """An exec node as published: its limits, trees, tags, last heartbeat and alerts (the objects its last heartbeat
    set, which a heartbeat replaces and never changes), its usage in its trees' cores (a copy; None when no core has
    it) and its running jobs."""

    address: str
    resource_limits: np.ndarray
    trees: tuple[str, ...]
    tags: frozenset[str]
    last_seen: float
    alerts: list[dict[str, Any]]
    usage: np.ndarray | None
    running_jobs: int


@dataclass(frozen=True)
class PoolSettings:
    """What the Scheduling page shows of a pool's configuration."""

    integral_type: str
    resource_limits: dict[str, Any]


@dataclass(frozen=True)
class TreeRead:
    """One published tree: its fair-share view (captured, ``view`` assembles it), effective config and ephemeral
    pools (the orchid's ``config`` and ``user_to_ephemeral_pools``), alerts and its pools' settings (None: the pool
    has no configuration)."""

    capture: ViewCapture
    orchid: dict[str, Any]
    alerts: list[dict[str, Any]]
    pools: dict[str, PoolSettings | None]

    @property
    def view(self) -> dict[str, Any]:
        return self.capture.view()


class OperationRead(NamedTuple):
    """A live operation as the web pages show it: the attributes its brief reads (``operation_listing.live_brief``,
    which takes this for the operation), its job counts, error and alerts, per tree why its allocations wait
    (``explain_pending``; None when none wait) and its configured resource limits."""

    id: str
    type: str
    state: str
    user: str
    start_time: float
    finish_time: float | None
    spec: dict[str, Any]
    runtime_parameters: dict[str, Any]
    """The operation's own map (a change of parameters replaces it, never changes it)."""
    suspended: bool
    pools: dict[str, str]
    trees: list[str]
    jobs: dict[str, Any]
    error: dict[str, Any] | None
    alerts: dict[str, dict[str, Any]]
    explanations: dict[str, dict[str, Any] | None]
    limits: dict[str, dict[str, Any]]

    @property
    def alert_types(self) -> list[str]:
        return sorted(self.alerts)


@dataclass
class ReadSnapshot:
    """What the orchid and the web pages read, as of one publication (``number``; 0: nothing published yet)."""

    number: int = 0
    updates: int = 0
    """Fair-share updates published before it (every tree)."""
    now: float = 0.0
    """The scheduler's time at the publication."""
    trees: dict[str, TreeRead] = field(default_factory=dict)
    """Published trees, in the order the scheduler holds them."""
    node_capture: NodeCapture | None = None
    """The nodes' fields as captured under the lock (None: no node); ``nodes`` makes their reads from it."""
    scheduler_alerts: list[dict[str, Any]] = field(default_factory=list)
    event_log: tuple[dict[str, Any], ...] = ()
    operations: dict[str, OperationRead] | None = None
    """Live operations' page reads, captured while pages were watched (None: not in this snapshot)."""
    _derived: dict[Hashable, Any] = field(default_factory=dict, repr=False)
    _derived_lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @property
    def nodes(self) -> tuple[NodeRead, ...]:
        """The nodes' reads, in the order the scheduler first saw them (made once, off the lock)."""
        node_capture = self.node_capture
        if node_capture is None:
            return ()
        return self.derived(_NODES, node_capture.reads)

    def operation(self, operation_id: str) -> OperationRead | None:
        """The pages' reads of live operation ``operation_id`` (None: not live, or not captured in this snapshot)."""
        return None if self.operations is None else self.operations.get(operation_id)

    def derived(self, key: Hashable, make: Callable[[], T]) -> T:
        """What ``make`` derives from this snapshot, made once per ``key`` (readers must not change it)."""
        found = self._derived.get(key, _MISSING)
        if found is not _MISSING:
            return found  # type: ignore[no-any-return]
        with self._derived_lock:  # one reader makes it, the others wait for it (not for the scheduling lock)
            found = self._derived.get(key, _MISSING)
            if found is _MISSING:
                found = make()
                if len(self._derived) >= MAX_DERIVED:
                    self._derived.pop(next(iter(self._derived)))
                self._derived[key] = found
        return found  # type: ignore[no-any-return]


_MISSING = object()
_NODES = ("pooltree.snapshot.nodes",)
"""``ReadSnapshot.derived``'s key of the nodes' reads."""


class ReadPublisher:
    """Publishes ``ReadSnapshot`` s of one ``LiveScheduler`` (``scheduler.snapshots``); ``current`` is the last."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self.scheduler = scheduler
        self.current = ReadSnapshot()
        self.unfinished: set[str] = set()
        """Trees whose published update has preemptible lists left to configure: published when it ends."""
        self.changed_at: float | None = None
        """When (``time.monotonic``) something the snapshot shows changed after the last publication (None: not
        since): published by ``due`` one fair-share period later if no update publishes it before."""
        self.pages_until = float("-inf")
        """Until when (``time.monotonic``) publications capture the pages' per-operation reads."""
        self.pages_read_at = float("-inf")
        """When (``time.monotonic``) they were last captured (at most every ``PAGE_READS_PERIOD``)."""
        self.published = 0
        self.published_at = time.monotonic()
        """When (``time.monotonic``) the last snapshot was published."""
        self.capture_seconds = 0.0
        """Thread CPU seconds spent capturing snapshots under the lock, over ``published`` publications."""
        self.capture_max = 0.0
        self.retired: list[ReadSnapshot] = []
        """Snapshots replaced while the lock stayed held after their publication (inside an update's hold): kept
        until ``release_retired`` drops them outside it."""

    def watch_pages(self) -> None:
        """A page showing per-operation reads was asked for: publications capture them for ``PAGE_WATCH`` s."""
        self.pages_until = time.monotonic() + PAGE_WATCH

    def changed(self) -> None:
        """Something the snapshot shows changed between publications (a start, a tree's views forgotten)."""
        if self.changed_at is None:
            self.changed_at = time.monotonic()

    def tree_published(self, tree: str) -> None:
        """``tree``'s fair-share update was published (lock held): published now if it ran to its end, else when
        its lists are configured (``tree_finished``)."""
        core = self.scheduler.cores.get(tree)
        if core is not None and not core.update_finished:
            self.unfinished.add(tree)
            self.changed()
            return
        self.unfinished.discard(tree)
        self.publish()

    def tree_finished(self, tree: str) -> None:
        """The end of ``tree``'s last update ran (lock held)."""
        if tree in self.unfinished:
            self.unfinished.discard(tree)
            self.publish()

    def due(self, period: float) -> bool:
        """Whether ``period`` seconds passed since the last publication, or since a change no publication took
        (read without the lock: a hint). The service's loop then publishes: what changes without a fair-share
        update (alerts, a node's last heartbeat, a start in a tree no update is due in) shows within a period."""
        changed_at = self.changed_at
        now = time.monotonic()
        return now - self.published_at >= period or (changed_at is not None and now - changed_at >= period)

    def publish(self) -> ReadSnapshot:
        """Capture and publish a snapshot of the scheduler's state now (takes the lock; re-entrant)."""
        scheduler = self.scheduler
        with scheduler.lock:
            began = time.thread_time()
            self.changed_at = None
            now = time.monotonic()
            operations = None
            if now < self.pages_until:
                operations = self.current.operations
                if operations is None or now - self.pages_read_at >= PAGE_READS_PERIOD:
                    operations = {
                        op_id: _operation_read(scheduler, op) for op_id, op in scheduler.operations.items()
                    }
                    self.pages_read_at = now
            snapshot = capture(scheduler, self.current.number + 1, operations)
            if len(self.retired) >= RETIRED_MAX:  # a caller that never releases them: freed here, as before
                del self.retired[0]
            self.retired.append(self.current)  # freed after the hold, not in it
            self.current = snapshot
            self.published_at = time.monotonic()
            spent = time.thread_time() - began
            self.published += 1
            self.capture_seconds += spent
            self.capture_max = max(self.capture_max, spent)
        if not scheduler.lock.held:
            self.release_retired()
        return snapshot

    def release_retired(self) -> None:
        """Drop the replaced snapshots (call without the lock): freeing one, its views' fields, the nodes' columns
        and what readers derived from it, costs the hold ms in a loaded heap (bench/RESULTS.md, session 35
        ``capture``). Readers still holding one keep it."""
        if self.retired:
            self.retired = []


def capture(
    scheduler: LiveScheduler, number: int, operations: dict[str, OperationRead] | None = None
) -> ReadSnapshot:
    """The snapshot of ``scheduler``'s state now (its lock held), with the pages' per-operation reads given."""
    trees = {name: _tree_read(scheduler, name) for name in scheduler.views}
    return ReadSnapshot(
        number=number,
        updates=scheduler.updates.published_updates,
        now=scheduler.now,
        trees=trees,
        node_capture=NodeCapture.take(scheduler),
        scheduler_alerts=scheduler.scheduler_alerts(),
        event_log=tuple(scheduler.event_log),
        operations=operations,
    )


def _tree_read(scheduler: LiveScheduler, name: str) -> TreeRead:
    capture = scheduler.views.capture(name)
    pool_tree = scheduler.registry.trees.get(name)
    pools: dict[str, PoolSettings | None] = {}
    orchid: dict[str, Any] = {}
    if pool_tree is not None:
        orchid = {
            "config": effective_tree_config(pool_tree.config),
            "user_to_ephemeral_pools": pool_tree.user_to_ephemeral_pools(),
        }
        for pool_name in capture.pools:
            try:
                config = pool_tree.pool(pool_name).config
            except (PooltreeError, KeyError):
                config = None
            pools[pool_name] = (
                None
                if config is None
                else PoolSettings(config.integral_guarantees.guarantee_type, config.resource_limits.to_dict())
            )
    return TreeRead(capture, orchid, scheduler.alert_center.tree_alerts(name), pools)


class NodeCapture:
    """The exec nodes' fields as one publication shows them, taken under the lock column by column (``take``: a
    list per field and one array per tree of its nodes' usage, a few C-level passes over the nodes instead of a
    tuple, an array and a read object per node) and made into the nodes' reads (``reads``) off the lock, on first
    read. Every field but the usage is an object a heartbeat replaces and never changes (``LiveJobs``: limits, tags,
    trees, alerts) or a number; the strategy changes a node's usage in place, so it is copied into the tree's
    array."""

    __slots__ = ("addresses", "alerts", "last_seen", "limits", "running", "tags", "tree_usage", "trees")

    def __init__(
        self,
        addresses: list[str],
        limits: list[np.ndarray],
        trees: list[list[str]],
        tags: list[frozenset[str]],
        last_seen: list[float],
        alerts: list[list[dict[str, Any]]],
        running: dict[str, int],
        tree_usage: dict[str, tuple[list[str], np.ndarray]],
    ) -> None:
        self.addresses = addresses
        self.limits = limits
        self.trees = trees
        self.tags = tags
        self.last_seen = last_seen
        self.alerts = alerts
        self.running = running
        """Jobs running per node with some (a node without is not in it)."""
        self.tree_usage = tree_usage
        """Per tree with a core: its strategy's node addresses and their usage, a row each (a copy)."""

    @classmethod
    def take(cls, scheduler: LiveScheduler) -> NodeCapture | None:
        """``scheduler``'s nodes now (its lock held); None when it has none."""
        if not scheduler.nodes:
            return None
        nodes = list(scheduler.nodes.values())
        addresses = list(scheduler.nodes)
        tree_usage: dict[str, tuple[list[str], np.ndarray]] = {}
        for tree, core in scheduler.cores.items():
            exec_nodes = core.strategy.nodes
            if exec_nodes:  # one copy of the rows, flat: np.array of many small arrays costs twice as much
                usage = np.concatenate([node.usage for node in exec_nodes.values()])
                tree_usage[tree] = (list(exec_nodes), usage.reshape(len(exec_nodes), -1))
        return cls(
            addresses,
            [node.resource_limits for node in nodes],
            [node.trees for node in nodes],
            [node.tags for node in nodes],
            [node.last_seen for node in nodes],
            [node.alerts for node in nodes],
            scheduler.jobs.counts_by_node(),
            tree_usage,
        )

    def reads(self) -> tuple[NodeRead, ...]:
        """The nodes' reads: per node its usage summed over its trees' cores that have it (None: none has)."""
        rows = {
            tree: {address: usage[row] for row, address in enumerate(addresses)}
            for tree, (addresses, usage) in self.tree_usage.items()
        }
        reads = []
        for index, address in enumerate(self.addresses):
            trees = self.trees[index]
            usage = None
            for tree in trees:
                tree_usage = rows[tree].get(address) if tree in rows else None
                if tree_usage is not None:
                    usage = tree_usage.copy() if usage is None else usage + tree_usage
            reads.append(
                NodeRead(
                    address,
                    self.limits[index],
                    tuple(trees),
                    self.tags[index],
                    self.last_seen[index],
                    self.alerts[index],
                    usage,
                    self.running.get(address, 0),
                )
            )
        return tuple(reads)


def _operation_read(scheduler: LiveScheduler, op: Any) -> OperationRead:
    limits: dict[str, dict[str, Any]] = {}
    for tree in op.trees:
        pool_tree = scheduler.registry.trees.get(tree)
        if pool_tree is not None:
            try:
                limits[tree] = resources_to_dict(
                    pool_tree.operation(op.id).resource_limits, drop_infinite=True
                )
            except PooltreeError:
                continue
    return OperationRead(
        op.id,
        op.type,
        op.state,
        op.user,
        op.start_time,
        op.finish_time,
        op.spec,
        op.runtime_parameters,
        op.suspended,
        dict(op.pools),
        list(op.trees),
        progress(op),
        op.error,
        scheduler.alerts(op),
        {tree: explain_pending(scheduler, op, tree) for tree in op.trees},
        limits,
    )
