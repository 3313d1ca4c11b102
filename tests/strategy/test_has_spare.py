"""`RegularStage.has_spare` without a discount, written out for the five resources, answers as the loop it
replaced on any floats (zeros of either sign, negatives, infinities, NaN); with a discount it is the loop."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.resources import RESOURCE_COUNT
from pooltree.strategy.elements import _FIT_EPSILON
from pooltree.strategy.stages import RegularStage

special = st.sampled_from([0.0, -0.0, 1e-9, -1e-9, 1.0, 2.0, float("inf"), float("-inf"), float("nan")])
values = st.one_of(special, st.floats(-1e6, 1e6), st.floats(allow_nan=True, allow_infinity=True))
vectors = st.lists(values, min_size=RESOURCE_COUNT, max_size=RESOURCE_COUNT)


def reference(
    spare: list[float], limits: list[float], usage: list[float], discount: list[float] | None
) -> bool:
    """The loop as it was."""
    for r in range(RESOURCE_COUNT):
        if limits[r] <= 0:
            continue
        free = limits[r] - usage[r] + (discount[r] if discount is not None else 0.0)
        if free + _FIT_EPSILON < spare[r]:
            return False
    return True


def _stage(spare: list[float]) -> RegularStage:
    stage = RegularStage.__new__(RegularStage)
    stage.state = SimpleNamespace(spare=tuple(spare))  # type: ignore[assignment]
    return stage


@settings(max_examples=2000, deadline=None)
@given(spare=vectors, limits=vectors, usage=vectors, discount=st.one_of(st.none(), vectors))
def test_has_spare_answers_as_the_loop(
    spare: list[float], limits: list[float], usage: list[float], discount: list[float] | None
) -> None:
    answer = _stage(spare).has_spare(limits, usage, discount)
    assert type(answer) is bool
    assert answer == reference(spare, limits, usage, discount)
