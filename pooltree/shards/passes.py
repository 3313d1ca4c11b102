"""A shard process's side of shards that start allocations: its replicas, and the heartbeat passes it runs.

The leader sends a `PassRequest` per heartbeat and tree of one of this shard's nodes (over the shard's pass pipe,
`serve_passes`): the increments since the shard's last pass of the tree in the leader's order (or first a snapshot
of the truth, `pickling.snapshot_of`; the increments as batches of the tree's log, `increments.py`, the same bytes
for every shard), the node's limits and tags, the time and the node's preemptive backoff as the leader holds it.
`ShardPasses.run` brings the tree's `TreeReplica` forward and runs the stages of the node's heartbeat on it. Its
replica holds its own nodes' allocations only (`deltas.py`). Each start it decides takes an allocation the request
granted ahead (`replica.Grant`, when it answers the start exactly) or is a `Claim` sent to the leader, which
answers it (`ClaimAnswer`: the real controller's allocation, or None); a class read of an operation the pass
changed is a `deltas.ClassQuery`, answered with the truth's boundaries and start orders; what the pass books goes
to the leader in order (`Started`, `Preempted`; a granted allocation the pass could not book, `Unclaimed`) with
its next claim or class query or with the pass's end, each message a list (the bookings, then the claim or the
end), and the pass ends with `PassDone` (the pass's flags, the node's backoff after it, the CPU seconds it took
here). Every message is in the pickling form (`pickling.dumps`), each of these dataclasses as a plain tuple
(`flat`, `unflat`): unpickling a dataclass costs a Python call and its state dict, several times a tuple's cost,
and these messages cross the pipe at every pass.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, fields
from multiprocessing.connection import Connection
from typing import Any

from pooltree.resources import Vector
from pooltree.shards.deltas import ClassAnswer, ClassQuery, owner
from pooltree.shards.increments import decode_chunks
from pooltree.shards.pickling import allocation_fields, allocation_of, dumps, loads, vector_of
from pooltree.shards.replica import Claim, ClaimAnswer, Grant, TreeReplica
from pooltree.strategy.model import Allocation, FinishedAllocation, NodeHeartbeat, PreemptionRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PassRequest:
    """The stages of node ``address``'s heartbeat in ``tree``, after ``increments`` (a new copy first when
    ``snapshot`` is given)."""

    tree: str
    snapshot: bytes | None
    increments: list[bytes]
    """Batches of the tree's `IncrementLog` (`increments.py`) since the shard's last pass of the tree."""
    shard: int
    """The shard asked (its own entries in the batches, starts its passes booked already, are skipped)."""
    address: str
    limits: Vector
    tags: frozenset[str]
    now: float
    backoff: float
    """The node's ``last_preemptive_scheduling_time`` in the leader (heartbeats the verdicts answered moved it)."""
    grants: tuple[Grant, ...] = ()
    """Allocations granted ahead (`replica.Grant`), per operation in the order they were made: the pass's claims
    take them instead of asking the leader while they answer the claim exactly."""
    published: int | None = None
    """With ``snapshot``: the leader's number of the published tree in it (`replica.PublishedChanges`), if any."""
    shards: int = 1
    """The number of shards (which nodes are this shard's: `deltas.shard_of`; its replicas hold their allocations)."""


@dataclass(frozen=True)
class Started:
    """The pass booked the granted allocation ``allocation_id`` on ``node`` in ``stage`` at ``time``."""

    allocation_id: str
    node: str
    stage: str
    time: float
    limited_usage: tuple[tuple[str, tuple[float, ...]], ...] | None = None
    """For an allocation taken from a grant: the replica's usage of its operation and each ancestor with limits
    when it decided (the leader's claim check, made at the booking); None for an answered claim's."""


@dataclass(frozen=True)
class Preempted:
    """The pass preempted an allocation; ``record`` says why, when and for whom."""

    record: PreemptionRecord


@dataclass(frozen=True)
class Unclaimed:
    """A granted allocation the pass could not book goes back to its controller."""

    allocation_id: str
    operation_id: str
    finished: FinishedAllocation
    time: float


@dataclass(frozen=True)
class PassDone:
    """The pass's end: its flags, the node's backoff after it and the CPU seconds it took in the shard."""

    preemptive_scheduling_performed: bool
    scheduled_with_preemption: bool
    schedule_attempts: int
    timeout_expired: bool
    backoff: float | None
    cpu: float
    apply_cpu: float
    """Of ``cpu``, what bringing the replica forward took (a snapshot loaded, the increments applied)."""


@dataclass(frozen=True)
class PassFailed:
    """The pass raised ``error`` (the leader copies the truth to the shard again before its next pass)."""

    error: str


Effect = Started | Preempted | Unclaimed


class ShardPasses:
    """One shard's replicas, one per tree, and its passes (see the module docstring)."""

    def __init__(
        self,
        ask: Callable[[Claim], ClaimAnswer],
        tell: Callable[[Effect], None],
        ask_classes: Callable[[ClassQuery], ClassAnswer],
    ) -> None:
        self.ask = ask
        self.tell = tell
        self.ask_classes = ask_classes
        self.replicas: dict[str, TreeReplica] = {}

    def run(self, request: PassRequest) -> PassDone:
        began = time.process_time()
        replica = self.replicas.get(request.tree)
        if replica is None:
            owns = owner(request.shard, request.shards)
            replica = TreeReplica(request.tree, self.ask, self._unclaim, owns, self.ask_classes)
            self.replicas[request.tree] = replica
            replica.owned_answers = True  # each answer is unpickled here: its allocation is the replica's own
        if request.snapshot is not None:
            replica.load(request.snapshot, request.published)
        elif replica.stale():
            raise RuntimeError(f"node shard has no replica of tree {request.tree!r} and got no snapshot")
        replica.apply(decode_chunks(request.increments, request.shard, replica.owns), owned=True)
        applied = time.process_time()
        strategy = replica.strategy
        assert strategy is not None
        copied = strategy.nodes.get(request.address)
        if copied is not None:
            copied.last_preemptive_scheduling_time = request.backoff
        replica.send_effect = lambda event: self._effect(replica, event)
        replica.grants = {}
        for grant in request.grants:
            replica.grants.setdefault(grant.operation_id, deque()).append(grant)
        try:
            result = replica.schedule(
                NodeHeartbeat(request.address, request.limits, request.tags), request.now
            )
        finally:
            replica.send_effect = None
            replica.grants = {}
            replica.granted_usage.clear()
        copied = strategy.nodes.get(request.address)
        return PassDone(
            result.preemptive_scheduling_performed,
            result.scheduled_with_preemption,
            result.schedule_attempts,
            result.timeout_expired,
            copied.last_preemptive_scheduling_time if copied is not None else None,
            time.process_time() - began,
            applied - began,
        )

    def _effect(self, replica: TreeReplica, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "allocation_started":
            allocation_id = event["allocation_id"]
            limited = replica.granted_usage.pop(allocation_id, None)
            self.tell(Started(allocation_id, event["node"], event["stage"], event["time"], limited))
        elif kind == "allocation_preempted":
            strategy = replica.strategy
            assert strategy is not None
            record = strategy.allocations[event["allocation_id"]].preemption
            if record is not None:
                self.tell(Preempted(record))

    def _unclaim(self, tree: str, allocation: Allocation, finished: FinishedAllocation, now: float) -> None:
        self.tell(Unclaimed(allocation.id, allocation.operation_id, finished, now))


# ------------------------------------------------------------------ the pass pipe's form

PASS_MESSAGES: tuple[type, ...] = (
    Started,
    Preempted,
    Unclaimed,
    PassDone,
    PassFailed,
    Claim,
    ClaimAnswer,
    Grant,
    PassRequest,
    ClassQuery,
    ClassAnswer,
)
_NAMES = tuple(tuple(field.name for field in fields(kind)) for kind in PASS_MESSAGES)
_KIND = {kind: index for index, kind in enumerate(PASS_MESSAGES)}


def _optional(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else convert(value)


_VECTOR = (lambda vector: vector.tolist(), vector_of)
_ALLOCATION = (_optional(allocation_fields), _optional(allocation_of))
_CONVERTED: dict[type, tuple[tuple[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]], ...]] = {
    Claim: (("available", _VECTOR),),
    ClaimAnswer: (("allocation", _ALLOCATION), ("min_needed", _VECTOR)),
    Grant: (("allocation", _ALLOCATION), ("min_needed", _VECTOR)),
    PassRequest: (
        ("limits", _VECTOR),
        ("grants", (lambda grants: tuple(map(flat, grants)), lambda grants: tuple(map(unflat, grants)))),
    ),
}
"""Per kind, the fields that go as plain values (vectors as float lists, allocations as their fields, grants
flat) and how each is made again."""
_CONVERSIONS = tuple(
    tuple((_NAMES[index].index(name), pair) for name, pair in _CONVERTED.get(kind, ()))
    for index, kind in enumerate(PASS_MESSAGES)
)


def flat(message: Any) -> tuple[Any, ...]:
    """A message of the pass pipe as a tuple of plain values: its kind's index, then its fields in order (see
    `_CONVERTED`); `unflat` makes it again."""
    kind = _KIND[type(message)]
    state = message.__dict__
    values = [kind, *[state[name] for name in _NAMES[kind]]]
    for at, (to_plain, _) in _CONVERSIONS[kind]:
        values[1 + at] = to_plain(values[1 + at])
    return tuple(values)


def unflat(values: tuple[Any, ...]) -> Any:
    """The message `flat` took (its fields written as unpickling writes a dataclass's state)."""
    kind = values[0]
    message = object.__new__(PASS_MESSAGES[kind])
    state = message.__dict__
    state.update(zip(_NAMES[kind], values[1:], strict=True))
    for at, (_, made) in _CONVERSIONS[kind]:
        name = _NAMES[kind][at]
        state[name] = made(state[name])
    return message


def serve_passes(conn: Connection) -> None:
    """A shard process's pass thread: requests from the leader, one at a time; claims asked on the same pipe.
    The process ends when the leader's end of the pipe closes."""

    told: list[Effect] = []
    """Bookings not yet sent: they go with the next claim or the pass's end, in order (one message, and one
    section under the leader's lock, instead of one per booking)."""

    def ask(claim: Claim | ClassQuery) -> Any:
        batch: list[Any] = [*told, claim]
        told.clear()
        conn.send_bytes(dumps([flat(message) for message in batch]))
        return unflat(loads(conn.recv_bytes()))

    passes = ShardPasses(ask, told.append, ask)
    while True:
        try:
            request: PassRequest = unflat(loads(conn.recv_bytes()))
            try:
                reply: PassDone | PassFailed = passes.run(request)
            except (EOFError, OSError):
                raise
            except Exception as error:
                log.exception("node shard pass in tree %s failed", request.tree)
                passes.replicas.pop(request.tree, None)
                reply = PassFailed(repr(error))
            batch = [*told, reply]
            told.clear()
            conn.send_bytes(dumps([flat(message) for message in batch]))
        except (EOFError, OSError):
            os._exit(0)  # the leader is gone: nothing here outlives it
