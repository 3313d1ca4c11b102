"""The pass pipe's messages as plain tuples (`passes.flat`, `unflat`): every kind comes back with the same fields."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np

from pooltree.resources import vector
from pooltree.shards.deltas import ClassAnswer, ClassQuery
from pooltree.shards.passes import (
    PASS_MESSAGES,
    PassDone,
    PassFailed,
    PassRequest,
    Preempted,
    Started,
    Unclaimed,
    flat,
    unflat,
)
from pooltree.shards.pickling import allocation_fields, dumps, loads
from pooltree.shards.replica import Claim, ClaimAnswer, Grant
from pooltree.strategy.model import (
    AbortReason,
    Allocation,
    FinishedAllocation,
    PreemptionRecord,
    SchedulingStage,
)


def _plain(value: Any) -> Any:
    """A field's value comparable with ==: vectors as lists, allocations as their fields, messages as theirs."""
    if isinstance(value, np.ndarray):
        return ("vector", value.dtype.str, value.tolist())
    if isinstance(value, Allocation):
        return ("allocation", allocation_fields(value))
    if isinstance(value, tuple) and value and isinstance(value[0], Grant):
        return tuple(_fields(grant) for grant in value)
    return value


def _fields(message: Any) -> tuple[Any, ...]:
    return (type(message), *[_plain(getattr(message, field.name)) for field in fields(message)])


def _allocation(name: str) -> Allocation:
    allocation = Allocation(name, "op", vector(user_slots=1, cpu=2), node_address="n1", start_time=4.0)
    allocation.reserve = vector(user_slots=1, cpu=1)
    allocation.start_order = 7
    return allocation


def test_every_message_of_the_pass_pipe_comes_back_with_its_fields() -> None:
    record = PreemptionRecord(
        "a1", "op", "n1", AbortReason.PREEMPTION, 5.0, "why", SchedulingStage.PREEMPTIVE_NORMAL, 3.0
    )
    grant = Grant("op", _allocation("g1"), (4.0, 4.0, 1e9, 0.0, 0.0), 3.0, 2, vector(user_slots=1, cpu=1))
    messages = [
        Started("a1", "n1", "regular_medium_priority", 3.0, (("pool", (1.0, 2.0, 0.0, 0.0, 0.0)),)),
        Started("a2", "n1", "regular_medium_priority", 3.0),
        Preempted(record),
        Unclaimed("a3", "op", FinishedAllocation("a3", "aborted"), 3.0),
        PassDone(True, False, 3, False, 2.5, 0.01, 0.002),
        PassDone(False, False, 0, False, None, 0.0, 0.0),
        PassFailed("boom"),
        Claim("default", "op", "n1", vector(user_slots=3, cpu=3), (), 3.0),
        ClaimAnswer(_allocation("c1"), 4, vector(user_slots=1, cpu=1)),
        ClaimAnswer(None, 0, np.zeros(5)),
        grant,
        PassRequest(
            "default",
            b"snapshot",
            [b"batch"],
            1,
            "n1",
            vector(cpu=16),
            frozenset({"ssd"}),
            3.0,
            1.5,
            (grant,),
            9,
        ),
        PassRequest("default", None, [], 0, "n1", vector(cpu=16), frozenset(), 3.0, 1.5, shards=3),
        ClassQuery("default", ("op-1", "op-2"), ("op-1/2", "op-1/3")),
        ClassAnswer(((2, float("inf")), (0, 3)), (4, None)),
    ]
    assert {type(message) for message in messages} == set(PASS_MESSAGES)
    for message in messages:
        back = unflat(loads(dumps(flat(message))))
        assert _fields(back) == _fields(message)
        assert back.__dict__.keys() == message.__dict__.keys()
