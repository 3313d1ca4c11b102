"""The increment log of shard processes (`pooltree/shards/increments.py`): the compact form gives back the
increments the leader made, a batch is pickled once for every shard, a shard skips its own entries, and the log
keeps only what some shard has not seen."""

from __future__ import annotations

import numpy as np
import pytest

from pooltree.shards.deltas import ClassesMoved, PreemptCounted, StartCounted, StartOrder
from pooltree.shards.increments import (
    ANY_SHARD,
    IncrementLog,
    decode,
    decode_chunks,
    encode,
    encode_started,
)
from pooltree.shards.pickling import dumps, loads
from pooltree.shards.replica import (
    AllocationFinished,
    AllocationStarted,
    NodeSynced,
    PendingWork,
    Rekeyed,
    UsageChanged,
)
from pooltree.strategy.model import Allocation, FinishedAllocation, SchedulingStage


def _allocation() -> Allocation:
    allocation = Allocation(
        "op-1/7",
        "op-1",
        np.array([1.0, 2.0e9, 0.0, 0.0, 1.0]),
        task="map",
        payload=object(),
        interruptible=True,
        interruption_signal="SIGUSR1",
        node_address="node-3",
        start_time=12.5,
    )
    allocation.resources = np.array([1.0, 3.0e9, 0.0, 0.0, 1.0])  # above its reserve
    allocation.revived = True
    return allocation


def test_a_start_comes_back_as_the_allocation_without_its_payload_and_with_its_own_vectors() -> None:
    allocation = _allocation()
    entry = loads(dumps(encode_started(allocation, SchedulingStage.REGULAR_MEDIUM_PRIORITY, 13.0, 41)))
    increment = decode(entry)
    assert isinstance(increment, AllocationStarted)
    assert increment.stage is SchedulingStage.REGULAR_MEDIUM_PRIORITY and increment.time == 13.0
    assert increment.serial == 41  # the truth's start serial
    copy = increment.allocation
    assert copy is not allocation and copy.payload is None
    for name in Allocation.__slots__:
        if name not in ("payload", "_resources", "reserve"):
            assert getattr(copy, name) == getattr(allocation, name), name
    assert np.array_equal(copy.resources, allocation.resources)
    assert np.array_equal(copy.reserve, allocation.reserve)
    assert copy.amounts == allocation.amounts
    # taken at the start: the truth's allocation moving on later changes nothing in the entry
    entry = encode_started(allocation, SchedulingStage.REGULAR_MEDIUM_PRIORITY, 13.0)
    allocation.node_address = "elsewhere"
    allocation.resources = np.zeros(5)
    again = decode(loads(dumps(entry)))
    assert isinstance(again, AllocationStarted)
    assert again.allocation.node_address == "node-3" and again.allocation.amounts[1] == 3.0e9


def test_an_allocation_whose_reserve_is_its_resources_keeps_them_one_vector() -> None:
    allocation = Allocation("op-1/1", "op-1", np.array([1.0, 0.0, 0.0, 0.0, 1.0]), node_address="n")
    assert allocation.reserve is allocation.resources
    started = decode(loads(dumps(encode_started(allocation, SchedulingStage.REGULAR_MEDIUM_PRIORITY, 0.0))))
    assert isinstance(started, AllocationStarted)
    assert started.allocation.reserve is started.allocation.resources


@pytest.mark.parametrize(
    "increment",
    [
        PendingWork("op-1", 5, np.array([1.0, 0.0, 0.0, 0.0, 1.0])),
        NodeSynced("node-1", np.array([16.0, 64e9, 0.0, 0.0, 16.0]), frozenset({"ssd"}), 3.0),
        AllocationFinished(
            FinishedAllocation("op-1/2", "failed"), 4.0, "op-1", (1.0, 2e9, 0.0, 0.0, 1.0), False
        ),
        AllocationFinished(FinishedAllocation("op-1/4", "aborted"), 4.0, "op-1", None, True),
        AllocationFinished(
            FinishedAllocation("op-1/3", "completed", processed_fraction=0.5), 4.0, "op-1", None, False
        ),
        UsageChanged("op-1/2", np.array([1.0, 5e9, 0.0, 0.0, 1.0]), "op-1", (0.0, 3e9, 0.0, 0.0, 0.0)),
        StartOrder("op-1/2", 17, 42),
        StartCounted("op-1", (1.0, 2e9, 0.0, 0.0, 1.0), 43),
        PreemptCounted("op-1", (1.0, 2e9, 0.0, 0.0, 1.0)),
        ClassesMoved((("op-1", 3, float("inf")), ("op-2", 0, 4))),
        Rekeyed(frozenset({"op-1"})),
    ],
)
def test_every_other_increment_comes_back_equal(increment: object) -> None:
    back = decode(loads(dumps(encode(increment))))  # type: ignore[arg-type]
    assert type(back) is type(increment)
    for name, value in vars(increment).items():
        got = getattr(back, name)
        if isinstance(value, np.ndarray):
            assert np.array_equal(got, value)
        else:
            assert got == value


def test_a_batch_is_pickled_once_and_each_shard_skips_its_own_entries() -> None:
    log = IncrementLog()
    log.append(encode(PendingWork("op-1", 1, np.ones(5))))
    log.append(encode_started(_allocation(), SchedulingStage.REGULAR_MEDIUM_PRIORITY, 1.0), 0)
    log.append(
        encode(AllocationFinished(FinishedAllocation("op-1/7", "completed"), 2.0, "op-1", (1.0,) * 5, False)),
        ANY_SHARD,
    )
    end = log.end()
    assert end == 1 and len(log.chunks) == 1 and log.end() == 1  # nothing new: no new batch
    chunks = log.since(0)
    mine = decode_chunks(chunks, 0)
    others = decode_chunks(chunks, 1)
    assert [type(i) for i in mine] == [PendingWork, AllocationFinished]
    assert [type(i) for i in others] == [PendingWork, AllocationStarted, AllocationFinished]
    # a shard that does not hold the started allocation's node reads only its operation and amounts
    elsewhere = decode_chunks(chunks, 1, lambda address: False)
    assert elsewhere[1] == StartCounted("op-1", _allocation().amounts)


def test_the_log_keeps_what_some_shard_has_not_seen() -> None:
    log = IncrementLog()
    for batch in range(3):
        log.append(encode(PendingWork(f"op-{batch}", batch, np.ones(5))))
        log.end()
    assert log.entries == 3
    log.trim(2)  # every shard is at batch 2 or later
    assert log.first == 2 and log.entries == 1
    assert [i.operation_id for i in decode_chunks(log.since(2), 0)] == ["op-2"]  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="trimmed"):
        log.since(1)
