"""The node heartbeat wire format, one module for both sides: the node builds with it, the scheduler parses with it.

A heartbeat is a JSON map ``POST``-ed to ``/internal/node_heartbeat``; the answer is a map too. The field names
live here as constants and every map is made by one builder (``heartbeat``, ``running_job``, ``finished_job``,
``response``), so a new field (a job's GPU devices, say) is one keyword here and one line in the parser.

* Node → scheduler: ``heartbeat(...)`` with ``running_job(...)`` and ``finished_job(...)`` entries; a finished job
  is re-sent until the scheduler acknowledges it.
* Scheduler side: ``parse_heartbeat(data)`` validates a map into a ``HeartbeatRequest``; a malformed heartbeat is a
  ``ConfigError`` naming the field (``running_jobs[2].job_id``), which the service turns into a 400 YT error.
* Scheduler → node: ``response(start=, preempt=, abort=, acknowledge=, heartbeat_period=)``;
  ``split_response(data)`` is the node's check of its keys (the period taken out, the rest for
  ``NodeAgent.apply_heartbeat_response``).

The bytes on the wire are JSON, written and read by ``encode`` / ``decode`` (orjson: about 4x faster to read
and 10x faster to write than the standard library, which was a third of a heartbeat's cost in the scheduler).

Pure functions and dataclasses; no I/O, no import of the scheduler's packages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from pooltree.errors import ConfigError, join_path
from pooltree.resources import CPU, MEMORY, RESOURCES, Vector, parse_resources

MAX_NESTING = 128
"""How deep the free-form maps a heartbeat carries (statistics, errors, alert attributes) may nest: the YSON
limit the API applies to every parsed value (``pooltree.server.protocol.MAX_NESTING_LEVEL``)."""

MEDIA_TYPE = "application/json"
_ENCODE_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def encode(value: Any) -> bytes:
    """A heartbeat or an answer as the JSON bytes sent (numpy scalars as numbers)."""
    return orjson.dumps(value, option=_ENCODE_OPTIONS)


def decode(body: bytes) -> Any:
    """The JSON value of a heartbeat or answer body; ``ValueError`` when it is not JSON (invalid UTF-8 and lone
    surrogates included; integers past 64 bits are read as floats)."""
    return orjson.loads(body)


HEARTBEAT_PATH = "/internal/node_heartbeat"
"""Where nodes ``POST`` their heartbeats (the scheduler and its node shards)."""

# how long an idle heartbeat connection is kept, on each side: the side that closes first must be the node's, or the
# listener's close can cross a heartbeat the node has just sent on that connection (reset: a failed heartbeat)
API_PORT_KEEP_ALIVE = 5.0
"""Seconds the scheduler's API port keeps an idle connection (uvicorn's default ``timeout_keep_alive``; the read
process's public port keeps the same, ``reads.relay.KEEP_ALIVE``). A node's first heartbeat goes there."""
NODE_API_KEEP_ALIVE = API_PORT_KEEP_ALIVE - 1.0
"""Seconds a node keeps an idle connection to the scheduler's API port: less than the port keeps it."""
NODE_KEEP_ALIVE = 75.0
"""Seconds a node keeps an idle connection to a heartbeat listener (the scheduler's own or a node shard's: the address
``heartbeat_url`` names): more than the longest heartbeat period (``node.service.MAX_PERIOD``), so a node heartbeats
on one connection for as long as the listener runs. With both sides at the libraries' 5 s defaults, a node at a 5 s
period sent its heartbeat as the listener closed the connection (a reset: a failed heartbeat), and at a longer
period opened a connection for every heartbeat."""
LISTENER_KEEP_ALIVE = NODE_KEEP_ALIVE + 30.0
"""Seconds a heartbeat listener (the scheduler's, each node shard's) keeps an idle connection (its
``timeout_keep_alive``): more than a node keeps one, so the node closes first and the listener's close never crosses
a heartbeat."""

# heartbeat keys
NODE_ADDRESS = "node_address"
RESOURCE_LIMITS = "resource_limits"
RESOURCE_USAGE = "resource_usage"
TAGS = "tags"
RUNNING_JOBS = "running_jobs"
FINISHED_JOBS = "finished_jobs"
MEMORY_METER = "memory_meter"
ALERTS = "alerts"
"""The node's own alerts (YT errors), e.g. a reduced job isolation."""
GPU_DEVICES = "gpu_devices"
"""On the heartbeat: the node's GPU devices; on a running job: the devices it holds (``node/gpu.py``)."""
# response keys
START = "start"
PREEMPT = "preempt"
ABORT = "abort"
ACKNOWLEDGE = "acknowledge"
HEARTBEAT_PERIOD = "heartbeat_period"
SCHEDULING_SKIPPED = "scheduling_skipped"
"""Set when the scheduler was overloaded and scheduled nothing on this heartbeat (YTsaurus's
``scheduling_skipped``): the node waits ``heartbeat_period`` before the next one, out-of-turn heartbeats too."""
HEARTBEAT_URL = "heartbeat_url"
"""Where the node sends its next heartbeats: the node shard of the scheduler that owns it (``pooltree/shards``).
The node follows it only on the host of the scheduler that answered (the node secret goes nowhere else) and goes
back to its scheduler list when a heartbeat there fails."""
RESPONSE_KEYS = frozenset({START, PREEMPT, ABORT, ACKNOWLEDGE})
"""What ``NodeAgent.apply_heartbeat_response`` applies; ``heartbeat_period`` is the loop's."""


RUNNING_STATISTICS_BACKOFF = 30.0
"""Seconds between a node's reports of its running jobs' statistics (YTsaurus's exec node sends a running job's
statistics at most every ``running_job_statistics_sending_backoff``, 30 s): the node sends all its running jobs'
statistics in one heartbeat every this many seconds, and none in the others. The scheduler shows the last ones it got
(``get_job``, ``list_jobs``); the heartbeats between carry entries whose text is unchanged while the jobs' usage is,
which the scheduler does not read again (``wire_structs``) and a node shard answers without the leader."""


def counted_memory(measured: float, reserve: float) -> float:
    """A running job's memory as its entry reports it (``memory_usage``): the measured memory, never less than the
    job's reserved memory (YTsaurus's job proxy never reports less memory usage than was reserved); 0, not
    measured, stays 0. The scheduler counts the larger of the reserve and the reported memory
    (``RunningJobReport.counted_usage``), so it counts the same either way; a job below its reserve sends the same
    entry every heartbeat instead of a new one for each sample."""
    return max(measured, reserve) if measured > 0 else 0.0


def running_job(
    job_id: str,
    operation_id: str,
    task_name: str,
    *,
    start_time: float,
    resource_usage: Mapping[str, float],
    phase: str = "running",
    memory_usage: float = 0,
    statistics: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One running job's entry of ``running_jobs``."""
    return {
        "job_id": job_id,
        "operation_id": operation_id,
        "task_name": task_name,
        "state": "running",
        "phase": phase,
        "start_time": start_time,
        RESOURCE_USAGE: dict(resource_usage),
        "memory_usage": int(memory_usage),
        "statistics": dict(statistics or {}),
        **extra,
    }


def finished_job(
    job_id: str,
    operation_id: str,
    task_name: str,
    state: str,
    start_time: float,
    finish_time: float,
    *,
    statistics: Mapping[str, Any] | None = None,
    stderr_size: int = 0,
    exit_code: int | None = None,
    error: Mapping[str, Any] | None = None,
    abort_reason: str | None = None,
    interruption_reason: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One finished job's entry of ``finished_jobs`` (optional fields only when set)."""
    out: dict[str, Any] = {
        "job_id": job_id,
        "operation_id": operation_id,
        "task_name": task_name,
        "state": state,
        "start_time": start_time,
        "finish_time": finish_time,
        "statistics": dict(statistics or {}),
        "stderr_size": stderr_size,
    }
    for key, value in (
        ("exit_code", exit_code),
        ("error", error),
        ("abort_reason", abort_reason),
        ("interruption_reason", interruption_reason),
    ):
        if value is not None:
            out[key] = value
    out.update(extra)
    return out


def heartbeat(
    address: str,
    *,
    sequence: int,
    time: float,
    resource_limits: Mapping[str, float],
    resource_usage: Mapping[str, float],
    memory_limit: float,
    memory_usage: float,
    memory_meter: str,
    running_jobs: Sequence[Mapping[str, Any]],
    finished_jobs: Sequence[Mapping[str, Any]],
    tags: Sequence[str] = (),
    **extra: Any,
) -> dict[str, Any]:
    """The heartbeat map a node sends."""
    out: dict[str, Any] = {
        NODE_ADDRESS: address,
        "sequence": sequence,
        "time": time,
        RESOURCE_LIMITS: dict(resource_limits),
        RESOURCE_USAGE: dict(resource_usage),
        "memory": {"limit": memory_limit, "usage": int(memory_usage)},
        MEMORY_METER: memory_meter,
        RUNNING_JOBS: list(running_jobs),
        FINISHED_JOBS: list(finished_jobs),
    }
    if tags:
        out[TAGS] = list(tags)
    out.update(extra)
    return out


def response(
    *,
    start: list[dict[str, Any]],
    preempt: list[list[Any]],
    abort: list[dict[str, str]],
    acknowledge: list[str],
    heartbeat_period: float,
    **extra: Any,
) -> dict[str, Any]:
    """The scheduler's answer to one heartbeat."""
    return {
        START: start,
        PREEMPT: preempt,
        ABORT: abort,
        ACKNOWLEDGE: acknowledge,
        HEARTBEAT_PERIOD: heartbeat_period,
        **extra,
    }


@dataclass(frozen=True)
class ResponseControl:
    """What an answer says to the heartbeat loop rather than to the jobs."""

    heartbeat_period: Any = None
    """As sent (the loop checks it); None when absent."""
    scheduling_skipped: bool = False
    heartbeat_url: str | None = None
    """The node shard to send the next heartbeats to (``HEARTBEAT_URL``); None: the scheduler itself."""


def split_response(data: Any) -> tuple[dict[str, Any], ResponseControl]:
    """The node's check of an answer: (the lists ``apply_heartbeat_response`` takes, the loop's part).
    Unknown keys and non-list values name their field."""
    if not isinstance(data, Mapping):
        raise ConfigError("response", f"expected a map, got {type(data).__name__}")
    body = dict(data)
    period = body.pop(HEARTBEAT_PERIOD, None)
    skipped = body.pop(SCHEDULING_SKIPPED, False)
    if not isinstance(skipped, bool):
        raise ConfigError(join_path("response", SCHEDULING_SKIPPED), f"expected a boolean, got {skipped!r}")
    url = body.pop(HEARTBEAT_URL, None)
    if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
        raise ConfigError(join_path("response", HEARTBEAT_URL), f"expected an http(s) URL, got {url!r}")
    unknown = sorted(set(map(str, body)) - RESPONSE_KEYS)
    if unknown:
        raise ConfigError(
            join_path("response", unknown[0]), f"unknown key; known: {', '.join(sorted(RESPONSE_KEYS))}"
        )
    for key in RESPONSE_KEYS:
        value = body.setdefault(key, [])
        if not isinstance(value, list | tuple):
            raise ConfigError(join_path("response", key), f"expected a list, got {type(value).__name__}")
    return body, ResponseControl(period, skipped, url)


FINISHED_STATES = frozenset({"completed", "failed", "aborted"})


@dataclass(frozen=True, slots=True)
class RunningJobReport:
    """One job the node runs right now (shared by the heartbeats that report it unchanged: ``RunningReports``)."""

    job_id: str
    operation_id: str
    task_name: str
    resource_usage: tuple[float, ...]
    """As reported, by resource index (``pooltree.resources.RESOURCES``); read only when the job's measured
    memory is reported too, so it is not made a vector per job and heartbeat."""
    memory_usage: float = 0.0
    statistics: dict[str, Any] = field(default_factory=dict)
    gpu_devices: tuple[int, ...] = ()
    """Host indices of the GPUs the job holds (``node/gpu.py``)."""
    counted_usage: tuple[float, ...] = field(init=False, repr=False, compare=False)
    """What the report says its allocation uses: ``resource_usage`` as floats, the memory raised to
    ``memory_usage`` (the scheduler counts it where it exceeds the reserve: ``SchedulerCore.report_usage``). Made
    once per report: an entry unchanged since the node's last heartbeat gives the same report, and a node measuring
    memory reports every running job every heartbeat."""

    def __post_init__(self) -> None:
        counted = [float(value) for value in self.resource_usage]
        if len(counted) > MEMORY:
            counted[MEMORY] = max(counted[MEMORY], float(self.memory_usage))
        object.__setattr__(self, "counted_usage", tuple(counted))


@dataclass
class FinishedJobReport:
    """One finished job the node reports until the scheduler acknowledges it."""

    job_id: str
    operation_id: str
    task_name: str
    state: str
    start_time: float
    finish_time: float
    exit_code: int | None = None
    error: dict[str, Any] | None = None
    abort_reason: str | None = None
    interruption_reason: str | None = None
    statistics: dict[str, Any] = field(default_factory=dict)
    stderr: str = ""
    stderr_size: int = 0
    gpu_devices: tuple[int, ...] = ()
    """Host indices of the GPUs the job held."""


@dataclass
class HeartbeatRequest:
    """A decoded node heartbeat."""

    address: str
    resource_limits: Vector
    tags: frozenset[str] = frozenset()
    running: list[RunningJobReport] = field(default_factory=list)
    finished: list[FinishedJobReport] = field(default_factory=list)
    memory_meter: str | None = None
    alerts: list[dict[str, Any]] = field(default_factory=list)
    """The node's own alerts (YT errors, e.g. a reduced job isolation), shown on the node and by the scheduler."""


MAX_NODE_ALERTS = 16
MAX_ALERT_TEXT = 4096


def parse_node_alerts(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The heartbeat's ``alerts``: at most ``MAX_NODE_ALERTS`` YT errors, each with a message, an integer code and
    a map of attributes (what the scheduler shows; inner errors are not kept)."""
    raw = _list(data, "alerts")
    if len(raw) > MAX_NODE_ALERTS:
        raise ConfigError("alerts", f"at most {MAX_NODE_ALERTS} node alerts, got {len(raw)}")
    alerts: list[dict[str, Any]] = []
    for index, entry in enumerate(raw):
        path = join_path("alerts", index)
        if not isinstance(entry, Mapping):
            raise ConfigError(path, f"expected a map, got {type(entry).__name__}")
        message = _string(entry, "message", path)
        code = entry.get("code", 1)
        if isinstance(code, bool) or not isinstance(code, int):
            raise ConfigError(join_path(path, "code"), f"expected an integer, got {code!r}")
        attributes = _map(entry, "attributes", path)
        if len(message) + len(repr(attributes)) > MAX_ALERT_TEXT:
            raise ConfigError(path, f"an alert must take at most {MAX_ALERT_TEXT} characters")
        alerts.append({"code": code, "message": message, "attributes": attributes, "inner_errors": []})
    return alerts


_RESOURCE_INDEX = {name: index for index, name in enumerate(RESOURCES)}


def _plain_values(data: Mapping[str, Any]) -> list[float] | None:
    """A map of plain numbers under the canonical names (what nodes send) as ``parse_resources`` reads it, by
    resource index, without its per-key paths and checks; None for anything else."""
    values = [0.0] * len(RESOURCES)
    for key, value in data.items():
        index = _RESOURCE_INDEX.get(key)
        kind = type(value)
        if index is None or (kind is not float and kind is not int) or not 0 <= value < math.inf:
            return None
        values[index] = value
    values[MEMORY] = float(round(values[MEMORY]))
    values[CPU] = round(float(values[CPU]), 2)
    return values


def _plain_resources(data: Mapping[str, Any]) -> Vector | None:
    values = _plain_values(data)
    return None if values is None else np.array(values, dtype=float)


_NO_USAGE = (0.0,) * len(RESOURCES)


def _resources(data: Mapping[str, Any], path: str) -> Vector:
    """``parse_resources`` with the fast path for plain maps; anything else takes ``parse_resources``, which
    names the bad field."""
    plain = _plain_resources(data)
    return plain if plain is not None else parse_resources(data, path)


def _running_report(entry: Any, index: int) -> RunningJobReport:
    """One ``running_jobs`` entry. The common shape (strings, a plain usage map, a number, a map) is read
    directly; anything else goes through the checked path, which names the bad field."""
    if type(entry) is dict:
        job_id, operation_id = entry.get("job_id"), entry.get("operation_id")
        task_name = entry.get("task_name")
        if task_name is None:
            task_name = "main"
        usage_raw, memory = entry.get("resource_usage"), entry.get("memory_usage", 0.0)
        statistics = entry.get("statistics")
        devices = entry.get(GPU_DEVICES)
        plain = _plain_values(usage_raw) if type(usage_raw) is dict else None
        usage = _NO_USAGE if usage_raw is None else None if plain is None else tuple(plain)
        if (
            type(job_id) is str
            and job_id
            and type(operation_id) is str
            and operation_id
            and type(task_name) is str
            and task_name
            and usage is not None
            and (memory is None or ((type(memory) is int or type(memory) is float) and math.isfinite(memory)))
            and (
                statistics is None or (type(statistics) is dict and (not statistics or _shallow(statistics)))
            )
            and devices is None
        ):
            return RunningJobReport(
                job_id,
                operation_id,
                task_name,
                usage,
                0.0 if memory is None else float(memory),
                dict(statistics) if statistics else {},
            )
    return _running_report_checked(entry, join_path("running_jobs", index))


def _running_report_checked(entry: Any, path: str) -> RunningJobReport:
    if not isinstance(entry, Mapping):
        raise ConfigError(path, f"expected a map, got {type(entry).__name__}")
    usage_raw = entry.get("resource_usage")
    if usage_raw is not None and not isinstance(usage_raw, Mapping):
        raise ConfigError(join_path(path, "resource_usage"), "expected a map of resources")
    usage = _NO_USAGE if usage_raw is None else _resources(usage_raw, join_path(path, "resource_usage"))
    return RunningJobReport(
        job_id=_string(entry, "job_id", path),
        operation_id=_string(entry, "operation_id", path),
        task_name=_string(entry, "task_name", path, required=False, default="main"),
        resource_usage=tuple(usage.tolist()) if isinstance(usage, np.ndarray) else usage,
        memory_usage=_number(entry, "memory_usage", path, 0.0),
        statistics=_map(entry, "statistics", path),
        gpu_devices=_device_indices(entry, path),
    )


MAX_GPU_DEVICES = 64


def _device_indices(entry: Mapping[str, Any], path: str) -> tuple[int, ...]:
    """A job's ``gpu_devices``: distinct non-negative host indices (at most ``MAX_GPU_DEVICES``)."""
    value = entry.get(GPU_DEVICES)
    if value is None:
        return ()
    where = join_path(path, GPU_DEVICES)
    if not isinstance(value, list) or len(value) > MAX_GPU_DEVICES:
        raise ConfigError(where, f"expected a list of at most {MAX_GPU_DEVICES} device indices")
    for index in value:
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ConfigError(where, f"expected non-negative device indices, got {index!r}")
    if len(set(value)) != len(value):
        raise ConfigError(where, "device indices must be distinct")
    return tuple(value)


def _string(data: Mapping[str, Any], key: str, path: str, *, required: bool = True, default: str = "") -> str:
    if key not in data or data[key] is None:
        if required:
            raise ConfigError(join_path(path, key), "required field is missing")
        return default
    value = data[key]
    if not isinstance(value, str) or not value:
        raise ConfigError(join_path(path, key), f"expected a non-empty string, got {value!r}")
    return value


def _number(data: Mapping[str, Any], key: str, path: str, default: float | None = None) -> float:
    value = data.get(key, default)
    if value is None:
        if default is None:
            raise ConfigError(join_path(path, key), "required field is missing")
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(join_path(path, key), f"expected a finite number, got {value!r}")
    return float(value)


def _map(data: Mapping[str, Any], key: str, path: str) -> dict[str, Any]:
    """A free-form map (statistics, attributes): kept as sent, nested at most ``MAX_NESTING`` deep."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(join_path(path, key), f"expected a map, got {type(value).__name__}")
    if value and not _shallow(value):
        raise ConfigError(join_path(path, key), f"nested deeper than {MAX_NESTING} levels")
    return dict(value)


def _shallow(value: Any) -> bool:
    """Whether ``value`` nests at most ``MAX_NESTING`` maps and lists deep (iteratively: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if level > MAX_NESTING:
            return False
        if type(item) is dict:
            stack.extend((child, level + 1) for child in item.values() if type(child) in _NESTED)
        elif type(item) is list:
            stack.extend((child, level + 1) for child in item if type(child) in _NESTED)
    return True


_NESTED = (dict, list)


def _list(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(key, f"expected a list, got {type(value).__name__}")
    return value


def _limits(raw: Mapping[str, Any]) -> Vector:
    """A heartbeat's ``resource_limits``: the plain map read directly (its numbers are finite and non-negative
    already), anything else through ``parse_resources`` and the finiteness check, naming ``resource_limits``."""
    limits = _plain_resources(raw)
    if limits is None:
        limits = parse_resources(raw, "resource_limits")
        if not all(math.isfinite(x) and x >= 0 for x in limits.tolist()):
            raise ConfigError("resource_limits", "expected finite non-negative amounts")
    return limits


def _finished_report(entry: Any, index: int) -> FinishedJobReport:
    """One ``finished_jobs`` entry. The common shape (strings, finite numbers, no error, a shallow statistics map,
    no GPU devices) is read directly; anything else goes through the checked path, which names the bad field."""
    if type(entry) is dict:
        get = entry.get
        job_id, operation_id, task_name, state = (
            get("job_id"),
            get("operation_id"),
            get("task_name"),
            get("state"),
        )
        exit_code, stderr, statistics = get("exit_code"), get("stderr", ""), get("statistics")
        start, finish, size = get("start_time"), get("finish_time"), get("stderr_size")
        abort_reason, interruption_reason = get("abort_reason"), get("interruption_reason")
        if (
            type(job_id) is str
            and job_id
            and type(operation_id) is str
            and operation_id
            and (task_name is None or (type(task_name) is str and task_name))
            and type(state) is str
            and state in FINISHED_STATES
            and (exit_code is None or type(exit_code) is int)
            and get("error") is None
            and type(stderr) is str
            and _plain_number(start)
            and _plain_number(finish)
            and _plain_number(size)
            and (abort_reason is None or (type(abort_reason) is str and abort_reason))
            and (interruption_reason is None or (type(interruption_reason) is str and interruption_reason))
            and (
                statistics is None or (type(statistics) is dict and (not statistics or _shallow(statistics)))
            )
            and get(GPU_DEVICES) is None
        ):
            encoded_size = len(stderr.encode())  # as the checked path, which reads it whether sent or not
            return FinishedJobReport(
                job_id=job_id,
                operation_id=operation_id,
                task_name="main" if task_name is None else task_name,
                state=state,
                start_time=0.0 if start is None else float(start),
                finish_time=0.0 if finish is None else float(finish),
                exit_code=exit_code,
                abort_reason=abort_reason,
                interruption_reason=interruption_reason,
                statistics=dict(statistics) if statistics else {},
                stderr=stderr,
                stderr_size=encoded_size if size is None else int(float(size)),
            )
    return _finished_report_checked(entry, join_path("finished_jobs", index))


def _plain_number(value: Any) -> bool:
    """None or a finite int or float (not a bool): what ``_number`` reads without an error."""
    kind = type(value)
    return value is None or ((kind is float or kind is int) and math.isfinite(value))


def _finished_report_checked(entry: Any, path: str) -> FinishedJobReport:
    if not isinstance(entry, Mapping):
        raise ConfigError(path, f"expected a map, got {type(entry).__name__}")
    state = _string(entry, "state", path)
    if state not in FINISHED_STATES:
        raise ConfigError(
            join_path(path, "state"), f"expected one of completed, failed, aborted, got {state!r}"
        )
    exit_code = entry.get("exit_code")
    if exit_code is not None and (isinstance(exit_code, bool) or not isinstance(exit_code, int)):
        raise ConfigError(join_path(path, "exit_code"), f"expected an integer, got {exit_code!r}")
    error = entry.get("error")
    if error is not None and not isinstance(error, Mapping):
        raise ConfigError(join_path(path, "error"), "expected a YT error map")
    if error and not _shallow(error):
        raise ConfigError(join_path(path, "error"), f"nested deeper than {MAX_NESTING} levels")
    stderr = entry.get("stderr", "")
    if not isinstance(stderr, str):
        raise ConfigError(join_path(path, "stderr"), "expected a string")
    return FinishedJobReport(
        job_id=_string(entry, "job_id", path),
        operation_id=_string(entry, "operation_id", path),
        task_name=_string(entry, "task_name", path, required=False, default="main"),
        state=state,
        start_time=_number(entry, "start_time", path, 0.0),
        finish_time=_number(entry, "finish_time", path, 0.0),
        exit_code=exit_code,
        error=None if error is None else dict(error),
        abort_reason=_string(entry, "abort_reason", path, required=False) or None,
        interruption_reason=_string(entry, "interruption_reason", path, required=False) or None,
        statistics=_map(entry, "statistics", path),
        stderr=stderr,
        stderr_size=int(_number(entry, "stderr_size", path, float(len(stderr.encode())))),
        gpu_devices=_device_indices(entry, path),
    )


MAX_REMEMBERED_NODES = 100_000
"""Nodes whose last running-job entries ``RunningReports`` keeps (the oldest heard from is forgotten first)."""


class RunningReports:
    """The running-job reports of each node's last heartbeat, with the entries they were read from.

    A node reports every running job in every heartbeat, and most of them have not changed since the last one; an
    entry equal to the last one of its job gives the report read then, without reading it again (a dict compare
    in C instead of the per-field checks). Equal entries give equal reports, so nothing a node sends can make
    another entry's report differ from what reading it would give. One per process that decodes heartbeats (the
    service's event loop, each node shard), used from one thread.
    """

    def __init__(self, max_nodes: int = MAX_REMEMBERED_NODES) -> None:
        self.max_nodes = max_nodes
        self._nodes: dict[str, dict[str, tuple[dict[str, Any], RunningJobReport]]] = {}
        self.struct_nodes: dict[str, tuple[bytes, Vector, dict[bytes, RunningJobReport]]] = {}
        """The same for heartbeats read into structs (``wire_structs.read_heartbeat``), by the text sent: the node's
        ``resource_limits`` and the vector they read as, and its running-job entries' reports (its last heartbeat's and
        earlier ones' until ``wire_structs._running`` drops those no longer sent)."""

    def parse(self, address: str, entries: list[Any]) -> list[RunningJobReport]:
        previous = self._nodes.pop(address, None) or {}
        current: dict[str, tuple[dict[str, Any], RunningJobReport]] = {}
        reports: list[RunningJobReport] = []
        for index, entry in enumerate(entries):
            job_id = entry.get("job_id") if type(entry) is dict else None
            known = previous.get(job_id) if type(job_id) is str else None
            if known is not None and known[0] == entry:
                report = known[1]
            else:
                report = _running_report(entry, index)
            current[report.job_id] = (entry, report)
            reports.append(report)
        self._nodes[address] = current
        if len(self._nodes) > self.max_nodes:
            del self._nodes[next(iter(self._nodes))]
        return reports


def parse_heartbeat(data: Any, reports: RunningReports | None = None) -> HeartbeatRequest:
    """Validate a heartbeat map; every error names the offending field. ``reports``: the last heartbeats'
    running-job reports, reused for entries that did not change."""
    if type(data) is not dict and not isinstance(data, Mapping):
        raise ConfigError("heartbeat", f"expected a map, got {type(data).__name__}")
    address = _string(data, "node_address", "")
    if "resource_limits" not in data:
        raise ConfigError("resource_limits", "required field is missing")
    raw_limits = data["resource_limits"]
    if type(raw_limits) is not dict and not isinstance(raw_limits, Mapping):
        raise ConfigError("resource_limits", "expected a map of resources")
    limits = _limits(raw_limits)
    tags_raw = data.get("tags") or []
    if not isinstance(tags_raw, list) or not all(isinstance(t, str) and t for t in tags_raw):
        raise ConfigError("tags", "expected a list of non-empty strings")
    entries = _list(data, "running_jobs")
    if reports is not None:
        running = reports.parse(address, entries)
    else:
        running = [_running_report(entry, index) for index, entry in enumerate(entries)]
    finished = [_finished_report(entry, index) for index, entry in enumerate(_list(data, "finished_jobs"))]
    meter = data.get("memory_meter")
    return HeartbeatRequest(
        address=address,
        resource_limits=limits,
        tags=frozenset(tags_raw),
        running=running,
        finished=finished,
        memory_meter=meter if isinstance(meter, str) else None,
        alerts=parse_node_alerts(data),
    )
