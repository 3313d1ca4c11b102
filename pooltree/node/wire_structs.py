"""A heartbeat body read straight into typed structs: the fast path of the scheduler's decoding.

``wire.decode`` + ``wire.parse_heartbeat`` make a dict of every map the node sent (its running jobs' ignored
fields too) and then check each field in Python. ``read_heartbeat`` decodes the body with msgspec into the
structs below instead: the types are checked in C while decoding, fields the scheduler does not read are skipped,
and what is left in Python is what the types cannot say (non-empty strings, known resource names, bounds). The
free-form maps (statistics, errors, alerts) are kept as their raw JSON and read by ``wire.decode`` (orjson), so
they read exactly as before. A node's ``resource_limits`` and running-job entries are taken as their text: an
entry whose text is that of one in the node's last heartbeat gives the report read then without being read again
(the same text reads the same), the limits likewise (``RunningReports.struct_nodes``).

It gives the ``HeartbeatRequest`` that ``parse_heartbeat(wire.decode(body))`` gives, or None: for anything it does
not take whole (a type the structs refuse, a field a check would refuse, an integer past 64 bits, which orjson
reads as a float), and the caller takes the plain path, whose answer or error is then the only one
(``tests/node/test_wire_structs.py`` compares the two). Why msgspec: it validates while it decodes and hands over
the text of what it skips, so a loaded heartbeat (13 running jobs, one finished) is read in ~22 µs against ~48 µs
for orjson's decoding and the checks in Python after it.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from pooltree.errors import ConfigError
from pooltree.node.wire import (
    _NO_USAGE,
    FINISHED_STATES,
    GPU_DEVICES,
    FinishedJobReport,
    HeartbeatRequest,
    RunningJobReport,
    RunningReports,
    _device_indices,
    _limits,
    _shallow,
    decode,
    parse_node_alerts,
)

_NONE = msgspec.Raw(b"")
"""A free-form field that was not sent."""
_EMPTY = (b"", b"null", b"{}")
"""Raw free-form maps that read as an empty map (the bytes of the ``Raw``)."""
_ABSENT = (b"", b"null")
"""A raw field not sent, or sent as null."""
_JSON_SPACE = b" \t\r\n"
"""The whitespace JSON allows between tokens."""
_LOW, _HIGH = -(2**63), 2**64
"""The integers orjson reads as integers; past them it reads floats, so such a heartbeat takes the plain path."""


_Amount = Annotated[int, msgspec.Meta(ge=0)] | Annotated[float, msgspec.Meta(ge=0)]
"""A resource amount as ``wire._plain_values`` takes it: a number from 0 (msgspec refuses the rest, and numbers
too large for a float, while decoding); integers past 64 bits are refused after (``_whole``)."""


class _Usage(msgspec.Struct, forbid_unknown_fields=True):
    """A running job's ``resource_usage`` under the canonical names (``pooltree.resources.RESOURCES``), the
    absent ones 0.0 (as ``wire._plain_values`` reads them); any other name: the plain path."""

    user_slots: _Amount = 0.0
    cpu: _Amount = 0.0
    gpu: _Amount = 0.0
    memory: _Amount = 0.0
    network: _Amount = 0.0


class _Running(msgspec.Struct):
    job_id: str
    operation_id: str
    task_name: str | None = None
    resource_usage: _Usage | None = None
    memory_usage: int | float | None = 0.0
    statistics: msgspec.Raw = _NONE
    gpu_devices: list[int] | None = None


class _Finished(msgspec.Struct):
    job_id: str
    operation_id: str
    state: str
    task_name: str | None = None
    start_time: int | float | None = None
    finish_time: int | float | None = None
    exit_code: int | None = None
    error: msgspec.Raw = _NONE
    stderr: str = ""
    stderr_size: int | float | None = None
    abort_reason: str | None = None
    interruption_reason: str | None = None
    statistics: msgspec.Raw = _NONE
    gpu_devices: list[int] | None = None


class _Heartbeat(msgspec.Struct):
    node_address: str
    resource_limits: msgspec.Raw
    tags: list[str] | None = None
    running_jobs: list[msgspec.Raw] | None = None
    finished_jobs: list[_Finished] | None = None
    memory_meter: str | None = None
    alerts: msgspec.Raw = _NONE


class _Address(msgspec.Struct):
    node_address: str
    finished_jobs: msgspec.Raw = _NONE
    """Taken as its text, not read (``read_head``)."""


_DECODER = msgspec.json.Decoder(_Heartbeat)
_ADDRESS_DECODER = msgspec.json.Decoder(_Address)
_RUNNING_DECODER = msgspec.json.Decoder(_Running)


class _Plain(Exception):
    """The heartbeat is not taken here: the plain path reads it (and names what is wrong with it)."""


def read_heartbeat(body: bytes, reports: RunningReports | None = None) -> HeartbeatRequest | None:
    """The heartbeat ``parse_heartbeat(decode(body), reports)`` gives, or None when the plain path must read it."""
    try:
        data = _DECODER.decode(body)
    except (msgspec.MsgspecError, RecursionError, ValueError):
        return None
    try:
        return _request(data, reports)
    except (_Plain, ConfigError, msgspec.MsgspecError, ValueError, RecursionError):
        return None


def read_address(body: bytes) -> str | None:
    """The ``node_address`` of a heartbeat body (the rest is skipped, not read) when the body is a JSON map whose
    address is a non-empty string; None otherwise. A body this gives an address for reads as a heartbeat of that
    node or not at all (``read_heartbeat`` and the plain path take the address as msgspec reads it here)."""
    return read_head(body)[0]


def read_head(body: bytes) -> tuple[str | None, bool]:
    """``read_address`` of a body, and whether its ``finished_jobs`` is a list with an entry (its text looked at,
    not read): a body that reads as a heartbeat reports finished jobs exactly when this says so (the last of
    duplicate keys counts here as in both decodings); one that says so and does not read is refused by either
    path. A node shard decodes a body only when it may answer it, which one with finished jobs never is."""
    try:
        head = _ADDRESS_DECODER.decode(body)
    except (msgspec.MsgspecError, RecursionError, ValueError):
        return None, False
    finished = bytes(head.finished_jobs)
    return head.node_address or None, finished[:1] == b"[" and finished[1:].lstrip(_JSON_SPACE)[:1] != b"]"


def _request(data: _Heartbeat, reports: RunningReports | None) -> HeartbeatRequest:
    address = data.node_address
    if not address:
        raise _Plain
    tags = data.tags or []
    for tag in tags:
        if not tag:
            raise _Plain
    known = reports.struct_nodes.pop(address, None) if reports is not None else None
    limits_text = bytes(data.resource_limits)
    if known is not None and known[0] == limits_text:
        limits = known[1].copy()  # each heartbeat gets its own array
    else:
        raw_limits = decode(limits_text)
        if type(raw_limits) is not dict:
            raise _Plain
        limits = _limits(raw_limits)
    entries = data.running_jobs or []
    kept = known[2] if known is not None else {}
    running, current = _running(entries, kept)
    finished = [_finished(entry) for entry in data.finished_jobs or ()]
    raw_alerts = bytes(data.alerts)
    alerts = [] if raw_alerts in _ABSENT else parse_node_alerts({"alerts": decode(raw_alerts)})
    if reports is not None:
        if known is not None and known[0] == limits_text and current is kept:
            # the same limits and the same entry map: nothing new to keep
            reports.struct_nodes[address] = known
        else:
            reports.struct_nodes[address] = (limits_text, limits.copy(), current)
        if len(reports.struct_nodes) > reports.max_nodes:
            del reports.struct_nodes[next(iter(reports.struct_nodes))]
    return HeartbeatRequest(
        address=address,
        resource_limits=limits,
        tags=frozenset(tags),
        running=running,
        finished=finished,
        memory_meter=data.memory_meter,
        alerts=alerts,
    )


KEPT_ENTRIES_SLACK = 16
"""A node's remembered entries are made anew from its heartbeat's once they number more than twice its entries
and this many: the entries of jobs it no longer reports go then."""


def _running(
    entries: list[msgspec.Raw], kept: dict[bytes, RunningJobReport]
) -> tuple[list[RunningJobReport], dict[bytes, RunningJobReport]]:
    """The running jobs' reports, and the node's entries to remember: an entry whose text is the text of one
    remembered (``kept``: this heartbeat's and earlier ones') gives the report read then, unread (the same text reads
    the same). New entries are added to ``kept`` itself, which is returned, so a node's map lives on between its
    heartbeats instead of a new one each heartbeat (one object less for the collector to walk twice per heartbeat);
    entries no longer reported are dropped when ``kept`` grows past ``2 x entries + KEPT_ENTRIES_SLACK``: a new map
    of this heartbeat's entries is returned then."""
    out: list[RunningJobReport] = []
    remembered, add = kept.get, out.append  # bound once: two attribute reads less an entry
    for raw in entries:
        text = bytes(raw)
        report = remembered(text)
        if report is None:
            report = _report(_RUNNING_DECODER.decode(text))
            kept[text] = report
        add(report)
    if len(kept) > 2 * len(out) + KEPT_ENTRIES_SLACK:
        kept = {bytes(raw): report for raw, report in zip(entries, out, strict=True)}
    return out, kept


def _report(entry: _Running) -> RunningJobReport:
    """One running job's report as ``wire._running_report`` reads its map."""
    task_name = "main" if entry.task_name is None else entry.task_name
    if not entry.job_id or not entry.operation_id or not task_name:
        raise _Plain
    memory = entry.memory_usage
    usage_read = entry.resource_usage
    if usage_read is None:
        _whole(memory)
        usage: tuple[float, ...] = _NO_USAGE
    else:
        # checked while decoding: known names, numbers from 0; what is left of ``wire._plain_values``
        slots, cpu, gpu, memory_amount, network = (
            usage_read.user_slots,
            usage_read.cpu,
            usage_read.gpu,
            usage_read.memory,
            usage_read.network,
        )
        _wholes((slots, cpu, gpu, memory_amount, network, memory))
        usage = (slots, round(float(cpu), 2), gpu, float(round(memory_amount)), network)
        if entry.gpu_devices is not None:  # the plain path reads it through its checked path: all floats
            usage = tuple(map(float, usage))
    devices = () if entry.gpu_devices is None else _gpu_devices(entry.gpu_devices)
    return RunningJobReport(
        entry.job_id,
        entry.operation_id,
        task_name,
        usage,
        0.0 if memory is None else float(memory),
        _free_map(entry.statistics),
        devices,
    )


def _finished(entry: _Finished) -> FinishedJobReport:
    """One finished job's report as ``wire._finished_report`` reads its map."""
    task_name = "main" if entry.task_name is None else entry.task_name
    if (
        not entry.job_id
        or not entry.operation_id
        or not task_name
        or entry.state not in FINISHED_STATES
        or entry.abort_reason == ""
        or entry.interruption_reason == ""
    ):
        raise _Plain
    _wholes((entry.start_time, entry.finish_time, entry.exit_code, entry.stderr_size))
    error = None if bytes(entry.error) in _ABSENT else _free_map(entry.error)
    encoded_size = len(entry.stderr.encode())
    size = entry.stderr_size
    return FinishedJobReport(
        job_id=entry.job_id,
        operation_id=entry.operation_id,
        task_name=task_name,
        state=entry.state,
        start_time=0.0 if entry.start_time is None else float(entry.start_time),
        finish_time=0.0 if entry.finish_time is None else float(entry.finish_time),
        exit_code=entry.exit_code,
        error=error,
        abort_reason=entry.abort_reason,
        interruption_reason=entry.interruption_reason,
        statistics=_free_map(entry.statistics),
        stderr=entry.stderr,
        stderr_size=encoded_size if size is None else int(float(size)),
        gpu_devices=() if entry.gpu_devices is None else _gpu_devices(entry.gpu_devices),
    )


def _free_map(raw: msgspec.Raw) -> dict[str, Any]:
    """A free-form map (statistics, an error) read by orjson as the plain path reads it: a map nested at most
    ``wire.MAX_NESTING`` deep; absent or null is an empty map."""
    text = bytes(raw)
    if text in _EMPTY:
        return {}
    value = decode(text)
    if type(value) is not dict or not _shallow(value):
        raise _Plain
    return value


def _gpu_devices(value: list[int]) -> tuple[int, ...]:
    for index in value:
        _whole(index)
    return _device_indices({GPU_DEVICES: value}, "")


def _whole(value: Any) -> None:
    """Refuse an integer orjson would read as a float (past 64 bits)."""
    _wholes((value,))


def _wholes(values: tuple[Any, ...]) -> None:
    """`_whole` of each value, in one call (an entry's numbers: one call a report instead of one a number)."""
    for value in values:
        if type(value) is int and not _LOW <= value < _HIGH:
            raise _Plain
