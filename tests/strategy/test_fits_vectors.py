"""`elements._fits` (a node's usage within its limits, every heartbeat), written out for the five resources,
answers as the loop it replaced on any floats (signed zeros, infinities, NaN)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.resources import RESOURCE_COUNT
from pooltree.strategy.elements import _FIT_EPSILON, _fits

special = st.sampled_from([0.0, -0.0, 1e-9, -1e-9, 1.0, float("inf"), float("-inf"), float("nan")])
values = st.one_of(special, st.floats(-1e3, 1e3), st.floats(allow_nan=True, allow_infinity=True))
vectors = st.lists(values, min_size=RESOURCE_COUNT, max_size=RESOURCE_COUNT)


def reference(usage: np.ndarray, limits: np.ndarray) -> bool:
    """The loop as it was."""
    limits_list = limits.tolist()
    for r, used in enumerate(usage.tolist()):  # noqa: SIM110
        if not used <= limits_list[r] + _FIT_EPSILON:
            return False
    return True


@settings(max_examples=2000, deadline=None)
@given(usage=vectors, limits=vectors)
def test_fits_answers_as_the_loop(usage: list[float], limits: list[float]) -> None:
    usage_vector, limits_vector = np.array(usage, dtype=float), np.array(limits, dtype=float)
    answer = _fits(usage_vector, limits_vector)
    assert type(answer) is bool
    assert answer == reference(usage_vector, limits_vector)
