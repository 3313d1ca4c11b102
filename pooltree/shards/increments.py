"""The increments as shard processes receive them: a log per tree, each batch encoded once for every shard.

The leader keeps, per tree, one `IncrementLog` of the increments its truth made (`starts.py`: its events, publishes,
operations, re-keys, usage reports, node limits, pending work), in its order. A batch is sealed when a shard's pass
asks for what it has not seen: the increments since the last seal are pickled together once (`pickling.dumps`),
and every shard process gets the same bytes, each from its own cursor (`ShardLink.cursors`). So the leader's cost
of an increment does not grow with the shard count (before, each shard's increments were copied and pickled for
it alone).

The increments made most often travel as plain tuples (`encode`), not as their dataclasses: a start or
preemption a shard's pass booked (on its own node: the other shards read only its operation and amounts) as those
(`deltas.StartCounted`, `deltas.PreemptCounted`), another start as the allocation's fields (its controller's
payload left out, as the pickling form leaves it out), an end as its id, state and time, a usage report, a node's
limits, an operation's pending work. `decode_chunks` gives the shard the
same `Increment` dataclasses back (a start with a new `Allocation` of its own), in order.

An entry carries its origin: the shard whose pass made it (a start it booked in its replica already), or -1. A
shard skips its own entries, as the leader used to leave them out of its inbox; the others apply them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pooltree.shards.deltas import ClassesMoved, PreemptCounted, StartCounted, StartOrder
from pooltree.shards.pickling import allocation_fields, allocation_of, dumps, loads
from pooltree.shards.replica import (
    AllocationFinished,
    AllocationStarted,
    Increment,
    NodeSynced,
    OperationChanges,
    PendingWork,
    Published,
    PublishedChanges,
    UsageChanged,
)
from pooltree.strategy.model import Allocation, FinishedAllocation, SchedulingStage
from pooltree.strategy.snapshot import ElementSpec, SchedulingTree

ANY_SHARD = -1
"""The origin of an increment every shard applies."""

_PENDING, _NODE, _STARTED, _FINISHED, _USAGE, _ORDER, _CLASSES, _COUNTED, _PREEMPT_COUNTED = range(9)
_NODE_FIELD = 7
"""The node's address in `pickling.allocation_fields`."""


def encode_started(
    allocation: Allocation, stage: SchedulingStage, time: float, serial: int = 0
) -> tuple[Any, ...]:
    """A start the truth booked, taken now (the truth's allocation moves on), with the truth's start serial."""
    return (_STARTED, allocation_fields(allocation), stage.value, time, serial)


def encode(increment: Increment) -> Any:
    """The increment as it goes into the log: a tuple for the frequent kinds, else the dataclass itself."""
    if isinstance(increment, AllocationFinished):
        finished = increment.finished
        if (
            finished.processed_fraction is None
            and finished.abort_reason is None
            and finished.user_job_max_memory is None
            and finished.job_proxy_max_memory is None
        ):
            return (
                _FINISHED,
                finished.allocation_id,
                finished.state,
                increment.time,
                increment.operation_id,
                increment.released,
                increment.restarted,
            )
        return increment
    if isinstance(increment, PendingWork):
        return (_PENDING, increment.operation_id, increment.pending, increment.min_needed)
    if isinstance(increment, UsageChanged):
        return (_USAGE, increment.allocation_id, increment.resources, increment.operation_id, increment.delta)
    if isinstance(increment, StartCounted):
        return (_COUNTED, increment.operation_id, increment.amounts, increment.serial)
    if isinstance(increment, PreemptCounted):
        return (_PREEMPT_COUNTED, increment.operation_id, increment.amounts)
    if isinstance(increment, StartOrder):
        return (_ORDER, increment.allocation_id, increment.order, increment.serial)
    if isinstance(increment, ClassesMoved):
        return (_CLASSES, increment.boundaries)
    if isinstance(increment, NodeSynced):
        return (_NODE, increment.address, increment.limits, increment.tags, increment.time)
    if isinstance(increment, AllocationStarted):
        return encode_started(increment.allocation, increment.stage, increment.time, increment.serial)
    return increment


def published_changes(
    published: Published, previous: SchedulingTree, base: int, serial: int
) -> PublishedChanges | None:
    """``published`` as the changes from ``previous`` (the tree the truth published before it, numbered ``base``),
    when it was derived from ``previous``: of the same structure (its ``skeleton``: `SchedulingTree.with_shares`,
    with the same element ids in the same order) or with operations added and removed
    (`SchedulingTree.with_operation_changes`: its ``delta`` names ``previous``'s skeleton); else None (it goes
    whole). The changed specs are the builder's hint (`SchedulingTree.respecced`, when derived from ``previous``)
    or, without it, the specs that are not ``previous``'s very objects."""
    tree = published.tree
    if tree.config is not previous.config:
        return None
    delta = tree.delta
    same = tree.skeleton is previous.skeleton
    if not same and (delta is None or delta.base is not previous.skeleton):
        return None
    new, old = tree.elements, previous.elements
    hint = tree.respecced
    replaced: list[ElementSpec]
    if hint is not None and hint[0]() is previous:
        replaced = list(hint[1])  # the specs of the tree that are not ``previous``'s very objects
    elif same:
        if len(new) != len(old):
            return None
        replaced = []
        for (element_id, spec), (old_id, old_spec) in zip(new.items(), old.items(), strict=True):
            if element_id != old_id:
                return None
            if spec is not old_spec:
                replaced.append(spec)
    else:
        replaced = [spec for element_id, spec in new.items() if old.get(element_id) is not spec]
    operations = None
    if not same:
        assert delta is not None
        children = {parent: list(tree.children[parent]) for parent in delta.parents}
        operations = OperationChanges(list(new), set(delta.removed), list(delta.added), children)
    return PublishedChanges(
        base,
        serial,
        tree.total_resources,
        replaced,
        tree.prepared,
        published.time,
        published.high_priority,
        published.fifo_unschedulable,
        published.scheduling_tags_enabled,
        operations,
    )


def decode(entry: Any, owns: Callable[[str], bool] | None = None) -> Increment:
    """The increment `encode` made ``entry`` of (``owns``: which nodes the decoding shard holds; another node's
    start is then only what a replica reads of it, `deltas.StartCounted`)."""
    if type(entry) is not tuple:
        return entry  # type: ignore[no-any-return]
    kind = entry[0]
    if kind == _FINISHED:
        return AllocationFinished(
            FinishedAllocation(entry[1], entry[2]), entry[3], entry[4], entry[5], entry[6]
        )
    if kind == _PENDING:
        return PendingWork(entry[1], entry[2], entry[3])
    if kind == _STARTED:
        fields = entry[1]
        if owns is not None and not owns(fields[_NODE_FIELD]):
            return StartCounted(fields[1], tuple(fields[2]), entry[4])
        return AllocationStarted(allocation_of(fields), SchedulingStage(entry[2]), entry[3], entry[4])
    if kind == _USAGE:
        return UsageChanged(entry[1], entry[2], entry[3], entry[4])
    if kind == _NODE:
        return NodeSynced(entry[1], entry[2], entry[3], entry[4])
    if kind == _COUNTED:
        return StartCounted(entry[1], entry[2], entry[3])
    if kind == _PREEMPT_COUNTED:
        return PreemptCounted(entry[1], entry[2])
    if kind == _ORDER:
        return StartOrder(entry[1], entry[2], entry[3])
    if kind == _CLASSES:
        return ClassesMoved(entry[1])
    raise ValueError(f"unknown increment entry kind {kind!r}")


def decode_chunks(
    chunks: Iterable[bytes], shard: int, owns: Callable[[str], bool] | None = None
) -> list[Increment]:
    """The increments of the log's batches ``chunks``, in order, without shard ``shard``'s own (``owns``: see
    `decode`)."""
    out: list[Increment] = []
    for chunk in chunks:
        for origin, entry in loads(chunk):
            if origin != shard:
                out.append(decode(entry, owns))
    return out


class IncrementLog:
    """One tree's increments for the shard processes, in the leader's order, batches pickled once (see above).

    A position in the log is a batch number: ``first`` is the number of ``chunks[0]``; `end` seals what is open and
    is the position a shard that has seen everything is at."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.first = 0
        self.sizes: list[int] = []
        """Entries per batch in ``chunks``."""
        self.open: list[tuple[int, Any]] = []
        """``(origin, entry)`` since the last seal."""
        self.entries = 0
        """Entries held (sealed and open): what `trim` has not dropped."""
        self.encoded_bytes = 0
        """Bytes of the batches sealed so far (each sent to every shard that holds the tree)."""

    def append(self, entry: Any, origin: int = ANY_SHARD) -> None:
        self.open.append((origin, entry))
        self.entries += 1

    def end(self) -> int:
        """Seal the open batch; the position after every batch."""
        if self.open:
            chunk = dumps(self.open)
            self.encoded_bytes += len(chunk)
            self.chunks.append(chunk)
            self.sizes.append(len(self.open))
            self.open = []
        return self.first + len(self.chunks)

    def since(self, position: int) -> list[bytes]:
        """The batches from ``position`` on (what it has not seen; call `end` first to seal the open one)."""
        if position < self.first:
            raise ValueError(f"increment log position {position} was trimmed (first kept is {self.first})")
        return self.chunks[position - self.first :]

    def trim(self, position: int) -> None:
        """Drop the batches before ``position`` (every shard is past them)."""
        drop = min(max(position - self.first, 0), len(self.chunks))
        if drop:
            self.entries -= sum(self.sizes[:drop])
            del self.chunks[:drop]
            del self.sizes[:drop]
            self.first += drop
