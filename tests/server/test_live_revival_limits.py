"""Revival after a restart (in process, same SQLite store) re-registers operations without the start-time admission
checks, as YTsaurus's revive does: a lowered ``max_operation_count`` or a removed pool fails no operation that was
running; a lowered ``max_running_operation_count`` holds the later ones pending (YTsaurus's
``OnOperationAddedToPool``), never fails them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pooltree.config import parse_pool_trees
from pooltree.errors import PooltreeError
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store

SPEC: dict[str, Any] = {"tasks": {"main": {"command": "sleep 100", "job_count": 1}}}
LIMITS = {"user_slots": 4, "cpu": 4, "memory": 8 << 30}


def _beat(live: LiveScheduler, now: float, running: list[dict[str, Any]]) -> dict[str, Any]:
    reports = [
        {"job_id": s["job_id"], "operation_id": s["operation_id"], "resource_usage": s["resources"]}
        for s in running
    ]
    heartbeat = {"node_address": "n1", "resource_limits": LIMITS, "running_jobs": reports}
    return live.process_heartbeat(parse_heartbeat(heartbeat), now)


def _trees(pools: dict[str, Any]) -> Any:
    return parse_pool_trees({"default": {"config": {}, "pools": pools}})


def _live(tmp_path: Path, pools: dict[str, Any], now: float) -> LiveScheduler:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(_trees(pools), None, now)
    return live


def _restart(live: LiveScheduler, tmp_path: Path, pools: dict[str, Any], now: float) -> LiveScheduler:
    live.store.close()
    revived = _live(tmp_path, pools, now)
    revived.revive(now)
    return revived


def _state(live: LiveScheduler, operation_id: str) -> tuple[str, str]:
    record = live.store.get_operation(operation_id)
    assert record is not None
    error = (record.document.get("error") or {}).get("message", "")
    return record.state, error


def test_a_lowered_max_operation_count_keeps_both_running(tmp_path: Path) -> None:
    live = _live(tmp_path, {"p": {"max_operation_count": 2}}, 0.0)
    first = live.start_operation("vanilla", {**SPEC, "pool": "p"}, "alice", 1.0).id
    second = live.start_operation("vanilla", {**SPEC, "pool": "p"}, "alice", 2.0).id
    live.apply_pool_trees(_trees({"p": {"max_operation_count": 1}}), None, 3.0)
    assert _state(live, first)[0] == _state(live, second)[0] == "running"

    revived = _restart(live, tmp_path, {"p": {"max_operation_count": 1}}, 10.0)
    assert _state(revived, first) == ("running", "")
    assert _state(revived, second) == ("running", "")
    assert revived.registry.trees["default"].pool("p").operation_count == 2
    with pytest.raises(PooltreeError, match="Limit for the number of concurrent operations 1"):
        revived.start_operation("vanilla", {**SPEC, "pool": "p"}, "alice", 11.0)  # still blocks new starts
    revived.store.close()


def test_a_lowered_max_running_operation_count_holds_the_later_one_pending(tmp_path: Path) -> None:
    live = _live(tmp_path, {"p": {"max_running_operation_count": 2}}, 0.0)
    first = live.start_operation("vanilla", {**SPEC, "pool": "p"}, "alice", 1.0).id
    second = live.start_operation("vanilla", {**SPEC, "pool": "p"}, "alice", 2.0).id
    live.update_fair_share("default", 2.5)
    started = _beat(live, 2.6, [])["start"]
    assert sorted(s["operation_id"] for s in started) == sorted([first, second])
    live.apply_pool_trees(_trees({"p": {"max_running_operation_count": 1}}), None, 3.0)
    assert _state(live, second)[0] == "running"

    revived = _restart(live, tmp_path, {"p": {"max_running_operation_count": 1}}, 10.0)
    assert _state(revived, first) == ("running", "")
    assert _state(revived, second) == ("pending", "")
    assert revived.registry.operation(second).alerts["operation_pending"]["attributes"]["pool"] == "p"
    # the pending one's job keeps running on its node: not aborted, not lost, not started again
    revived.update_fair_share("default", 10.5)
    answer = _beat(revived, 11.0, started)
    assert answer["abort"] == [] and answer["start"] == []
    assert {job.state for job in revived.operations[second].jobs.values()} == {"running"}
    # when the first finishes, the second runs again with its job
    revived.finish_operation(first, "aborted", 12.0)
    assert _state(revived, second) == ("running", "")
    revived.update_fair_share("default", 12.5)
    mine = [s for s in started if s["operation_id"] == second]
    answer = _beat(revived, 13.0, mine)
    assert {a["job_id"] for a in answer["abort"]} == {
        s["job_id"] for s in started if s not in mine
    }  # first's
    assert answer["start"] == []  # the second's job re-attached, not started twice
    assert {job.state for job in revived.operations[second].jobs.values()} == {"running"}
    revived.store.close()


def test_an_operation_whose_pool_was_removed_keeps_running_in_an_ephemeral_pool(tmp_path: Path) -> None:
    live = _live(tmp_path, {"p": {}}, 0.0)
    # alice's own ephemeral pool exists first, so re-creating "p" exceeds max_ephemeral_pools_per_user (1)
    own = live.start_operation("vanilla", SPEC, "alice", 1.0).id
    in_p = live.start_operation("vanilla", {**SPEC, "pool": "p"}, "alice", 2.0).id
    live.apply_pool_trees(_trees({}), None, 3.0)
    assert _state(live, in_p)[0] == "running"

    revived = _restart(live, tmp_path, {}, 10.0)
    assert _state(revived, own) == ("running", "")
    assert _state(revived, in_p) == ("running", "")
    tree = revived.registry.trees["default"]
    assert tree.operation(in_p).pool.name == "p" and tree.pool("p").is_ephemeral
    assert tree.pool("p").parent is tree.root
    with pytest.raises(PooltreeError, match="Cannot create new ephemeral pool"):
        revived.start_operation("vanilla", {**SPEC, "pool": "q"}, "alice", 11.0)  # new starts: still limited
    revived.store.close()
