"""Scheduling segments driven by the simulator (issue 30): a full-host gang on a cluster filled with 1-GPU jobs.

Four 8-GPU nodes in two data centers, a pool of 1-GPU jobs filling every GPU, then a gang of two full-host jobs.
With ``scheduling_segments`` the gang is bound to one data center, two nodes of it move to ``large_gpu`` once the
imbalance outlasts ``unsatisfied_segments_rebalancing_timeout``, the 1-GPU jobs left on them are preempted with
``incompatible_scheduling_segment`` and the gang starts on that data center's two nodes. Without segments nothing
is preempted for that reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simkit import events, run

NODE = {"user_slots": 16, "cpu": 64, "gpu": 8, "memory": "512Gi"}
SEGMENTS = {
    "mode": "large_gpu",
    "data_centers": ["dc-a", "dc-b"],
    "initialization_timeout": 0,
    "unsatisfied_segments_rebalancing_timeout": "20s",
    "manage_period": "1s",
}


def document(segments: bool) -> dict[str, Any]:
    config: dict[str, Any] = {"main_resource": "gpu", "preemptive_scheduling_backoff": "1s"}
    if segments:
        config["scheduling_segments"] = SEGMENTS
    return {
        "seed": 1,
        "until": "30m",
        "scheduler": {"fair_share_update_period": "1s", "node_heartbeat_period": "1s"},
        "cluster": {
            "nodes": [
                {"address": "a", "count": 2, "tags": ["dc-a"], "resource_limits": NODE},
                {"address": "b", "count": 2, "tags": ["dc-b"], "resource_limits": NODE},
            ]
        },
        "pool_trees": {"gpu": {"config": config, "pools": {"small": {}, "large": {}}}},
        "operations": [
            {
                "id": "small-op",
                "submit_time": 0,
                "spec": {"pool": "small"},
                "tasks": [
                    {
                        "job_count": 200,
                        "resources": {"gpu": 1, "cpu": 1, "memory": "1Gi", "user_slots": 1},
                        "duration": "10m",
                    }
                ],
            },
            {
                "id": "gang-op",
                "submit_time": "60s",
                "type": "vanilla",
                "spec": {"pool": "large", "is_gang": True},
                "tasks": [
                    {
                        "job_count": 2,
                        "resources": {"gpu": 8, "cpu": 8, "memory": "8Gi", "user_slots": 1},
                        "duration": "10m",
                    }
                ],
            },
        ],
    }


def _reasons(log: list[dict[str, Any]]) -> set[str]:
    return {e["reason"] for e in log if e["event"] == "allocation_aborted" and e.get("reason")}


def test_segments_bind_the_gang_to_one_data_center_and_clear_its_hosts(tmp_path: Path) -> None:
    summary = run(document(True), tmp_path)
    assert summary["unsupported_options"] == []
    segments = summary["scheduling_segments"]["gpu"]  # the summary shows the final segments
    assert segments["mode"] == "large_gpu" and segments["scheduling_segment_modules"] == ["dc-a", "dc-b"]
    assert sorted(segments["nodes"]) == ["a-0", "a-1", "b-0", "b-1"]
    log = events(tmp_path)
    gang = [e for e in log if e["event"] == "allocation_started" and e["operation_id"] == "gang-op"]
    assert len(gang) == 2
    assert len({e["node"][0] for e in gang}) == 1  # both full hosts in one data center
    assert "incompatible_scheduling_segment" in _reasons(log)
    first_gang_start = min(e["time"] for e in gang)
    assert 80.0 <= first_gang_start < 120.0  # 60 s + 20 s of imbalance, then the next preemptive heartbeats
    # after the move no 1-GPU job starts on the gang's hosts while they stay in large_gpu
    hosts = {e["node"] for e in gang}
    small_there = [
        e
        for e in log
        if e["event"] == "allocation_started"
        and e["operation_id"] == "small-op"
        and e["node"] in hosts
        and first_gang_start <= e["time"] < first_gang_start + 500
    ]
    assert small_there == []


def test_without_segments_nothing_is_preempted_for_a_segment(tmp_path: Path) -> None:
    summary = run(document(False), tmp_path)
    assert "scheduling_segments" not in summary
    log = events(tmp_path)
    assert "incompatible_scheduling_segment" not in _reasons(log)
    assert len([e for e in log if e["event"] == "allocation_started" and e["operation_id"] == "gang-op"]) == 2
