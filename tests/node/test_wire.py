"""The heartbeat wire module: what the node builds, the scheduler parses; the fast resource parse agrees with
``parse_resources`` (values and the field named in errors)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pooltree.errors import ConfigError
from pooltree.node import wire
from pooltree.resources import parse_resources


def test_built_heartbeat_parses_back() -> None:
    running = wire.running_job("j1", "op1", "main", start_time=1.0, resource_usage={"cpu": 1, "memory": 5})
    finished = wire.finished_job("j0", "op1", "main", "failed", 0.5, 0.9, exit_code=3, error={"code": 1})
    data = wire.heartbeat(
        "n1",
        sequence=1,
        time=2.0,
        resource_limits={"cpu": 4, "user_slots": 4},
        resource_usage={"cpu": 1},
        memory_limit=100,
        memory_usage=5,
        memory_meter="psutil",
        running_jobs=[running],
        finished_jobs=[finished],
        tags=["gpu"],
    )
    parsed = wire.parse_heartbeat(data)
    assert parsed.address == "n1" and parsed.tags == frozenset({"gpu"})
    assert [r.job_id for r in parsed.running] == ["j1"] and parsed.running[0].resource_usage[1] == 1.0
    assert parsed.finished[0].exit_code == 3 and parsed.finished[0].state == "failed"


def test_response_is_split_and_checked_by_field() -> None:
    body, control = wire.split_response(
        wire.response(start=[], preempt=[], abort=[], acknowledge=["j"], heartbeat_period=2.0)
    )
    assert control == wire.ResponseControl(2.0, False) and body[wire.ACKNOWLEDGE] == ["j"]
    with pytest.raises(ConfigError) as error:
        wire.split_response({wire.SCHEDULING_SKIPPED: "yes"})
    assert error.value.path == "response.scheduling_skipped"
    with pytest.raises(ConfigError) as error:
        wire.split_response({"start": [], "surprise": 1})
    assert error.value.path == "response.surprise"
    with pytest.raises(ConfigError) as error:
        wire.split_response({"abort": {}})
    assert error.value.path == "response.abort"
    _, control = wire.split_response({wire.HEARTBEAT_URL: "http://127.0.0.1:8001"})
    assert control.heartbeat_url == "http://127.0.0.1:8001"
    with pytest.raises(ConfigError) as error:
        wire.split_response({wire.HEARTBEAT_URL: "file:///etc/passwd"})
    assert error.value.path == "response.heartbeat_url"


amounts = st.one_of(
    st.integers(-3, 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.sampled_from(["1Gi", "x", None]),
)
maps = st.dictionaries(
    st.sampled_from(["user_slots", "cpu", "gpu", "memory", "network", "user_memory", "disk"]), amounts
)


@given(value=maps)
def test_fast_resource_parse_agrees_with_parse_resources(value: dict) -> None:
    try:
        expected = parse_resources(value, "x")
    except ConfigError as error:
        with pytest.raises(ConfigError) as raised:
            wire._resources(value, "x")
        assert raised.value.path == error.path
        return
    got = wire._resources(value, "x")
    assert np.array_equal(got, expected) and not any(math.isnan(v) for v in got)


values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**10),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "j1", "main"]),
    st.just({}),
    st.just([]),
)
running_entries = st.one_of(
    values,
    st.fixed_dictionaries(
        {},
        optional={
            "job_id": values,
            "operation_id": values,
            "task_name": values,
            "resource_usage": st.one_of(values, maps),
            "memory_usage": values,
            "statistics": st.one_of(values, st.just({"a": 1})),
        },
    ),
)


@given(entry=running_entries)
def test_fast_running_entry_agrees_with_the_checked_path(entry: object) -> None:
    try:
        expected = wire._running_report_checked(entry, "running_jobs[0]")
    except ConfigError as error:
        with pytest.raises(ConfigError) as raised:
            wire._running_report(entry, 0)
        assert raised.value.path == error.path
        return
    got = wire._running_report(entry, 0)
    assert (got.job_id, got.operation_id, got.task_name, got.memory_usage, got.statistics) == (
        expected.job_id,
        expected.operation_id,
        expected.task_name,
        expected.memory_usage,
        expected.statistics,
    )
    assert np.array_equal(got.resource_usage, expected.resource_usage)


_FINISHED_FIELDS = {
    "job_id": values,
    "operation_id": values,
    "task_name": values,
    "state": st.one_of(values, st.sampled_from(["completed", "failed", "aborted", "running"])),
    "start_time": values,
    "finish_time": values,
    "exit_code": values,
    "error": st.one_of(values, st.just({"code": 1, "message": "m"})),
    "stderr": st.one_of(values, st.sampled_from(["out", "\u00e9"])),
    "stderr_size": values,
    "abort_reason": values,
    "interruption_reason": values,
    "statistics": st.one_of(values, st.just({"a": {"b": 1}})),
    "gpu_devices": st.one_of(values, st.just([0, 1])),
}
finished_entries = st.one_of(
    values,
    st.fixed_dictionaries({}, optional=_FINISHED_FIELDS),
    # a sound entry with a few fields dropped or replaced: most reach the direct read
    st.builds(
        lambda changes, dropped: {
            key: value
            for key, value in {
                **wire.finished_job("j1", "op1", "main", "completed", 1.0, 2.5, exit_code=0),
                **dict(changes),
            }.items()
            if key not in dropped
        },
        st.lists(
            st.sampled_from(sorted(_FINISHED_FIELDS)).flatmap(
                lambda key: st.tuples(st.just(key), _FINISHED_FIELDS[key])
            ),
            max_size=2,
        ),
        st.sets(st.sampled_from(sorted(_FINISHED_FIELDS)), max_size=2),
    ),
)


@given(entry=finished_entries)
def test_fast_finished_entry_agrees_with_the_checked_path(entry: object) -> None:
    """A finished entry read directly gives the checked path's report, or its error naming the same field."""
    _assert_finished_reads_alike(entry)


_SAMPLE_VALUES = (
    None,
    True,
    0,
    3,
    -2,
    2.5,
    math.nan,
    math.inf,
    "",
    "j1",
    "completed",
    "\u00e9",
    {},
    [],
    {"a": 1},
    [0],
)


def _assert_finished_reads_alike(entry: object) -> None:
    try:
        expected = wire._finished_report_checked(entry, "finished_jobs[0]")
    except ConfigError as error:
        with pytest.raises(ConfigError) as raised:
            wire._finished_report(entry, 0)
        assert raised.value.path == error.path
        return
    got = wire._finished_report(entry, 0)
    assert got == expected
    assert [type(getattr(got, name)) for name in ("start_time", "finish_time", "stderr_size")] == [
        type(getattr(expected, name)) for name in ("start_time", "finish_time", "stderr_size")
    ]


def test_fast_finished_entry_agrees_with_the_checked_path_field_by_field() -> None:
    """Every field of a sound finished entry dropped or set to each sample value, one at a time: the direct read
    gives the checked path's report or its error naming the same field."""
    base = wire.finished_job("j1", "op1", "main", "completed", 1.0, 2.5, exit_code=0, stderr="x")
    _assert_finished_reads_alike(base)
    for key in _FINISHED_FIELDS:
        _assert_finished_reads_alike({name: value for name, value in base.items() if name != key})
        for value in _SAMPLE_VALUES:
            _assert_finished_reads_alike({**base, key: value})


def test_job_gpu_devices_parse_and_bad_lists_name_the_field() -> None:
    """A job's GPU devices (issue 30) travel on running and finished entries; a malformed list names its field."""
    running = wire.running_job(
        "j1", "op", "main", start_time=0.0, resource_usage={"gpu": 2}, gpu_devices=[3, 1]
    )
    done = wire.finished_job("j2", "op", "main", "completed", 0.0, 1.0, gpu_devices=[0])
    request = wire.parse_heartbeat(
        wire.heartbeat(
            "n",
            sequence=1,
            time=0.0,
            resource_limits={"gpu": 4},
            resource_usage={},
            memory_limit=0,
            memory_usage=0,
            memory_meter="psutil",
            running_jobs=[running, wire.running_job("j3", "op", "main", start_time=0.0, resource_usage={})],
            finished_jobs=[done],
        )
    )
    assert [job.gpu_devices for job in request.running] == [(3, 1), ()]
    assert request.finished[0].gpu_devices == (0,)
    for bad in ([1, 1], [-1], ["0"], [True], 5):
        entry = dict(running, gpu_devices=bad)
        with pytest.raises(ConfigError) as error:
            wire.parse_heartbeat({"node_address": "n", "resource_limits": {}, "running_jobs": [entry]})
        assert "running_jobs[0].gpu_devices" in str(error.value)


def test_free_form_maps_nest_at_most_the_yson_limit() -> None:
    """Statistics, errors and alert attributes are kept as sent, so their nesting is bounded where they are
    parsed (the heartbeat is no longer walked whole after decoding); the error names the field."""
    deep = {"x": [[[[[[]]]]]]}
    for _ in range(wire.MAX_NESTING):
        deep = {"x": deep}
    running = wire.running_job(
        "j1", "op1", "main", start_time=1.0, resource_usage={"cpu": 1}, statistics=deep
    )
    finished = wire.finished_job("j0", "op1", "main", "failed", 0.5, 0.9, error={"attributes": deep})
    base = {"resource_limits": {"cpu": 1}, "node_address": "n1"}
    for data, path in (
        ({**base, "running_jobs": [running]}, "running_jobs[0].statistics"),
        ({**base, "finished_jobs": [finished]}, "finished_jobs[0].error"),
        ({**base, "alerts": [{"message": "m", "attributes": deep}]}, "alerts[0].attributes"),
    ):
        with pytest.raises(ConfigError) as raised:
            wire.parse_heartbeat(wire.decode(wire.encode(data)))
        assert raised.value.path == path
    shallow = {"x": {"y": [1, 2, {"z": 3}]}}
    running = wire.running_job(
        "j1", "op1", "main", start_time=1.0, resource_usage={"cpu": 1}, statistics=shallow
    )
    parsed = wire.parse_heartbeat({**base, "running_jobs": [running]})
    assert parsed.running[0].statistics == shallow


def test_the_codec_refuses_what_is_not_json() -> None:
    for body in (b"[NaN]", b'["\\ud800"]', b'"\xff"', b"{", b"[" * 2000 + b"]" * 2000):
        with pytest.raises(ValueError):
            wire.decode(body)
    value = {"a": np.float64(1.5), "b": [np.int64(2)], "c": "\u00e9"}
    assert wire.decode(wire.encode(value)) == {"a": 1.5, "b": [2], "c": "\u00e9"}


@given(steps=st.lists(st.lists(running_entries, max_size=4), min_size=1, max_size=6))
def test_remembered_running_reports_are_what_reading_gives(steps: list[list[object]]) -> None:
    """``RunningReports`` reuses the last report of an unchanged entry: each heartbeat's reports (or its error
    path) are those of reading every entry afresh, over a sequence of heartbeats of one node."""
    reports = wire.RunningReports()
    stable = wire.running_job("j-stable", "op1", "main", start_time=1.0, resource_usage={"cpu": 1})
    for entries in steps:
        entries = [stable, *entries, dict(stable)]
        try:
            expected = [wire._running_report(entry, index) for index, entry in enumerate(entries)]
        except ConfigError as error:
            with pytest.raises(ConfigError) as raised:
                reports.parse("n1", entries)
            assert raised.value.path == error.path
            continue
        got = reports.parse("n1", entries)
        assert got == expected


def test_an_unhashable_job_id_is_refused_by_field() -> None:
    reports = wire.RunningReports()
    with pytest.raises(ConfigError) as raised:
        reports.parse("n1", [{"job_id": ["x"], "operation_id": "o"}])
    assert raised.value.path == "running_jobs[0].job_id"


@pytest.mark.parametrize(
    "limits",
    [{"cpu": -1}, {"cpu": 1e309}, {"memory": "-1Gi"}, {"cpu": 2, "user_slots": -0.5}, {"cpu": True}],
)
def test_heartbeat_limits_must_be_finite_and_non_negative(limits: dict[str, object]) -> None:
    """Plain limit maps are read without ``parse_resources`` (their numbers are checked as they are read); every
    other map goes through it and the finiteness check: refused either way, naming ``resource_limits``."""
    with pytest.raises(ConfigError) as raised:
        wire.parse_heartbeat({"node_address": "n1", "resource_limits": limits})
    assert raised.value.path.startswith("resource_limits")


def test_plain_heartbeat_limits_read_as_parse_resources_reads_them() -> None:
    limits = {"cpu": 3.14159, "user_slots": 4, "memory": 2.6 * 2**30, "gpu": 0}
    parsed = wire.parse_heartbeat({"node_address": "n1", "resource_limits": limits})
    assert parsed.resource_limits.tolist() == parse_resources(limits, "resource_limits").tolist()
