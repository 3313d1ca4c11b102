"""Tentative pool trees in the live service (in process, SQLite store): an operation runs in its
``tentative_pool_trees`` too, a tentative tree waits for its sample, and once the regular trees' sample shows
the tentative tree's jobs too slow the operation leaves it and its jobs there are aborted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pooltree.config import parse_pool_trees
from pooltree.errors import PooltreeError
from pooltree.node import wire
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store
from tests.server.heartbeat_maps import node_heartbeat

LIMITS = {"user_slots": 4, "cpu": 4, "memory": 8 << 30}
TREES = {
    "physical": {"config": {"node_tag_filter": "p"}, "pools": {"research": {}}},
    "cloud": {"config": {"node_tag_filter": "c"}, "pools": {"research": {}}},
}
SPEC: dict[str, Any] = {
    "pool": "research",
    "pool_trees": ["physical"],
    "tentative_pool_trees": ["cloud"],
    "tentative_tree_eligibility": {
        "sample_job_count": 2,
        "max_tentative_job_duration_ratio": 3,
        "min_job_duration": 5000,
    },
    "tasks": {"main": {"command": "sleep 100", "job_count": 20}},
}


def _heartbeat(
    live: LiveScheduler, node: str, tag: str, now: float, finished: list[Any] = ()
) -> dict[str, Any]:
    running = [
        {"job_id": job.id, "operation_id": job.operation_id, "state": "running"}
        for job in live.jobs.on_node(node)
        if job.state == "running" and job.id not in {f["job_id"] for f in finished}
    ]
    beat = node_heartbeat(node, limits=LIMITS, running=running, finished=finished)
    beat["tags"] = [tag]
    return live.process_heartbeat(parse_heartbeat(beat), now)


def _live(tmp_path: Path) -> LiveScheduler:
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees(TREES), "physical", 0.0)
    for node, tag in (("np", "p"), ("nc", "c")):
        _heartbeat(live, node, tag, 0.0)
    for tree in TREES:
        live.update_fair_share(tree, 0.0)
    return live


def _started(answer: dict[str, Any]) -> list[str]:
    return [spec["job_id"] for spec in answer[wire.START]]


def test_a_slow_tentative_tree_is_banned_and_its_jobs_aborted(tmp_path: Path) -> None:
    live = _live(tmp_path)
    op = live.start_operation("vanilla", SPEC, "alice", 1.0)
    assert op.trees == ["physical", "cloud"]
    assert op.runtime_parameters["scheduling_options_per_pool_tree"]["cloud"]["tentative"] is True
    for tree in TREES:
        live.update_fair_share(tree, 1.0)
    cloud_jobs = _started(_heartbeat(live, "nc", "c", 2.0))
    assert len(cloud_jobs) == 2  # the sample: no more until it completes, though the node has 4 slots
    physical_jobs = _started(_heartbeat(live, "np", "p", 2.0))
    assert len(physical_jobs) == 4
    assert _started(_heartbeat(live, "nc", "c", 3.0)) == []  # declined, then saturated
    assert "cloud" in op.trees
    # two regular jobs complete in 2 s; the cloud jobs have run 40 s: 40 / 2 >= 3 and >= 5 s
    finished = [
        wire.finished_job(job_id, op.id, "main", "completed", 40.0, 42.0) for job_id in physical_jobs[:2]
    ]
    _heartbeat(live, "np", "p", 42.0, finished)
    assert op.trees == ["physical"]
    assert "cloud" not in op.runtime_parameters["scheduling_options_per_pool_tree"]
    assert op.id not in live.cores["cloud"].pool_tree.operations
    aborts = _heartbeat(live, "nc", "c", 43.0)[wire.ABORT]
    assert sorted(a["job_id"] for a in aborts) == sorted(cloud_jobs)
    assert {a["reason"] for a in aborts} == {"banned_in_tentative_tree"}
    assert _started(_heartbeat(live, "nc", "c", 44.0)) == []


def test_a_fast_tentative_tree_keeps_the_operation(tmp_path: Path) -> None:
    live = _live(tmp_path)
    op = live.start_operation("vanilla", SPEC, "alice", 1.0)
    for tree in TREES:
        live.update_fair_share(tree, 1.0)
    cloud_jobs = _started(_heartbeat(live, "nc", "c", 2.0))
    physical_jobs = _started(_heartbeat(live, "np", "p", 2.0))
    done = [wire.finished_job(job_id, op.id, "main", "completed", 2.0, 8.0) for job_id in cloud_jobs]
    _heartbeat(live, "nc", "c", 8.0, done)
    finished = [
        wire.finished_job(job_id, op.id, "main", "completed", 2.0, 9.0) for job_id in physical_jobs[:2]
    ]
    _heartbeat(live, "np", "p", 9.0, finished)
    assert op.trees == ["physical", "cloud"]  # 6 s vs 7 s: not slower
    assert len(_started(_heartbeat(live, "nc", "c", 20.0))) == 4  # the sample completed: no more waiting


def test_a_missing_tentative_tree_refuses_the_start(tmp_path: Path) -> None:
    live = _live(tmp_path)
    with pytest.raises(PooltreeError, match="Pool tree 'gone' not found"):
        live.start_operation("vanilla", {**SPEC, "tentative_pool_trees": ["gone"]}, "alice", 1.0)
    assert not live.operations


def test_a_revived_operation_stays_tentative_in_its_tentative_trees(tmp_path: Path) -> None:
    live = _live(tmp_path)
    op = live.start_operation("vanilla", SPEC, "alice", 1.0)
    live.store.close()
    revived = _live(tmp_path)
    revived.revive(2.0)
    again = revived.operations[op.id]
    assert again.trees == ["physical", "cloud"]
    assert op.id in revived.cores["cloud"].strategy.tentative.operations
    for tree in TREES:
        revived.update_fair_share(tree, 3.0)
    assert len(_started(_heartbeat(revived, "nc", "c", 3.0))) == 2  # the sample again


def test_use_default_tentative_pool_trees_takes_the_schedulers_list(tmp_path: Path) -> None:
    """YTsaurus's ``use_default_tentative_pool_trees``: a spec without ``tentative_pool_trees`` tries the
    scheduler's ``default_tentative_pool_trees``; its own list wins; without the flag there are none."""
    live = _live(tmp_path)
    live.default_tentative_pool_trees = ("cloud",)
    base = {key: value for key, value in SPEC.items() if key != "tentative_pool_trees"}
    plain = live.start_operation("vanilla", base, "alice", 1.0)
    assert plain.trees == ["physical"]
    flagged = live.start_operation(
        "vanilla", {**base, "use_default_tentative_pool_trees": True}, "alice", 1.0
    )
    assert flagged.trees == ["physical", "cloud"]
    assert flagged.runtime_parameters["scheduling_options_per_pool_tree"]["cloud"]["tentative"] is True
    own = live.start_operation(
        "vanilla",
        {**base, "use_default_tentative_pool_trees": True, "tentative_pool_trees": []},
        "alice",
        1.0,
    )
    assert own.trees == ["physical"]  # the spec's own (empty) list wins over the defaults
    with pytest.raises(PooltreeError, match="use_default_tentative_pool_trees"):
        live.start_operation("vanilla", {**base, "use_default_tentative_pool_trees": "yes"}, "alice", 1.0)
