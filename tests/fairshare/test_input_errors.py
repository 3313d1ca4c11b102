"""Bad input to the update names the element's field and the reason (the array-based input reader)."""

from __future__ import annotations

import numpy as np
import pytest

from pooltree.errors import ConfigError
from pooltree.fairshare import Operation, Pool, UpdateSettings, update_fair_share
from pooltree.resources import vector

TOTAL = vector(user_slots=10, cpu=10, memory=100)


def _run(*children: object) -> None:
    update_fair_share(
        Pool("<Root>", children=[Pool("p", children=list(children))]), TOTAL, UpdateSettings(), 0.0
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("op", "path", "reason"),
    [
        (Operation("o", demand=np.ones(4)), "operations.o.demand", "expected a vector of 5"),
        (Operation("o", usage=[1, 2, 3, 4, 5, 6]), "operations.o.usage", "expected a vector of 5"),  # type: ignore[arg-type]
        (Operation("o", demand=vector(cpu=-1)), "operations.o.demand", "non-negative"),
        (
            Operation("o", usage=vector(cpu=2), demand=vector(cpu=1)),
            "operations.o.demand",
            "demand must include usage",
        ),
        (Operation("o", weight=-1.0), "operations.o.weight", "non-negative finite"),
        (Operation("o", weight=float("nan")), "operations.o.weight", "non-negative finite"),
        (Operation("o", max_share_ratio=1.5), "operations.o.max_share_ratio", "[0, 1]"),
        (Operation("o", starvation_tolerance=-0.1), "operations.o.starvation_tolerance", "[0, 1]"),
        (
            Operation("o", specified_resource_limits=np.ones(3)),
            "operations.o.specified_resource_limits",
            "vector of 5",
        ),
    ],
)
def test_operation_fields(op: Operation, path: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        _run(op)
    assert info.value.path == path and reason in info.value.reason


def test_pool_fields() -> None:
    with pytest.raises(ConfigError) as info:
        _run(Pool("q", strong_guarantee_resources=np.ones(2)))
    assert info.value.path == "pools.q.strong_guarantee_resources"
    with pytest.raises(ConfigError) as info:
        _run(Pool("q", mode="lifo"))
    assert info.value.path == "pools.q.mode"
    with pytest.raises(ConfigError) as info:
        _run(Pool("q", mode="fifo", fifo_sort_parameters=("age",)))
    assert info.value.path == "pools.q.fifo_sort_parameters"
    with pytest.raises(ConfigError) as info:
        _run(Pool("q", mode="fifo", children=[Pool("r")]))
    assert info.value.path == "pools.q.mode" and "cannot contain pools" in info.value.reason
