"""`PreemptibleLists._balance_open` (the boundary tests written inline on the open resources) moves the same
allocations with the same floats as `_balance_plain` (every test through `_below`): statuses, start order and
the three usages bit for bit after every step, with fractional amounts whose sums round; and the golden traces
decide alike with the plain balance forced."""

from __future__ import annotations

import json

import numpy as np
import pytest
from golden_trace import golden_trace
from hypothesis import given, settings
from hypothesis import strategies as st
from lockstep_lists import Lockstep

from pooltree.resources import vector
from pooltree.strategy import PreemptibleLists


class _Plain(PreemptibleLists):
    """Every balance through `_below` (the lists before `_balance_open`)."""

    __slots__ = ()

    def _balance(self, left, bound, cumulative):
        return self._balance_plain(left, bound, cumulative)


_CPUS = (0.1, 0.3, 1.0 / 3.0, 0.7, 1.0, 1.5, 2.0, 1e-7, 3.3)
_MEMORY = (0.0, 1.0, 2.5 * 2**30, 7.1e9, 1e12 / 3.0)


def _state(lists: PreemptibleLists) -> tuple:
    return (
        [(a.id, a.preemption_status.value) for a in lists],
        [lists.usage(index) for index in range(3)],
    )


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["add", "add", "remove", "configure", "resize"]), st.integers(0, 10**6)),
        min_size=1,
        max_size=70,
    ),
    thresholds=st.sampled_from([(0.2, 1.0), (0.5, 1.0), (0.3, 0.6), (1.0, 1.0), (0.0, 0.5)]),
    slots_threshold=st.sampled_from([None, None, 2.0]),
    inclusive=st.booleans(),
)
def test_open_balance_moves_what_the_plain_one_moves(steps, thresholds, slots_threshold, inclusive):
    total = vector(user_slots=100, cpu=41.3, memory=2e12, network=10)

    def shares(pick: int) -> tuple[np.ndarray, np.ndarray]:
        # fair and demand shares per resource; some resources blocked (fair >= demand), sometimes all of them
        fair = np.array([(pick >> (3 * r)) % 8 / 40 for r in range(5)])
        demand = np.array([(pick >> (3 * r + 15)) % 8 / 40 for r in range(5)])
        return fair, demand

    threshold = None if slots_threshold is None else np.array([slots_threshold] + [np.inf] * 4)
    both = (PreemptibleLists(), _Plain())
    for lists in both:
        lists.inclusive = inclusive
        lists.configure(*shares(12345), total, threshold, *thresholds)
    step = Lockstep(both)
    for index, (kind, pick) in enumerate(steps):
        amounts = vector(
            user_slots=1, cpu=_CPUS[pick % len(_CPUS)], memory=_MEMORY[(pick // 9) % len(_MEMORY)]
        )
        if kind == "add" or not step.running:
            step.add(f"a{index}", amounts, index)
        elif kind == "remove":
            step.remove(pick)
        elif kind == "resize":
            step.resize(pick, amounts)
        else:
            step.reconfigure(*shares(pick), total, threshold, *thresholds)
        fast, plain = both
        assert _state(fast) == _state(plain)


@pytest.mark.parametrize("seed", [3, 15, 22])
def test_golden_traces_decide_alike_with_the_plain_balance(seed, monkeypatch):
    opened: list[int] = []
    balance_open = PreemptibleLists._balance_open

    def counted(self, left, bound, cumulative):
        opened.append(left)
        return balance_open(self, left, bound, cumulative)

    monkeypatch.setattr(PreemptibleLists, "_balance_open", counted)
    fast = json.dumps(golden_trace(seed, steps=60), sort_keys=True)
    assert opened  # the traces take the open path
    monkeypatch.setattr(PreemptibleLists, "_balance", PreemptibleLists._balance_plain)
    plain = json.dumps(golden_trace(seed, steps=60), sort_keys=True)
    assert fast == plain
