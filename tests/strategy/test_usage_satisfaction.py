"""`shares.usage_satisfaction_ratio` (an operation's key at every start and finish) is
``local_satisfaction_ratio(share_floats(usage, total), fair_share, blocked)`` bit for bit on every branch: a zero
fair share, usage above it, every resource blocked, some blocked; totals of zero, negative and NaN included."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.strategy import shares

# small grids make ties, zeros and equalities (the branch boundaries) common; wide floats make rounding differ
_grid = st.sampled_from([0.0, 0.0, -0.0, 1e-10, 0.05, 0.1, 0.2, 0.25, 0.3, 0.5, 1.0, 3.0])
_value = st.one_of(_grid, st.floats(0.0, 1e12, allow_nan=False), st.floats(-1.0, 2.0, allow_nan=False))
_vector = st.lists(_value, min_size=5, max_size=5)
_total = st.lists(st.one_of(_grid, st.floats(-2.0, 1e13), st.just(float("nan"))), min_size=5, max_size=5)
_blocked = st.lists(st.booleans(), min_size=5, max_size=5).map(tuple)


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


@settings(max_examples=1500, deadline=None)
@given(usage=_vector, total=_total, fair=_vector, blocked=_blocked, all_blocked=st.booleans())
def test_usage_satisfaction_ratio_is_the_two_step_ratio(
    usage: list[float], total: list[float], fair: list[float], blocked: tuple[bool, ...], all_blocked: bool
) -> None:
    if all_blocked:
        blocked = (True,) * 5
    fused = shares.usage_satisfaction_ratio(usage, tuple(total), tuple(fair), blocked)
    two_step = shares.local_satisfaction_ratio(shares.share_floats(usage, tuple(total)), tuple(fair), blocked)
    assert _bits(fused) == _bits(two_step)
