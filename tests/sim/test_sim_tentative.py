"""Tentative pool trees in the simulator (issue 30), with the core's rules the live service uses
(`pooltree/strategy/tentative.py`): an operation runs in its tentative tree too, at most a sample of jobs at a time
there until that many completed; a tree whose jobs are too slow against the regular trees' is banned and left.

Two trees of one 4-slot node each; the operation's 20 one-minute jobs run in ``physical`` and on trial in ``cloud``
(sample 2). Jobs take as long in both trees here, so the ban is driven by ``max_tentative_job_duration_ratio``:
10 (YTsaurus's default) never bans, 0.5 bans as soon as the regular trees have their sample."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simkit import events, job, run


def _document(ratio: float, operation_type: str = "map") -> dict[str, Any]:
    def node(address: str) -> dict[str, Any]:
        limits = {"user_slots": 4, "cpu": 4, "memory": "8Gi"}
        return {"address": address, "count": 1, "resource_limits": limits, "tags": [address]}

    eligibility = {"sample_job_count": 2, "max_tentative_job_duration_ratio": ratio, "min_job_duration": 0}
    return {
        "seed": 1,
        "until": "10m",
        "scheduler": {"fair_share_update_period": "1s", "node_heartbeat_period": "1s"},
        "cluster": {"nodes": [node("p"), node("c")]},
        "default_pool_tree": "physical",
        "pool_trees": {
            "physical": {"config": {"node_tag_filter": "p"}, "pools": {"research": {}}},
            "cloud": {"config": {"node_tag_filter": "c"}, "pools": {"research": {}}},
        },
        "operations": [
            {
                "id": "op",
                "type": operation_type,
                "submit_time": 0,
                "spec": {
                    "pool": "research",
                    "pool_trees": ["physical"],
                    "tentative_pool_trees": ["cloud"],
                    "tentative_tree_eligibility": eligibility,
                },
                "tasks": [{"job_count": 20, "resources": job(cpu=1, memory="1Gi"), "duration": "60s"}],
            }
        ],
    }


def _run(
    tmp_path: Path, ratio: float, operation_type: str = "map"
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    out = tmp_path / f"{operation_type}-{ratio}"
    summary = run(_document(ratio, operation_type), out)
    return summary, events(out)


def _starts(log: list[dict[str, Any]], tree: str) -> list[float]:
    return [e["time"] for e in log if e["event"] == "allocation_started" and e["tree"] == tree]


def test_a_tentative_tree_runs_a_sample_first_then_more(tmp_path: Path) -> None:
    summary, log = _run(tmp_path, 10)
    assert summary["unsupported_options"] == []
    cloud = _starts(log, "cloud")
    assert len(cloud) > 2 and len(_starts(log, "physical")) + len(cloud) == 20
    first_end = min(e["time"] for e in log if e["event"] == "allocation_finished" and e["tree"] == "cloud")
    assert cloud[1] < first_end <= cloud[2]  # two at a time until the sample completed
    assert not [e for e in log if e["event"] == "operation_banned_in_tentative_tree"]


def test_a_slow_tentative_tree_is_banned_and_left(tmp_path: Path) -> None:
    _, fast = _run(tmp_path, 10)
    _, log = _run(tmp_path, 0.5)
    (ban,) = [e for e in log if e["event"] == "operation_banned_in_tentative_tree"]
    assert ban["tree"] == "cloud"
    assert [t for t in _starts(log, "cloud") if t > ban["time"]] == []
    assert len(_starts(log, "physical")) == 18  # the rest ran in the regular tree
    done = {e["event"]: e["time"] for e in log if e["event"] == "operation_completed"}
    fast_done = {e["event"]: e["time"] for e in fast if e["event"] == "operation_completed"}
    assert done["operation_completed"] > fast_done["operation_completed"]


def test_a_sort_operation_stays_in_its_regular_trees(tmp_path: Path) -> None:
    _, log = _run(tmp_path, 10, "sort")  # YTsaurus's non-tentative operation types by default
    assert _starts(log, "cloud") == []
