"""`shares.fits_floats`, written out for the five resources, answers as the loop it replaced on any floats
(signed zeros, infinities, NaN) and any epsilon."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.resources import RESOURCE_COUNT
from pooltree.strategy.shares import fits_floats

special = st.sampled_from([0.0, -0.0, 1e-9, -1e-9, 1.0, float("inf"), float("-inf"), float("nan")])
values = st.one_of(special, st.floats(-1e3, 1e3), st.floats(allow_nan=True, allow_infinity=True))
vectors = st.lists(values, min_size=RESOURCE_COUNT, max_size=RESOURCE_COUNT)


def reference(amounts: list[float], available: list[float], epsilon: float = 1e-9) -> bool:
    """The loop as it was."""
    for r in range(RESOURCE_COUNT):  # noqa: SIM110
        if amounts[r] > available[r] + epsilon:
            return False
    return True


@settings(max_examples=2000, deadline=None)
@given(amounts=vectors, available=vectors, epsilon=st.one_of(st.none(), values))
def test_fits_floats_answers_as_the_loop(
    amounts: list[float], available: list[float], epsilon: float | None
) -> None:
    if epsilon is None:
        answer, expected = fits_floats(amounts, available), reference(amounts, available)
    else:
        answer, expected = fits_floats(amounts, available, epsilon), reference(amounts, available, epsilon)
    assert type(answer) is bool
    assert answer == expected
    assert fits_floats(tuple(amounts), available) == reference(amounts, available)
