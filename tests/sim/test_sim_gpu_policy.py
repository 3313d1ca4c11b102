"""The GPU scheduling policy driven by the simulator (issue 30): ``policy_kind: gpu`` with
``gpu_scheduling_policy: {mode: allocating}`` on four 8-GPU nodes in two data centers, a pool of 1-GPU jobs
filling every GPU, then a gang of two full-host jobs (the scenario of ``test_sim_segments.py``).

The plan binds the gang to one data center; every allocation starts from an assignment of the plan (stage
``gpu``); once the gang waited longer than ``full_host_aggressive_preemption_timeout`` the 1-GPU allocations on
two hosts of its data center are preempted (``full_host_aggressive_preemption``, or ``preemption`` of
assignments above the small operation's fair share) and the gang starts there; nothing is started on its hosts
for another operation while it runs. In ``dry_run`` mode the classic policy schedules and the plan is shown."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from simkit import events, run
from test_sim_segments import document

GPU_POLICY = {
    "mode": "allocating",
    "module_type": "data_center",
    "modules": ["dc-a", "dc-b"],
    "plan_update_period": "1s",
    "full_host_aggressive_preemption_timeout": "20s",
}


def gpu_document(mode: str = "allocating", kind: str = "gpu") -> dict[str, Any]:
    doc = copy.deepcopy(document(False))
    config = doc["pool_trees"]["gpu"]["config"]
    config["policy_kind"] = kind
    config["gpu_scheduling_policy"] = dict(GPU_POLICY, mode=mode)
    return doc


def test_the_plan_binds_the_gang_to_one_data_center_and_clears_two_hosts(tmp_path: Path) -> None:
    summary = run(gpu_document(), tmp_path)
    assert summary["unsupported_options"] == []
    plan = summary["gpu_assignment_plan"]["gpu"]
    assert plan["planned_assignments_total"] > 0
    log = events(tmp_path)
    started = [e for e in log if e["event"] == "allocation_started"]
    assert started and {e["stage"] for e in started} == {"gpu"}
    gang = [e for e in started if e["operation_id"] == "gang-op"]
    assert len(gang) == 2 and len({e["node"] for e in gang}) == 2
    assert len({e["node"][0] for e in gang}) == 1  # both full hosts in one data center
    first = min(e["time"] for e in gang)
    assert 60.0 < first < 200.0
    reasons = {
        e["reason"] for e in log if e["event"] == "allocation_preempted" and e["operation_id"] == "small-op"
    }
    assert reasons and reasons <= {"full_host_aggressive_preemption", "preemption"}
    preemptors = {
        e.get("preemptor_operation_id")
        for e in log
        if e["event"] == "allocation_preempted" and e["operation_id"] == "small-op"
    }
    assert preemptors == {"gang-op"}  # the operation the plan preempted them for
    hosts = {e["node"] for e in gang}
    intruders = [
        e
        for e in started
        if e["operation_id"] == "small-op" and e["node"] in hosts and first <= e["time"] < first + 500
    ]
    assert intruders == []


def test_dry_run_plans_while_the_classic_policy_schedules(tmp_path: Path) -> None:
    summary = run(gpu_document("dry_run", "classic"), tmp_path)
    assert summary["unsupported_options"] == []
    assert summary["gpu_assignment_plan"]["gpu"]["planned_assignments_total"] > 0
    started = [e for e in events(tmp_path) if e["event"] == "allocation_started"]
    assert "gpu" not in {e["stage"] for e in started}


def _decisions(path: Path) -> list[tuple]:
    return [
        (e["event"], e["time"], e["operation_id"], e.get("node") or e.get("node_address"), e.get("reason"))
        for e in events(path)
        if e["event"] in ("allocation_started", "allocation_preempted")
    ]


def test_skipping_idle_heartbeats_decides_the_same_with_segments_and_the_gpu_policy(tmp_path: Path) -> None:
    """Nodes of a module-aware segment with nothing bound there that fits, and nodes with no work in the GPU plan,
    skip their heartbeats (and sleep until an update gives them work): the decisions are those of a run that
    processes every heartbeat."""
    segments = document(True)
    for name, doc in (("segments", segments), ("gpu", gpu_document())):
        runs = []
        for skip in (True, False):
            variant = copy.deepcopy(doc)
            variant["scheduler"]["skip_idle_heartbeats"] = skip
            out = tmp_path / f"{name}-{skip}"
            summary = run(variant, out)
            runs.append((_decisions(out), summary["engine"]["heartbeats_skipped"]))
        (skipped, skipped_count), (processed, none_skipped) = runs
        assert skipped == processed and skipped_count > 0 and none_skipped == 0
