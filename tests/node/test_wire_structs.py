"""The typed fast path of heartbeat decoding (``wire_structs.read_heartbeat``) gives what the plain path
(``wire.decode`` + ``wire.parse_heartbeat``) gives, or nothing: the plain path then answers, errors included. The
address read alone (``read_address``, what a node shard reads of a body it forwards) is the address of every body
that reads as a heartbeat, and whether such a body reports a finished job, looked at with it (``read_head``), is
what the decoding reads."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.errors import ConfigError
from pooltree.node import wire
from pooltree.node.wire_structs import KEPT_ENTRIES_SLACK, read_address, read_head, read_heartbeat
from pooltree.resources import RESOURCES
from pooltree.server.heartbeats import decode_heartbeat
from pooltree.server.protocol import YtError


def _body(value: Any) -> bytes:
    """JSON text of ``value`` (the standard library's: it writes integers past 64 bits, as a node could)."""
    return json.dumps(value).encode()


def _comparable(request: wire.HeartbeatRequest) -> tuple[Any, ...]:
    return (
        request.address,
        request.resource_limits.tolist(),
        [type(x) for x in request.resource_limits.tolist()],
        request.tags,
        request.running,
        [[type(x) for x in report.resource_usage] for report in request.running],
        request.finished,
        request.memory_meter,
        request.alerts,
    )


def _plain(body: bytes, reports: wire.RunningReports | None) -> tuple[Any, ...] | str:
    """What the plain path gives: the request, or the field its error names."""
    try:
        return _comparable(wire.parse_heartbeat(wire.decode(body), reports))
    except ConfigError as error:
        return error.path
    except (ValueError, RecursionError):
        return "not json"


def _assert_alike(body: bytes, fast: wire.RunningReports, plain: wire.RunningReports) -> None:
    expected = _plain(body, plain)
    if not isinstance(expected, str):  # a heartbeat that reads: its address read alone is its address
        assert read_address(body) == expected[0]
        # and whether it reports a finished job, looked at with the address, is what the decoding reads
        assert read_head(body) == (expected[0], bool(expected[6]))
    got = read_heartbeat(body, fast)
    if got is None:
        return  # the plain path answers it
    assert not isinstance(expected, str), f"the fast path took a heartbeat the plain path refuses: {expected}"
    assert _comparable(got) == expected


def _heartbeat(**changes: Any) -> dict[str, Any]:
    running = [
        wire.running_job(
            f"j{i}",
            "op1",
            "main",
            start_time=1.0,
            resource_usage={"cpu": 1.0, "user_slots": 1, "memory": 2**28},
            statistics={"user_job": {"max_memory": 5}} if i == 1 else None,
        )
        for i in range(3)
    ]
    finished = [wire.finished_job("j9", "op1", "main", "completed", 1.0, 2.5, exit_code=0, stderr="x")]
    data = wire.heartbeat(
        "n1",
        sequence=3,
        time=2.5,
        resource_limits={"cpu": 16, "user_slots": 16, "memory": 2**36, "network": 100.0},
        resource_usage={"cpu": 3.0},
        memory_limit=2**36,
        memory_usage=0,
        memory_meter="none",
        running_jobs=running,
        finished_jobs=finished,
    )
    data.update(changes)
    return data


def test_the_common_heartbeat_takes_the_fast_path_and_reads_alike() -> None:
    body = _body(_heartbeat(tags=["a"], alerts=[{"message": "m", "code": 2, "attributes": {"x": 1}}]))
    assert read_heartbeat(body) is not None
    _assert_alike(body, wire.RunningReports(), wire.RunningReports())


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


SAMPLES: tuple[Any, ...] = (
    None,
    True,
    0,
    7,
    -1,
    2.5,
    2**64,
    -(2**63) - 1,
    1e308,
    "",
    "x",
    "completed",
    {},
    [],
    {"a": 1},
    [0, 1],
    [[[[{"deep": 1}]]]],
    _nested(wire.MAX_NESTING + 1),
)


def _entry_variants(entry: dict[str, Any], fields: list[str]) -> list[dict[str, Any]]:
    variants = []
    for key in fields:
        variants.append({name: value for name, value in entry.items() if name != key})
        variants.extend({**entry, key: value} for value in SAMPLES)
    return variants


RUNNING_FIELDS = ["job_id", "operation_id", "task_name", "resource_usage", "memory_usage", "statistics"]
RUNNING_FIELDS += ["gpu_devices"]
FINISHED_FIELDS = ["job_id", "operation_id", "task_name", "state", "start_time", "finish_time", "exit_code"]
FINISHED_FIELDS += ["error", "stderr", "stderr_size", "abort_reason", "interruption_reason", "statistics"]
FINISHED_FIELDS += ["gpu_devices"]
TOP_FIELDS = ["node_address", "resource_limits", "tags", "running_jobs", "finished_jobs", "memory_meter"]
TOP_FIELDS += ["alerts"]


def test_every_field_changed_alone_reads_alike_or_goes_the_plain_way() -> None:
    """Each field of the heartbeat, of a running and of a finished entry, dropped or set to each sample value
    (big integers, empty strings, wrong types, deep maps): the fast path gives the plain path's request or
    leaves the heartbeat to it."""
    base = _heartbeat()
    bodies = [_body({k: v for k, v in base.items() if k != key}) for key in TOP_FIELDS]
    bodies += [_body({**base, key: value}) for key in TOP_FIELDS for value in SAMPLES]
    for entry in _entry_variants(base["running_jobs"][1], RUNNING_FIELDS):
        bodies.append(_body({**base, "running_jobs": [base["running_jobs"][0], entry]}))
    for entry in _entry_variants(base["finished_jobs"][0], FINISHED_FIELDS):
        bodies.append(_body({**base, "finished_jobs": [entry]}))
    for usage in ({"cpu": 1, "disk": 2}, {"cpu": "1"}, {"memory": 2**65}, {"cpu": -1.0}, {"gpu": True}):
        entry = {**base["running_jobs"][0], "resource_usage": usage}
        bodies.append(_body({**base, "running_jobs": [entry], "resource_limits": usage}))
    for usage in ({"user_slots": 2**65}, {"user_slots": 2**63}, {"memory": 2**64 - 1}):
        entry = {**base["running_jobs"][0], "resource_usage": usage}
        bodies.append(_body({**base, "running_jobs": [entry]}))
    bodies += [
        b"[]",
        b"null",
        b'{"node_address": "n1"',
        b'{"node_address": "\\ud800", "resource_limits": {}}',
    ]
    bodies.append(b'{"node_address": "n1", "resource_limits": {"cpu": 1e999}}')
    bodies.append(b'{"node_address": "n1", "node_address": "n2", "resource_limits": {"cpu": 1, "cpu": 2}}')
    taken = 0
    for body in bodies:
        _assert_alike(body, wire.RunningReports(), wire.RunningReports())
        taken += read_heartbeat(body) is not None
    assert taken > len(bodies) // 8  # the comparison did reach the fast path's answers


statistics = st.one_of(st.none(), st.just({}), st.just({"a": {"b": 1}}), st.just({"a": 2**70}))
running_entries = st.builds(
    lambda job, operation, cpu, memory, stats: wire.running_job(
        job,
        operation,
        "main",
        start_time=0.0,
        resource_usage={"cpu": cpu},
        memory_usage=memory,
        statistics=stats,
    ),
    st.sampled_from(["j1", "j2", "j3"]),
    st.sampled_from(["op1", "op2"]),
    st.sampled_from([0, 1, 1.0, 2.5, 1e20]),
    st.sampled_from([0, 5, 2**40]),
    statistics,
)


limit_maps = st.sampled_from([{"cpu": 16, "user_slots": 16}, {"cpu": 8, "user_slots": 16}, {"cpu": 16.0}])


@settings(max_examples=60)
@given(steps=st.lists(st.tuples(st.lists(running_entries, max_size=4), limit_maps), min_size=1, max_size=6))
def test_remembered_entries_read_as_afresh(steps: list[tuple[list[dict[str, Any]], dict[str, Any]]]) -> None:
    """Over a node's sequence of heartbeats, the fast path's remembered running reports and limits are what
    reading each heartbeat afresh gives."""
    fast = wire.RunningReports()
    for entries, limits in steps:
        body = _body(_heartbeat(running_jobs=entries, resource_limits=limits))
        got = read_heartbeat(body, fast)
        assert got is not None
        assert _comparable(got) == _plain(body, None)


def test_a_remembered_entry_holds_no_view_of_its_body() -> None:
    """A body whose buffer is still viewed cannot grow: the kept entries copied their raw statistics."""
    body = bytearray(_body(_heartbeat()))
    reports = wire.RunningReports()
    assert read_heartbeat(body, reports) is not None  # type: ignore[arg-type]
    assert reports.struct_nodes["n1"]
    body.extend(b" ")  # raises BufferError while a Raw views it


def test_decode_heartbeat_answers_the_plain_errors() -> None:
    for body, field in (
        (_body(_heartbeat(node_address="")), ""),
        (_body(_heartbeat(resource_limits={"cpu": -1})), "resource_limits.cpu"),
        (b"[1]", "heartbeat"),
    ):
        with pytest.raises(YtError) as raised:
            decode_heartbeat(body, wire.RunningReports())
        assert raised.value.attributes["field"].startswith(field), raised.value.attributes
    assert math.isfinite(decode_heartbeat(_body(_heartbeat())).resource_limits[0])


AMOUNTS: tuple[Any, ...] = (
    0,
    1,
    3,
    0.0,
    -0.0,
    1.0,
    1.005,
    2.675,
    0.5,
    1.5,
    2.5,
    2**40,
    2**63,
    1e300,
    -1,
    -0.5,
)


def test_each_resource_amount_of_a_running_job_reads_alike_or_goes_the_plain_way() -> None:
    """A running job's usage is checked while decoding (known names, numbers from 0): every resource at each
    amount (rounding cases, signs, big integers, floats near the bounds), names unknown and sent twice, read as
    the plain path reads them, to the type of each amount, or are left to it."""
    base = _heartbeat()
    bodies = []
    for name in RESOURCES:
        for amount in AMOUNTS:
            entry = {**base["running_jobs"][0], "resource_usage": {"cpu": 1, name: amount}}
            bodies.append(_body({**base, "running_jobs": [entry]}))
    entry = json.dumps(base["running_jobs"][0])
    for usage in (
        '{"cpu": 1, "cpu": 2.5}',
        '{"memory": 1e999}',
        '{"cpu": 1, "disk": 0}',
        '{"cpu": null}',
        "[]",
    ):
        text = entry.replace(json.dumps(base["running_jobs"][0]["resource_usage"]), usage)
        bodies.append(
            _body({**base, "running_jobs": []}).replace(
                b'"running_jobs": []', f'"running_jobs": [{text}]'.encode()
            )
        )
    taken = 0
    for body in bodies:
        _assert_alike(body, wire.RunningReports(), wire.RunningReports())
        taken += read_heartbeat(body) is not None
    assert taken >= len(RESOURCES) * 10  # most amounts are taken by the fast path, and compared


@pytest.mark.parametrize(
    ("finished_text", "reported"),
    [
        (b"[]", False),
        (b"[ \n\t\r ]", False),
        (b"null", False),
        (None, False),
        (b'[\n{"job_id": "j9"}]', True),
        (b"[0]", True),
        (b'[{"job_id": "j9"}], "finished_jobs": []', False),  # the last of duplicate keys, as both decodings
        (b'[], "finished_jobs": [{"job_id": "j9"}]', True),
    ],
)
def test_a_finished_job_is_seen_with_the_address_as_its_text_says(
    finished_text: bytes | None, reported: bool
) -> None:
    """``read_head`` looks at the text of ``finished_jobs`` only: a list with an entry is a report of finished
    jobs (one that does not read as such is refused by either decoding: ``_assert_alike`` checks the ones that
    read), an empty list, null or no field is none."""
    tail = b"" if finished_text is None else b', "finished_jobs": ' + finished_text
    body = b'{"node_address": "n1"' + tail + b', "resource_limits": {"cpu": 1}}'
    assert read_head(body) == ("n1", reported)
    assert read_head(b'{"node_address": ""' + tail + b"}") == (None, reported)
    assert read_head(b"[1]") == (None, False)


def test_a_node_keeps_one_entry_map_and_drops_entries_no_longer_sent() -> None:
    """A node's remembered entries are one map kept between its heartbeats (its entry in ``struct_nodes`` too, while
    its limits are the same), not a new one each heartbeat; entries of jobs no longer sent stay until the map holds
    more than ``2 x entries + KEPT_ENTRIES_SLACK``, then go. Every heartbeat reads as afresh, and an entry sent
    again while remembered gives the report read before."""
    reports = wire.RunningReports()

    def entry(index: int) -> dict[str, Any]:
        return wire.running_job(f"j{index}", "op1", "main", start_time=1.0, resource_usage={"cpu": 1.0})

    first = _body(_heartbeat(running_jobs=[entry(0), entry(1)]))
    got = read_heartbeat(first, reports)
    assert got is not None and _comparable(got) == _plain(first, None)
    kept = reports.struct_nodes["n1"]
    bound = 2 * 2 + KEPT_ENTRIES_SLACK
    sizes = []
    for step in range(1, 40):
        body = _body(_heartbeat(running_jobs=[entry(step), entry(step + 1)]))
        got = read_heartbeat(body, reports)
        assert got is not None and _comparable(got) == _plain(body, None)
        entries = reports.struct_nodes["n1"][2]
        sizes.append(len(entries))
        assert len(entries) <= bound
        if step == 1:  # one new entry added to the same map, the node's tuple kept
            assert reports.struct_nodes["n1"] is kept and entries is kept[2]
            assert (
                got.running[0] is read_heartbeat(first, reports).running[1]
            )  # j1 again: the report read before
    assert max(sizes) == bound and min(sizes) == 2  # grew to the bound, then made anew of the heartbeat's two
