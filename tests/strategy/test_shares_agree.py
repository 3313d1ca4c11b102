"""The strategy's float fast path for local satisfaction agrees with the fair-share update's numpy rule.

pooltree/fairshare/status.py holds the one definition of the §c/§e.2 rules; pooltree/strategy/shares.py keeps a
float twin of local_satisfaction_ratio for the heartbeat hot path. These properties pin them together on every
branch (zero fair share, usage above fair share, all resources blocked, some blocked).
"""

import struct

import numpy as np
from golden_trace import GoldenScenario
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.fairshare import status
from pooltree.strategy import shares
from pooltree.strategy.elements import _FIT_EPSILON, _fits

# small grids make ties, zeros and equalities (the branch boundaries) common
_value = st.sampled_from([0.0, 0.0, 1e-10, 0.05, 0.1, 0.2, 0.25, 0.3, 0.5, 1.0])
_vector = st.lists(_value, min_size=5, max_size=5)


@settings(max_examples=300, deadline=None)
@given(usage=_vector, fair=_vector, demand=_vector)
def test_local_satisfaction_ratio_fast_path_equals_fairshare_rule(usage, fair, demand):
    blocked = shares.blocked_mask(fair, demand)
    fast = shares.local_satisfaction_ratio(usage, fair, blocked)
    rule = status.local_satisfaction_ratio(np.array(fair), np.array(usage), np.array(demand))
    assert fast == rule


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(_vector, _vector, _vector), min_size=1, max_size=6))
def test_vectorised_rule_equals_per_element_calls(rows):
    """The strategy evaluates the status rule for all elements at once; row by row gives the same answers."""
    fair = np.array([r[0] for r in rows])
    usage = np.array([r[1] for r in rows])
    demand = np.array([r[2] for r in rows])
    stacked = np.atleast_1d(status.is_below_fair_share(fair, usage, demand, np.full(len(rows), 0.8)))
    for index in range(len(rows)):
        single = status.is_below_fair_share(fair[index], usage[index], demand[index], 0.8)
        assert bool(stacked[index]) == single


def test_operations_keep_their_satisfaction_current_through_heartbeats():
    """Preemptive stages read an operation's cached ``sat``: it must equal a fresh computation at all times."""
    scenario = GoldenScenario(seed=5)
    scheduler = scenario.scheduler
    checked = 0
    for step in range(25):
        scenario.run_step(step)
        for element in scheduler.state.elements.values():
            if element.is_op:
                assert element.sat == scheduler.heaps.local_satisfaction(element), element.id
                checked += 1
    assert checked > 100


_bulk_value = st.sampled_from(
    [0.0, 0.0, -0.0, 1e-10, 5e-324, 0.05, 0.1, 0.25, 0.3, 1.0, 3.0, 1e300, -1.0, float("inf"), float("nan")]
)
_bulk_vector = st.lists(_bulk_value, min_size=5, max_size=5)
_total = st.lists(
    st.sampled_from([0.0, 0.0, 1.0, 4.0, 1e-300, 1e12, -1.0, float("nan")]), min_size=5, max_size=5
)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.tuples(_bulk_vector, _bulk_vector, st.lists(st.booleans(), min_size=5, max_size=5)),
        min_size=1,
        max_size=12,
    ),
    total=_total,
)
def test_bulk_satisfaction_ratios_are_the_per_row_floats(rows, total):
    """`satisfaction_ratios` (the incremental publish's bulk path) gives the per-row loop's floats bit for bit,
    also for zeros of either sign, NaN, infinities, overflowing and underflowing ratios."""
    usage = [row[0] for row in rows]
    fair = [tuple(row[1]) for row in rows]
    blocked = [tuple(row[2]) for row in rows]
    bulk = shares.satisfaction_ratios(usage, fair, blocked, tuple(total))
    for index, (u, f, b) in enumerate(zip(usage, fair, blocked, strict=True)):
        one = shares.local_satisfaction_ratio(
            [x / t if t > 0 else 0.0 for x, t in zip(u, total, strict=True)], f, b
        )
        assert type(bulk[index]) is float
        assert struct.pack("<d", bulk[index]) == struct.pack("<d", one), (u, f, b, total)


_edge = st.sampled_from([0.0, -0.0, 1e-9, 2e-9, 1.0, 16.0, 16.000000001, 1e300, float("inf"), float("nan")])


@settings(max_examples=300, deadline=None)
@given(usage=st.lists(_edge, min_size=5, max_size=5), limits=st.lists(_edge, min_size=5, max_size=5))
def test_node_fit_in_floats_equals_numpy(usage, limits):
    """`elements._fits` (every heartbeat's overcommit check) in Python floats answers as numpy's vector test."""
    used, limit = np.array(usage), np.array(limits)
    assert _fits(used, limit) == bool((used <= limit + _FIT_EPSILON).all())


@settings(max_examples=200, deadline=None)
@given(a=st.lists(_edge, min_size=5, max_size=5), b=st.lists(_edge, min_size=5, max_size=5))
def test_unrolled_sums_equal_the_zipped_ones(a, b):
    """`plus_floats` / `minus_floats` (the preemptible lists' prefix sums) give the zipped loops' floats."""
    assert repr(shares.plus_floats(a, b)) == repr([x + y for x, y in zip(a, b, strict=True)])
    assert repr(shares.minus_floats(a, b)) == repr([x - y for x, y in zip(a, b, strict=True)])
    # a usage share (`StrategyState.usage_share`, every re-keyed operation): a total of 0 or NaN gives 0.0
    plain = [x / t if t > 0 else 0.0 for x, t in zip(a, b, strict=True)]
    assert repr(shares.share_floats(a, b)) == repr(plain)


def _zipped_local_satisfaction(usage_share, fair_share, blocked):
    """`shares.local_satisfaction_ratio` as it was written before it was written out per resource (loops over
    ``zip``): the reference its five-resource form must give bit for bit."""
    if max(fair_share) <= shares.SMALL_EPSILON:
        return shares.INFINITE_SATISFACTION_RATIO
    for u, f in zip(usage_share, fair_share, strict=True):
        if u > f:
            break
    else:
        if all(blocked):
            worst = shares.INFINITE_SATISFACTION_RATIO
            for u, f in zip(usage_share, fair_share, strict=True):
                ratio = 1.0 if f == 0.0 else u / f
                if ratio < worst:
                    worst = ratio
            return worst
        best = 0.0
        for u, f, is_blocked in zip(usage_share, fair_share, blocked, strict=True):
            if not is_blocked and f != 0.0:
                ratio = u / f
                if ratio > best:
                    best = ratio
        return best
    best = 0.0
    for u, f in zip(usage_share, fair_share, strict=True):
        if f == 0.0:
            ratio = 0.0 if u == 0.0 else shares.INFINITE_SATISFACTION_RATIO
        else:
            ratio = u / f
        if ratio > best:
            best = ratio
    return min(best, shares.INFINITE_SATISFACTION_RATIO)


@settings(max_examples=1500, deadline=None)
@given(
    usage=_bulk_vector,
    fair=_bulk_vector,
    blocked=st.one_of(st.just([True] * 5), st.lists(st.booleans(), min_size=5, max_size=5)),
    as_tuples=st.booleans(),
)
def test_local_satisfaction_written_out_equals_the_zipped_loops(usage, fair, blocked, as_tuples):
    """The five-resource `local_satisfaction_ratio` gives the zipped loops' float on every branch, bit for bit,
    also for zeros of either sign, NaN, infinities, negative, overflowing and underflowing values (every resource
    blocked drawn often: that branch needs it)."""
    if as_tuples:  # as the strategy hands them in: element shares and masks are tuples, usage shares lists
        fair, blocked = tuple(fair), tuple(blocked)
    expected = _zipped_local_satisfaction(usage, fair, blocked)
    found = shares.local_satisfaction_ratio(usage, fair, blocked)
    assert type(found) is type(expected)
    assert struct.pack("<d", found) == struct.pack("<d", expected), (usage, fair, blocked)
