"""The pickling form of what the leader sends a shard process: a replica's first state and the increments.

A shard process holds its replicas (`replica.py`) in its own memory, so the leader sends them bytes:

- **a snapshot** (`snapshot_of`): the truth's `TreeScheduler` as a replica starts from it (`TreeReplica.copy_from`
  does the same in one process by ``deepcopy``): each real controller replaced by its pending work (the shard
  makes a `ClaimController` of it), the leader's taps of the truth's methods, its event sink left
  out; `TreeReplica.load` makes the replica of it.
- **increments** (`dumps` / `loads`): the `Increment` dataclasses as they are.

What does not pickle, or must not travel, is left out by the pickler's dispatch table: an `Allocation`'s
``payload`` (the controller's own object, which the strategy never reads: a replica's allocations carry none) and
a `SchedulingTree`'s ``respecced`` (a weak reference to the tree it was derived from, a hint that lets ``publish``
look at fewer specs; without it ``publish`` compares every spec: the same result).
"""

from __future__ import annotations

import copyreg
import io
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pooltree.resources import Vector
from pooltree.strategy.model import Allocation, PreemptionStatus
from pooltree.strategy.scheduler import TreeScheduler
from pooltree.strategy.snapshot import SchedulingTree

TAPPED = (
    "publish",
    "register_operation",
    "unregister_operation",
    "rekey_operations",
    "report_usage",
    "finish_allocation",
    "configure_lists",
    "set_allocation_on_bound_preemptible",
)
"""The truth's methods the leader taps (`starts.py`): a replica never keeps the taps."""


@dataclass(frozen=True)
class Pending:
    """A real controller as a snapshot carries it: its operation's pending work (the shard's `ClaimController`)."""

    operation_id: str
    pending: int
    min_needed: Vector


def allocation_fields(allocation: Allocation) -> tuple[Any, ...]:
    """An allocation as a tuple of plain values, taken now (vectors as float lists, its reserve None when it is its
    resources, the status by value); no payload."""
    resources = allocation._resources
    reserve = allocation.reserve
    return (
        allocation.id,
        allocation.operation_id,
        resources.tolist(),
        None if reserve is resources else reserve.tolist(),
        allocation.task,
        allocation.interruptible,
        allocation.interruption_signal,
        allocation.node_address,
        allocation.start_time,
        allocation.start_order,
        allocation.preemption_status.value,
        allocation.preemption,
        allocation.restarted,
        allocation.revived,
    )


_STATUSES = {status.value: status for status in PreemptionStatus}


def allocation_of(fields: tuple[Any, ...]) -> Allocation:
    """The allocation `allocation_fields` took (a new object, with vectors of its own)."""
    (
        id_,
        operation_id,
        resources,
        reserve,
        task,
        interruptible,
        signal,
        node,
        start,
        order,
        status,
        preemption,
        restarted,
        revived,
    ) = fields
    allocation = Allocation.__new__(Allocation)
    allocation.id = id_
    allocation.operation_id = operation_id
    vector = np.array(resources, dtype=float)
    allocation._resources = vector  # what the ``resources`` setter keeps, from the float list at hand
    allocation.amounts = tuple(resources)
    allocation.reserve = vector if reserve is None else np.array(reserve, dtype=float)
    allocation.task = task
    allocation.payload = None
    allocation.interruptible = interruptible
    allocation.interruption_signal = signal
    allocation.node_address = node
    allocation.start_time = start
    allocation.start_order = order
    allocation.preemption_status = _STATUSES[status]
    allocation.preemption = preemption
    allocation.restarted = restarted
    allocation.revived = revived
    return allocation


def _reduce_allocation(allocation: Allocation) -> tuple[Any, ...]:
    """An allocation as its fields (`allocation_fields`: no payload), made again by `allocation_of` (a tuple
    pickles several times faster than the slots' state dict)."""
    return (allocation_of, (allocation_fields(allocation),))


def _reduce_tree(tree: SchedulingTree) -> tuple[Any, ...]:
    return (copyreg.__newobj__, (SchedulingTree,), {**tree.__dict__, "respecced": None})


def vector_of(values: list[float]) -> np.ndarray:
    """A resource vector made again from its float list."""
    return np.array(values, dtype=float)


def _reduce_array(array: np.ndarray) -> Any:
    """A resource vector (1-D float64) as a list of floats: numpy's own reduce pickles the dtype and a bytes
    buffer, and its reconstruction runs in Python, several times the cost for a 5-element vector."""
    if type(array) is np.ndarray and array.ndim == 1 and array.dtype == np.float64:
        return (vector_of, (array.tolist(),))
    return array.__reduce_ex__(pickle.HIGHEST_PROTOCOL)


_DISPATCH = copyreg.dispatch_table.copy()
_DISPATCH[np.ndarray] = _reduce_array
_DISPATCH[Allocation] = _reduce_allocation
_DISPATCH[SchedulingTree] = _reduce_tree


class _Pickler(pickle.Pickler):
    """The dispatch table above (no persistent ids: the C pickler then never calls back into Python per object)."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.dispatch_table = _DISPATCH


class _SnapshotPickler(_Pickler):
    """Objects in ``replaced`` (by id) go as what it maps them to (a snapshot's controllers and taps)."""

    def __init__(self, file: io.BytesIO, replaced: dict[int, Any]) -> None:
        super().__init__(file)
        self.replaced = replaced

    def persistent_id(self, obj: Any) -> Any:
        return self.replaced.get(id(obj))


class _Unpickler(pickle.Unpickler):
    """Replaced objects come back as ``load(key)``."""

    def __init__(self, file: io.BytesIO, load: Callable[[Any], Any]) -> None:
        super().__init__(file)
        self.load_replaced = load

    def persistent_load(self, pid: Any) -> Any:
        return self.load_replaced(pid)


def dumps(value: Any) -> bytes:
    """``value`` (increments, claims, answers) in the pickling form."""
    out = io.BytesIO()
    _Pickler(out).dump(value)
    return out.getvalue()


def loads(data: bytes) -> Any:
    """What `dumps` made ``data`` of."""
    return pickle.loads(data)


def snapshot_of(truth: TreeScheduler, pending: Callable[[str], tuple[int, Vector]]) -> bytes:
    """The truth's strategy as a replica starts from it: controllers as their `Pending` work (``pending``), no
    taps, no event sink, no queued preemptions (the leader delivers what it queued); the change log as it is (the
    replica drops the core's readers of it, `TreeReplica._adopt`)."""
    state = truth.state
    replaced: dict[int, Any] = {}
    keep: list[Any] = []  # the replacements' keys live as long as the pickler
    for operation_id, runtime in truth.operations.items():
        count, min_needed = pending(operation_id)
        key = Pending(operation_id, count, min_needed)
        keep.append(key)
        replaced[id(runtime.controller)] = ("controller", key)
    for name in TAPPED:
        tap = truth.__dict__.get(name)
        if tap is not None:
            replaced[id(tap)] = ("none",)
    queued = state.queued_preemptions
    if queued:
        replaced[id(queued)] = ("empty", type(queued))
    sink = state.event_sink
    state.event_sink = None
    out = io.BytesIO()
    try:
        _SnapshotPickler(out, replaced).dump(truth)
    finally:
        state.event_sink = sink
    return out.getvalue()


def load_snapshot(data: bytes, controller: Callable[[Pending], Any]) -> TreeScheduler:
    """The strategy `snapshot_of` made ``data`` of, each controller made by ``controller(pending)``; the taps
    are dropped."""

    def load(pid: Any) -> Any:
        if pid[0] == "controller":
            return controller(pid[1])
        if pid[0] == "empty":
            return pid[1]()
        return None

    strategy: TreeScheduler = _Unpickler(io.BytesIO(data), load).load()
    for name in TAPPED:
        strategy.__dict__.pop(name, None)
    return strategy
