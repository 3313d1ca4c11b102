"""`ChangeLog`: which operations a tree's heartbeats, commands and controllers changed, written once and read by
every consumer (issue 28: one change log instead of a tracker per consumer).

Writers add an operation's id to one of the three sets of the current generation:

- ``usage``: its usage, preemptible lists, satisfaction or activity moved, or it was registered or unregistered
  (`StrategyState.account`, `BestLeaf.refresh_leaf`, `TreeScheduler`);
- ``pending``: its controller's pending work moved (the controllers add it themselves: the set is their watcher,
  `pooltree.strategy.watch`), or the core gave it another controller;
- ``lists``: a configuration of its preemptible lists left them unsettled (the last rebalance moved allocations:
  the next publish configures them again), written by `ChangedPublisher.configure_lists`, which the live service
  runs in parts between heartbeats, and by a new publish step for the operations unsettled when it starts.

``polled`` holds the operations whose controllers cannot tell (no ``pending_watchers``): every reader of pending
work reads them as changed.

Each reader has a name, follows one kind or more, and remembers the generation it has read to (its mark). A
read seals the current generation (its sets move into the sealed ones and the generation advances) and answers
the operations of every sealed generation from the reader's mark on, of its kinds; ``commit`` moves the mark. A
read that is not committed (the caller failed) leaves the mark where it was: the next read answers the same
operations again, with those written since. Generations every reader of a kind has read are dropped, and those
only some readers still need are merged between the readers' marks, so the log holds at most one set per reader
and kind.

The readers: `FAIR_SHARE_INPUT` (`SchedulerCore`, usage and pending work: the period delta's ``resources``, which the input
re-reads), `DEFAULT_SEGMENT` (`SchedulerCore`, pending work: what a default-segment node can start, for heartbeat
skipping), `PUBLISH` (usage: the operations the incremental publish re-keys, `changes.py`), `PENDING` (pending
work: the incremental publish's activity and starvation checks, `heap_changes.py`, `starvation_changes.py`) and
`UNSETTLED` (lists: the operations the incremental publish configures again). So what heartbeat-time code changes
for the next publish goes through the log, and the publish's own state between publishes
(`publish_step.PublishStep`) is changed by publishes alone. The live service reads the input under its lock,
computes without it and publishes under it again: heartbeats in between write into the current generation, which
the publish reads, and the next input too.
"""

from __future__ import annotations

from bisect import bisect_right

USAGE = 0
"""The kind of ``ChangeLog.usage``."""
PENDING_WORK = 1
"""The kind of ``ChangeLog.pending``."""
LISTS = 2
"""The kind of ``ChangeLog.lists``."""

FAIR_SHARE_INPUT = "fair_share_input"
"""The fair-share input's reader (usage and pending work), `SchedulerCore`'s."""
PUBLISH = "publish"
"""The incremental publish's reader of usage changes."""
PENDING = "pending"
"""The incremental publish's reader of pending work."""
DEFAULT_SEGMENT = "default_segment"
"""The default segment's pending view's reader of pending work (`segment_inputs.DefaultSegmentPending`,
`SchedulerCore`'s)."""
UNSETTLED = "unsettled"
"""The incremental publish's reader of unsettled lists."""
STRATEGY_READERS = (PUBLISH, PENDING, UNSETTLED)
"""The readers of the strategy itself (a copy of the strategy without its core keeps only these)."""


class ChangeLog:
    """The operations changed, by generation, and each reader's mark (see the module docstring)."""

    __slots__ = (
        "_followers",
        "_kinds",
        "_marks",
        "_sealed",
        "generation",
        "lists",
        "pending",
        "polled",
        "usage",
    )

    def __init__(self) -> None:
        self.usage: set[str] = set()
        """Operations whose usage, lists, satisfaction or activity moved in the current generation."""
        self.pending: set[str] = set()
        """Operations whose pending work moved in the current generation (the controllers' watcher: written in
        place, never replaced)."""
        self.lists: set[str] = set()
        """Operations whose preemptible lists a configuration left unsettled in the current generation."""
        self.polled: set[str] = set()
        """Operations whose controllers cannot tell when their pending work moves: changed for every read."""
        self.generation = 0
        """The current generation's number (sealed by the next read)."""
        self._sealed: tuple[list[tuple[int, set[str]]], ...] = ([], [], [])
        """Per kind, (generation, operations) of the sealed generations some reader has not read, oldest first."""
        self._marks: dict[str, int] = {}
        """Reader → the first generation it has not read."""
        self._kinds: dict[str, tuple[int, ...]] = {}
        """Reader → the kinds it reads."""
        self._followers: tuple[tuple[str, ...], ...] = ((), (), ())
        """Per kind, the readers that read it."""
        self.follow(PUBLISH, (USAGE,))
        self.follow(PENDING, (PENDING_WORK,))
        self.follow(UNSETTLED, (LISTS,))

    def follow(self, reader: str, kinds: tuple[int, ...]) -> None:
        """``reader`` reads ``kinds`` from now on (what was written before is not its)."""
        self._seal()
        self._marks[reader] = self.generation
        self._kinds[reader] = kinds
        self._follow_kinds()

    def keep_readers(self, readers: tuple[str, ...]) -> None:
        """Every reader but ``readers`` reads no more (a copy of the strategy without the core that read it: a
        shard's replica keeps `STRATEGY_READERS`)."""
        for reader in [reader for reader in self._marks if reader not in readers]:
            del self._marks[reader]
            del self._kinds[reader]
        self._follow_kinds()
        self._compact((USAGE, PENDING_WORK, LISTS))

    def moved_since(self, reader: str) -> bool:
        """Whether some operation's pending work moved since ``reader``'s mark, or some is polled (without a
        read)."""
        if self.pending or self.polled:
            return True
        mark = self._marks[reader]
        return any(generation >= mark for generation, _ in self._sealed[PENDING_WORK])

    def read(self, reader: str) -> tuple[set[str], int]:
        """The operations changed since ``reader``'s mark (of its kinds; with pending work, the polled ones too),
        and the generation to `commit` once they are taken in."""
        self._seal()
        mark = self._marks[reader]
        kinds = self._kinds[reader]
        changed: set[str] = set()
        for kind in kinds:
            for generation, operations in self._sealed[kind]:
                if generation >= mark:
                    changed |= operations
        if PENDING_WORK in kinds and self.polled:
            changed |= self.polled
        return changed, self.generation

    def commit(self, reader: str, generation: int) -> None:
        """``reader`` took in what `read` answered with ``generation``."""
        self._marks[reader] = generation
        self._compact(self._kinds[reader])

    def take(self, reader: str) -> set[str]:
        """`read` and `commit` at once."""
        changed, generation = self.read(reader)
        self.commit(reader, generation)
        return changed

    def skip(self, reader: str) -> None:
        """``reader`` needs nothing written so far (it recomputes everything)."""
        self._seal()
        self.commit(reader, self.generation)

    def drop_pending(self, operation_id: str) -> None:
        """The operation's controller left: its pending work is nobody's to check (it is neither watched nor
        polled any more)."""
        self.pending.discard(operation_id)
        self.polled.discard(operation_id)
        for _, operations in self._sealed[PENDING_WORK]:
            operations.discard(operation_id)

    def _seal(self) -> None:
        """Close the current generation (when anything was written in it)."""
        currents = (self.usage, self.pending, self.lists)
        if not any(currents):
            return
        generation = self.generation
        for kind, current in enumerate(currents):
            if current:
                sealed = self._sealed[kind]
                sealed.append((generation, set(current)))
                current.clear()  # the writers hold these very sets
                if len(sealed) > len(self._followers[kind]):  # more than the readers' marks need
                    self._compact((kind,))
        self.generation = generation + 1

    def _follow_kinds(self) -> None:
        self._followers = tuple(
            tuple(reader for reader, kinds in self._kinds.items() if kind in kinds)
            for kind in (USAGE, PENDING_WORK, LISTS)
        )

    def _compact(self, kinds: tuple[int, ...]) -> None:
        """Drop the sealed generations of ``kinds`` every reader of their kind has read; merge those between two
        marks (every reader reads all of them or none)."""
        marks = self._marks
        for kind in kinds:
            sealed = self._sealed[kind]
            if not sealed:
                continue
            bounds = sorted({marks[reader] for reader in self._followers[kind]})
            kept: list[tuple[int, set[str]]] = []
            last = 0
            for generation, operations in sealed:
                interval = bisect_right(bounds, generation)
                if interval == 0:
                    continue  # read by every reader of the kind
                if kept and last == interval:
                    kept[-1][1].update(operations)
                else:
                    kept.append((generation, operations))
                    last = interval
            sealed[:] = kept
