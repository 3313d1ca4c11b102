"""get_operation from the cached, encoded attribute map (issue 7): every change shows in the next read, the
cached answer is the one a fresh build gives, and finished operations are served without the store."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yt.yson as yson

from pooltree.node.service import NODE_SECRET_HEADER
from pooltree.server import operations as operations_module
from pooltree.server import pending_maps, protocol
from pooltree.server.app import CommandContext
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.operations import OperationCommands
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

LIMITS = {"user_slots": 1, "cpu": 1, "memory": 4 << 30}
TOKEN = "ytct-0000-" + "0123" * 8
NODE_SECRET = "ptns-get-operation-test-secret"
AUTH = {"Authorization": f"OAuth {TOKEN}"}


def _service(tmp_path: Path) -> SchedulerService:
    return SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        create_default_tree=True,
        token=TOKEN,
        node_secret=NODE_SECRET,
    )


def _get(url: str, operation_id: str, **parameters: Any) -> Any:
    headers = {
        "X-YT-Output-Format": '"json"',
        "X-YT-Header-Format": '"json"',
        "X-YT-Parameters": json.dumps({"operation_id": operation_id, **parameters}),
        **AUTH,
    }
    response = httpx.get(f"{url}/api/v4/get_operation", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def _fresh(service: SchedulerService, operation_id: str) -> dict[str, Any]:
    """The attribute map built from scratch, bypassing the cache."""
    live = service.scheduler
    with live.lock:
        op = live.operations.get(operation_id)
        if op is not None:
            return service.commands._live_attributes(op)
    record = live.store.get_operation(operation_id)
    assert record is not None
    return service.commands._stored_attributes(record)


def _same(cached: dict[str, Any], fresh: dict[str, Any]) -> None:
    """Equal except the build times (the cached map carries the time it was built)."""
    for attributes in (cached, fresh):
        for key in ("brief_progress", "progress"):
            attributes.get(key, {}).pop("build_time", None)
    assert cached == fresh


def test_every_change_is_visible_and_matches_a_fresh_build(
    tmp_path: Path, serve: Callable[[object], str]
) -> None:
    service = _service(tmp_path)
    service.cypress.create("scheduler_pool_tree", "//sys/pool_trees/default")
    url = serve(service.app)
    live = service.scheduler
    op = live.start_operation(
        "vanilla", {"tasks": {"main": {"command": "true", "job_count": 2}}}, "alice", 1.0
    )

    first = _get(url, op.id)
    assert first["state"] == "running" and first["brief_progress"]["jobs"]["pending"] == 2
    _same(first, _fresh(service, op.id))
    ctx = CommandContext("get_operation", {"operation_id": op.id})
    assert service.commands.get_operation_fast(ctx) is not None  # current: served on the event loop

    started = live.process_heartbeat(parse_heartbeat({"node_address": "n1", "resource_limits": LIMITS}), 2.0)
    assert service.commands.get_operation_fast(ctx) is None  # a job started: the cached map is stale
    second = _get(url, op.id)
    assert (
        second["brief_progress"]["jobs"]["running"] == 1 and second["brief_progress"]["jobs"]["pending"] == 1
    )
    _same(second, _fresh(service, op.id))

    job = started["start"][0]
    finished = {"job_id": job["job_id"], "operation_id": op.id, "state": "completed"}
    live.process_heartbeat(
        parse_heartbeat({"node_address": "n1", "resource_limits": LIMITS, "finished_jobs": [finished]}), 3.0
    )
    third = _get(url, op.id)
    assert (
        third["brief_progress"]["jobs"]["completed"] == 1 and third["brief_progress"]["jobs"]["running"] == 1
    )
    _same(third, _fresh(service, op.id))

    live.update_fair_share("default", 4.0)
    assert service.commands.get_operation_fast(ctx) is None  # a fair-share update refreshes the shares shown
    _get(url, op.id)

    # selections and formats are encoded separately and agree with the full map
    assert _get(url, op.id, attributes=["state", "id"]) == {"state": "running", "id": op.id}
    response = httpx.get(
        f"{url}/api/v4/get_operation",
        headers={
            "X-YT-Header-Format": '"json"',
            "X-YT-Parameters": json.dumps({"operation_id": op.id, "output_format": "yson"}),
            **AUTH,
        },
        timeout=10,
    )
    assert yson.loads(response.content)["state"] == "running"

    live.finish_operation(op.id, "aborted", 5.0)
    final = _get(url, op.id)
    assert final["state"] == "aborted" and "finish_time" in final
    _same(final, _fresh(service, op.id))
    assert service.commands.get_operation_fast(ctx) is not None  # finished: cached, no store read


def test_unknown_operation_is_an_error(tmp_path: Path, serve: Callable[[object], str]) -> None:
    service = _service(tmp_path)
    url = serve(service.app)
    response = httpx.get(
        f"{url}/api/v4/get_operation",
        params={"operation_id": "1-2-3-4"},
        headers={"X-YT-Output-Format": '"json"', **AUTH},
    )
    assert response.status_code != 200
    assert "No such operation" in response.headers.get("X-YT-Error", response.text)


def test_heartbeat_time_is_measured_and_exported(tmp_path: Path, serve: Callable[[object], str]) -> None:
    service = _service(tmp_path)
    url = serve(service.app)
    for _ in range(3):
        response = httpx.post(
            f"{url}/internal/node_heartbeat",
            json={"node_address": "n1", "resource_limits": LIMITS},
            headers={NODE_SECRET_HEADER: NODE_SECRET},
            timeout=10,
        )
        assert response.status_code == 200, response.text
    metrics = httpx.get(f"{url}/metrics", headers=AUTH, timeout=10).text
    assert 'pooltree_scheduler_work_seconds_count{work="heartbeat"} 3.0' in metrics
    count, total, longest = service.scheduler.durations["heartbeat"]
    assert count == 3 and 0 < longest <= total


def test_an_answer_is_encoded_without_the_normalize_walk_and_as_the_walk_encodes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """get_operation's maps are JSON values with string keys: JSON answers are encoded by json.dumps directly
    (``plain``), with no ``normalize`` walk over the map (a fifth of a first read's CPU), byte for byte the walk's
    answers, in JSON, pretty JSON and YSON, whole and selected, for queued operations (read through their
    templates), a running one, a suspended one with an unknown spec option, and a finished one."""
    service = _service(tmp_path)
    asyncio.run(service.start())
    try:
        live = service.scheduler
        spec = {"tasks": {"main": {"command": "true", "job_count": 2}}, "unknown_knob": {"a": [1, 2.5]}}
        service.cypress.create(
            "scheduler_pool",
            None,
            attributes={"name": "queue", "pool_tree": "default", "max_running_operation_count": 0},
        )
        ops = [live.start_operation("vanilla", spec, "root", 1.0 + index) for index in range(3)]
        queued = {**spec, "pool": "queue"}
        ops += [live.start_operation("vanilla", queued, "root", 4.0 + index) for index in range(2)]
        live.process_heartbeat(parse_heartbeat({"node_address": "n1", "resource_limits": LIMITS}), 5.0)
        live.suspend_operation(ops[1].id, 6.0)
        live.finish_operation(ops[2].id, "completed", 7.0)
        for tree in list(live.cores):
            live.update_fair_share(tree, 8.0)
        assert {op.state for op in ops} >= {"running", "pending", "completed"}
        walks: list[int] = []
        plain_normalize = protocol.normalize

        def counted(value: Any) -> Any:
            walks.append(1)
            return plain_normalize(value)

        def walked(value: Any, fmt: Any, *, plain: bool = False) -> tuple[bytes, str]:
            return protocol._encode(plain_normalize(value), fmt)  # the encoding before: always the walk

        json_formats = [None, {"$value": "json", "$attributes": {"format": "pretty"}}]

        def answers(commands: OperationCommands, formats: list[Any]) -> list[bytes]:
            found = []
            for op in ops:
                for fmt in formats:
                    for selected in ({}, {"attributes": ["state", "progress", "spec", "alerts"]}):
                        parameters = {"operation_id": op.id, **selected}
                        if fmt is not None:
                            parameters["output_format"] = fmt
                        ctx = CommandContext("get_operation", parameters, user="root")
                        found.append((commands.get_operation_fast(ctx) or commands.get_operation(ctx)).data)
            return found

        commands = OperationCommands(live, lambda: 20.0)
        monkeypatch.setattr(protocol, "normalize", counted)
        plain = answers(commands, json_formats)
        assert walks == [], "a JSON answer went through the normalize walk"
        plain += answers(commands, ["yson"])
        monkeypatch.setattr(protocol, "normalize", plain_normalize)
        monkeypatch.setattr(operations_module, "encode_structured", walked)
        monkeypatch.setattr(pending_maps, "encode_structured", walked)
        walked_commands = OperationCommands(live, lambda: 20.0)
        assert answers(walked_commands, json_formats) + answers(walked_commands, ["yson"]) == plain
    finally:
        asyncio.run(service.stop())
        service.store.close()
