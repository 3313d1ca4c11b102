"""`StrategyState.book_start` (the start serial stamped and the usage charged in one walk up the tree) leaves what
`stamp_start` then `account` then the lists leave: the same decisions on seeded traces, the same usages, serials
and lists after each start."""

from __future__ import annotations

import json

import pytest
from golden_trace import golden_trace

from pooltree.strategy.shares import add_floats
from pooltree.strategy.state import StrategyState


def _in_two_walks(self, allocation, runtime, element):
    self.stamp_start(element)
    self.account(runtime, element, allocation.amounts, add_floats)
    runtime.lists_settled = False
    runtime.lists.add(allocation)


def _above(element):
    while element is not None:
        yield element
        element = element.parent


@pytest.mark.parametrize("seed", [3, 4, 15, 22])
def test_one_walk_books_a_start_as_two(seed, monkeypatch):
    booked: list[tuple] = []
    book = StrategyState.book_start

    def observed(self, allocation, runtime, element):
        book(self, allocation, runtime, element)
        booked.append(
            (
                self.start_serial,
                [(e.id, e.last_start, list(e.usage)) for e in _above(element)],
                list(runtime.usage),
                [(a.id, a.preemption_status.value) for a in runtime.lists],
            )
        )

    monkeypatch.setattr(StrategyState, "book_start", observed)
    fast = json.dumps(golden_trace(seed, steps=60), sort_keys=True)
    fast_booked, booked[:] = list(booked), []
    book = _in_two_walks
    plain = json.dumps(golden_trace(seed, steps=60), sort_keys=True)
    assert fast_booked  # the traces start allocations
    assert fast == plain
    assert fast_booked == booked
