"""Per-request work under load (issue 13): a queued operation's get_operation is answered on the event loop even
though every start into its pool changes what it shows, queue positions follow starts without a pass over the
queue, and the GIL switch interval the scheduler process sets."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import numpy as np
import pytest
from uvicorn.server import ServerState

from pooltree.config import parse_pool_trees
from pooltree.server.app import COMMAND_THREADS, CommandContext, command_threads, output_format
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.http_protocol import BoundedHeadersProtocol
from pooltree.server.leader import http_config
from pooltree.server.live import LiveScheduler
from pooltree.server.operations import OperationCommands
from pooltree.server.protocol import Format, encode_structured, normalize, utf8_to_code_points
from pooltree.server.service import SWITCH_INTERVAL, switch_interval
from pooltree.server.store import open_store

SPEC = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}
TREES = {"default": {"config": {}, "pools": {"queue": {"max_running_operation_count": 0}}}}


def test_a_queued_operation_is_read_on_the_loop_after_every_start(tmp_path: Path) -> None:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 's.db'}"))
    live.apply_pool_trees(parse_pool_trees(TREES), "default", 0.0)
    commands = OperationCommands(live, time.time)
    first = live.start_operation("vanilla", SPEC, "alice", 1.0)
    ctx = CommandContext("get_operation", {"operation_id": first.id, "attributes": ["progress"]})
    for count in range(2, 6):
        live.start_operation("vanilla", SPEC, "alice", float(count))
        answer = commands.get_operation_fast(ctx)
        assert answer is not None, "a queued operation's read went to a worker thread"
        info = json.loads(answer.data)["progress"]["scheduling_info_per_pool_tree"]["default"]
        assert info["pending_position"] == 0
        assert info["pending_reason"].endswith(f"position 1 of {count} in its queue")
    live.store.close()


def test_queue_positions_follow_joins_and_departures(tmp_path: Path) -> None:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 's.db'}"))
    live.apply_pool_trees(parse_pool_trees(TREES), "default", 0.0)
    tree = live.registry.trees["default"]
    ops = [live.start_operation("vanilla", SPEC, "alice", float(i)).id for i in range(5)]

    def positions() -> list[int]:
        holder = tree.operations[ops[-1]].pending_pool
        return [tree.pending_position(holder, op_id) for op_id in ops]

    assert positions() == [0, 1, 2, 3, 4]
    ops += [live.start_operation("vanilla", SPEC, "alice", 10.0 + i).id for i in range(3)]  # joined the tail
    assert positions() == list(range(8))
    live.finish_operation(ops.pop(2), "aborted", 20.0)  # left from the middle: the rest move up
    ops.append(live.start_operation("vanilla", SPEC, "alice", 30.0).id)
    assert positions() == list(range(8))
    live.finish_operation(ops.pop(0), "aborted", 40.0)  # the head left
    assert positions() == list(range(7))
    live.store.close()


@pytest.mark.parametrize(("raw", "expected"), [(None, SWITCH_INTERVAL), ("0.005", 0.005), ("x", SWITCH_INTERVAL),
                                               ("0", SWITCH_INTERVAL), ("5", SWITCH_INTERVAL)])  # fmt: skip
def test_switch_interval(monkeypatch: pytest.MonkeyPatch, raw: str | None, expected: float) -> None:
    if raw is None:
        monkeypatch.delenv("POOLTREE_SWITCH_INTERVAL", raising=False)
    else:
        monkeypatch.setenv("POOLTREE_SWITCH_INTERVAL", raw)
    assert switch_interval() == expected


@pytest.mark.parametrize(
    "value",
    [
        {"a": 'x\x01"\\y', "b": [1, 2.5, None, True, (3, 4)], "c": {"d": {}}},
        {"é": "мир", "t": "\udcff"},
        {"n": np.float32(1.5), "i": np.int64(3), "s": {2, 1}, "b": b"raw"},
    ],
)
@pytest.mark.parametrize(
    "fmt",
    [
        Format("json"),
        Format("json", {"encode_utf8": False}),
        Format("json", {"format": "pretty"}),
        Format("yson"),
    ],
)
def test_json_fast_paths_answer_what_the_full_walk_answers(value: dict[str, object], fmt: Format) -> None:
    """The ASCII shortcut of encode_utf8 and ``plain`` (no normalize walk) change no byte of any answer."""
    parsed = fmt
    full = normalize(value)
    if parsed.name == "json" and parsed.encode_utf8:
        pretty = parsed.attributes.get("format") == "pretty"
        text = json.dumps(utf8_to_code_points(full), ensure_ascii=True, indent=4 if pretty else None)
        expected = (text + ("\n" if pretty else "")).encode("utf-8", "surrogateescape")
        assert encode_structured(value, parsed)[0] == expected
    assert encode_structured(value, parsed, plain=True) == encode_structured(value, parsed)


def test_listing_joined_from_cached_briefs_is_the_whole_encoding(tmp_path: Path) -> None:
    """``list_operations_encoded`` (briefs encoded once per change and joined) answers byte for byte what
    encoding the whole page answers, before and after operations change, in every output format."""
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 's.db'}"))
    trees = {"default": {"config": {}, "pools": {"queue": {"max_running_operation_count": 1}}}}
    live.apply_pool_trees(parse_pool_trees(trees), "default", 0.0)
    titles = ["plain", 'мир "build_time": "build-time-of-the-listing"', "x"]
    ops = [
        live.start_operation("vanilla", {**SPEC, "title": t}, "alice", float(i)) for i, t in enumerate(titles)
    ]
    now = [100.0]
    commands = OperationCommands(live, lambda: now[0])
    formats = [
        None,
        {"$value": "json", "$attributes": {"encode_utf8": False}},
        {"$value": "json", "$attributes": {"format": "pretty"}},
        "yson",
    ]

    def check() -> None:
        for fmt in formats:
            params: dict[str, object] = {"limit": 10} if fmt is None else {"limit": 10, "output_format": fmt}
            ctx = CommandContext("list_operations", params)
            whole = encode_structured(commands.listing.list_operations(ctx), output_format(params))
            assert commands.listing.list_operations_encoded(ctx).data == whole[0], fmt

    check()
    now[0] = 101.0  # a later listing shows its own build time in the cached live briefs
    check()
    # its jobs start, run and finish on a node: the running operation's brief follows (job counts)
    limits = {"user_slots": 4, "cpu": 4, "memory": 8 * 2**30}
    answer = live.process_heartbeat(parse_heartbeat({"node_address": "n1", "resource_limits": limits}), 100.5)
    assert [spec["operation_id"] for spec in answer["start"]] == [ops[0].id]
    job = answer["start"][0]
    running = {"job_id": job["job_id"], "operation_id": ops[0].id, "resource_usage": job["resources"]}
    check()
    live.process_heartbeat(
        parse_heartbeat({"node_address": "n1", "resource_limits": limits, "running_jobs": [running]}), 100.6
    )
    assert live.progress(ops[0])["running"] == 1
    check()
    live.suspend_operation(ops[1].id, 102.0)
    live.finish_operation(ops[0].id, "aborted", 103.0)  # the next one in the queue runs
    check()
    check()
    live.store.close()


@pytest.mark.parametrize(("raw", "expected"), [(None, COMMAND_THREADS), ("8", 8), ("0", COMMAND_THREADS),
                                               ("x", COMMAND_THREADS), ("1000", COMMAND_THREADS)])  # fmt: skip
def test_command_threads(monkeypatch: pytest.MonkeyPatch, raw: str | None, expected: int) -> None:
    if raw is None:
        monkeypatch.delenv("POOLTREE_COMMAND_THREADS", raising=False)
    else:
        monkeypatch.setenv("POOLTREE_COMMAND_THREADS", raw)
    assert command_threads() == expected


def test_a_queued_operation_read_on_the_loop_keeps_its_encoding_not_its_map(tmp_path: Path) -> None:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 's.db'}"))
    live.apply_pool_trees(parse_pool_trees(TREES), "default", 0.0)
    commands = OperationCommands(live, lambda: 50.0)
    op = live.start_operation("vanilla", SPEC, "alice", 1.0)
    whole = CommandContext("get_operation", {"operation_id": op.id})
    first = commands.get_operation_fast(whole)
    assert first is not None and commands._live[op.id].attributes is None  # nothing for the gc to walk
    assert commands.get_operation_fast(whole) is first  # unchanged: the kept encoding
    state = CommandContext("get_operation", {"operation_id": op.id, "attributes": ["state"]})
    assert json.loads(commands.get_operation_fast(state).data) == {"state": "pending"}  # type: ignore[union-attr]
    assert commands.get_operation(whole).data == first.data  # the thread path rebuilds the map it needs
    assert commands.operation_attributes(op.id)["state"] == "pending"
    live.start_operation("vanilla", SPEC, "alice", 2.0)
    again = commands.get_operation_fast(whole)
    assert again is not None and again.data != first.data  # its queue grew: "position 1 of 2"
    live.store.close()


def test_the_leaders_http_protocol_formats_no_access_log() -> None:
    """The leader's uvicorn protocol has no access log (``leader.http_config``): uvicorn decides it per
    connection from whether its access logger has handlers, and formats each answer's record (path, client)
    before the level drops it; a config whose ``access_log`` was set after construction kept the handlers."""

    async def app(scope: object, receive: object, send: object) -> None:
        return None

    logging.getLogger("uvicorn.access").propagate = True  # as a process's earlier uvicorn may have left it
    protocol = BoundedHeadersProtocol(
        config=http_config(app, "127.0.0.1", 0),
        server_state=ServerState(),
        app_state={},
        _loop=asyncio.new_event_loop(),
    )
    protocol.loop.close()
    assert protocol.access_log is False
    assert not logging.getLogger("uvicorn.access").hasHandlers()
