"""`PreemptibleLists.configure` (written with ``map``, the total's inverse kept while the total is equal, the
open resources looked up by mask) sets every field the plain rule sets, bit for bit, through sequences of
configurations on one object; and `configure_lists`, which compares the lists' state before and after a
rebalance only when the rebalance says it moved an allocation, leaves the same lists, statuses and settled flags
as the rule that always compares."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.resources import RESOURCE_COUNT, vector
from pooltree.strategy import Allocation, PreemptibleLists
from pooltree.strategy.elements import OperationRuntime, _lists_state
from pooltree.strategy.preemptible import _INF, EPSILON
from pooltree.strategy.priorities import configure_lists


class _Plain(PreemptibleLists):
    """The lists with the configure before this change (generators, every field made anew)."""

    __slots__ = ()

    def configure(
        self, fair_share, demand_share, total, non_preemptible_threshold, aggressive_threshold, threshold
    ):
        self.fair_share = tuple(float(x) for x in fair_share)
        demand = tuple(float(x) for x in demand_share)
        self.blocked = tuple(f >= d for f, d in zip(self.fair_share, demand, strict=True))
        self.total = tuple(float(x) for x in total)
        self._inverse_total = tuple(1.0 / t if t > 0 else 0.0 for t in self.total)
        self._all_blocked = all(self.blocked)
        self.non_preemptible_threshold = (
            None if non_preemptible_threshold is None else tuple(float(x) for x in non_preemptible_threshold)
        )
        self.aggressive_threshold = aggressive_threshold
        self.threshold = threshold
        fs_is_demand = all(abs(f - d) <= EPSILON for f, d in zip(self.fair_share, demand, strict=True))
        demand_is_zero = all(d <= EPSILON for d in demand)
        self.preemptible = not (fs_is_demand and not demand_is_zero)
        self._open = tuple(r for r, is_blocked in enumerate(self.blocked) if not is_blocked)
        self._open_only = self.non_preemptible_threshold is None and not self._all_blocked
        self._aggressive_bound = tuple(f * aggressive_threshold for f in self.fair_share)
        self._normal = (
            tuple(f * threshold for f in self.fair_share) if self.preemptible else (_INF,) * RESOURCE_COUNT
        )


_FIELDS = (
    "fair_share",
    "blocked",
    "total",
    "_inverse_total",
    "_all_blocked",
    "non_preemptible_threshold",
    "aggressive_threshold",
    "threshold",
    "preemptible",
    "_open",
    "_open_only",
    "_aggressive_bound",
    "_normal",
)
"""Every field `configure` sets."""

_VALUES = (
    0.0,
    -0.0,
    1e-300,
    EPSILON / 2,
    EPSILON,
    2 * EPSILON,
    0.1,
    1.0 / 3.0,
    0.5,
    1.0,
    2.0,
    7,
    math.inf,
    math.nan,
)


def _fields(lists: PreemptibleLists) -> str:
    """The fields as text: ``repr`` tells -0.0 from 0.0 and shows a NaN as itself."""
    return repr([(name, getattr(lists, name)) for name in _FIELDS])


def _vector(values: list[Any], form: str) -> Any:
    if form == "array":
        return np.array(values, dtype=float)
    if form == "list":
        return list(values)
    return tuple(values)


_vectors = st.tuples(
    st.lists(st.sampled_from(_VALUES), min_size=RESOURCE_COUNT, max_size=RESOURCE_COUNT),
    st.sampled_from(["tuple", "list", "array"]),
)


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            _vectors,
            _vectors,
            st.one_of(st.just(None), _vectors),  # a total of None: the previous step's again
            st.one_of(st.just(None), _vectors),
            st.sampled_from([(0.2, 1.0), (0.5, 0.8), (0.0, 0.0), (1.0, math.inf)]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_configure_sets_the_fields_the_plain_rule_sets(steps):
    lists, plain = PreemptibleLists(), _Plain()
    total: Any = (100.0, 10.0, 1e12, 10.0, 1.0)
    for fair, demand, new_total, threshold, (aggressive, normal) in steps:
        if new_total is not None:
            total = _vector(*new_total)
        arguments = (
            _vector(*fair),
            _vector(*demand),
            total,
            None if threshold is None else _vector(*threshold),
            aggressive,
            normal,
        )
        lists.configure(*arguments)
        plain.configure(*arguments)
        assert _fields(lists) == _fields(plain)


def _reference_configure_lists(state: Any, element: Any) -> None:
    """`configure_lists` before this change: the state compared after every rebalance."""
    config = state.config
    runtime = element.op
    key = (
        element.fair_share,
        element.demand_share,
        state.total,
        element.threshold_key,
        config.aggressive_preemption_satisfaction_threshold,
        config.preemption_satisfaction_threshold,
    )
    lists = runtime.lists
    if key != runtime.lists_key:
        lists.configure(*key)
        runtime.lists_key = key
        runtime.lists_settled = False
    elif runtime.lists_settled:
        return
    before = _lists_state(lists)
    lists.rebalance()
    runtime.lists_settled = _lists_state(lists) == before


_CPUS = (0.1, 1.0 / 3.0, 0.7, 1.0, 2.0, 3.3)


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["add", "add", "remove", "resize", "configure", "again"]), st.integers(0, 10**6)
        ),
        min_size=1,
        max_size=60,
    ),
    thresholds=st.sampled_from([(0.2, 1.0), (0.5, 1.0), (0.3, 0.6), (0.0, 0.5)]),
    inclusive=st.booleans(),
)
def test_configure_lists_settles_as_the_rule_that_always_compares(steps, thresholds, inclusive):
    total = tuple(vector(user_slots=100, cpu=41.3, memory=2e12, network=10).tolist())
    config = SimpleNamespace(
        aggressive_preemption_satisfaction_threshold=thresholds[0],
        preemption_satisfaction_threshold=thresholds[1],
    )
    state = SimpleNamespace(config=config, total=total)
    runtimes = [OperationRuntime("op", controller=None), OperationRuntime("op", controller=None)]  # type: ignore[arg-type]
    elements = [
        SimpleNamespace(op=runtime, fair_share=None, demand_share=None, threshold_key=None)
        for runtime in runtimes
    ]
    allocations: list[list[Allocation]] = [[], []]
    for runtime in runtimes:
        runtime.lists.inclusive = inclusive
    for index, (kind, pick) in enumerate(steps):
        if kind == "add" or (kind in ("remove", "resize") and not allocations[0]):
            cpu = _CPUS[pick % len(_CPUS)]
            for side in range(2):
                allocation = Allocation(f"a{index}", "op", vector(user_slots=1, cpu=cpu), start_time=index)
                runtimes[side].lists.add(allocation)
                allocations[side].append(allocation)
                runtimes[side].lists_settled = False  # as the strategy marks a start
        elif kind == "remove":
            at = pick % len(allocations[0])
            for side in range(2):
                assert runtimes[side].lists.remove(allocations[side].pop(at))
                runtimes[side].lists_settled = False
        elif kind == "resize":
            at = pick % len(allocations[0])
            for side in range(2):
                runtimes[side].lists.update_usage(
                    allocations[side][at], vector(user_slots=1, cpu=_CPUS[pick % 5])
                )
                runtimes[side].lists_settled = False
        else:
            if kind == "configure":  # new shares: every fifth pick leaves a resource blocked
                fair = tuple((pick >> (3 * r)) % 8 / 40 for r in range(RESOURCE_COUNT))
                demand = tuple((pick >> (3 * r + 15)) % 8 / 40 for r in range(RESOURCE_COUNT))
                for element in elements:
                    element.fair_share, element.demand_share = fair, demand
            if elements[0].fair_share is None:
                continue
            configure_lists(state, elements[0])  # type: ignore[arg-type]
            _reference_configure_lists(state, elements[1])
        new, reference = runtimes
        assert new.lists_settled == reference.lists_settled, index
        assert new.lists_key == reference.lists_key
        assert [(a.id, a.preemption_status, a.start_order) for a in new.lists] == [
            (a.id, a.preemption_status, a.start_order) for a in reference.lists
        ]
        assert repr(_lists_state(new.lists)) == repr(_lists_state(reference.lists))
