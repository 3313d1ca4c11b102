"""An operation's own starvation and non-preemptible settings (issue 27): YTsaurus lets the spec only make its
pool's values more conservative (``TPoolTreeOperationElement::UpdateRecursiveAttributes``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pooltree.config import OperationSpec
from pooltree.config.operation_preemption import (
    operation_non_preemptible_threshold,
    operation_starvation_timeout,
    operation_starvation_tolerance,
    specified_non_preemptible_threshold,
    specified_starvation_timeout,
    specified_starvation_tolerance,
)
from pooltree.config.support import unsupported_spec_options
from pooltree.errors import ConfigError

INF = math.inf
SPEC = {
    "fair_share_starvation_tolerance": 0.5,
    "fair_share_starvation_timeout": 60000,
    "non_preemptible_resource_usage_threshold": {"cpu": 2, "user_slots": 7},
}


def test_spec_values_read_alike_from_the_model_and_a_plain_map() -> None:
    model = OperationSpec.parse(SPEC, "spec")
    for spec in (model, SPEC):
        assert specified_starvation_tolerance(spec) == 0.5
        assert specified_starvation_timeout(spec) == 60.0  # YTsaurus milliseconds
        assert list(specified_non_preemptible_threshold(spec)) == [7, 2, INF, INF, INF]
    assert specified_starvation_tolerance({}) is None and specified_starvation_timeout({}) is None
    assert specified_non_preemptible_threshold({}) is None
    assert list(specified_non_preemptible_threshold({"max_unpreemptible_job_count": 0})) == [
        0,
        INF,
        INF,
        INF,
        INF,
    ]
    # implemented now: neither unrecognized nor reported as unsupported
    assert model.unrecognized_spec() == {}
    assert unsupported_spec_options(SPEC, "spec") == []


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"fair_share_starvation_tolerance": 1.5}, "fair_share_starvation_tolerance"),
        ({"fair_share_starvation_timeout": "soon"}, "fair_share_starvation_timeout"),
        (
            {"non_preemptible_resource_usage_threshold": {"cpu": -1}},
            "non_preemptible_resource_usage_threshold",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_field(spec: dict, field: str) -> None:
    with pytest.raises(ConfigError) as error:
        OperationSpec.parse(spec, "spec")
    assert field in str(error.value)


def test_only_more_conservative_values_apply() -> None:
    assert operation_starvation_tolerance(0.8, None) == 0.8
    assert operation_starvation_tolerance(0.8, 0.5) == 0.5
    assert operation_starvation_tolerance(0.8, 0.95) == 0.8  # cannot starve earlier than its pool allows
    assert operation_starvation_timeout(30.0, None) == 30.0
    assert operation_starvation_timeout(30.0, 60.0) == 60.0
    assert operation_starvation_timeout(30.0, 5.0) == 30.0
    pool = np.array([6, 5, INF, INF, INF])
    own = np.array([7, 2, INF, 1e9, INF])
    # per resource: the spec's where the pool sets none or the spec's is lower
    assert list(operation_non_preemptible_threshold(pool, own)) == [6, 2, INF, 1e9, INF]
    assert list(operation_non_preemptible_threshold(None, own)) == list(own)
    assert operation_non_preemptible_threshold(pool, None) is pool
    assert operation_non_preemptible_threshold(None, np.full(5, INF)) is None
