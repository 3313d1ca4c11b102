"""Scheduling segments in the live service (issue 30): two real GPU nodes (8 fake devices each) in two data
centers, the tree's ``scheduling_segments`` set with the official client, a full-host gang and a 1-GPU job.

The gang is put into ``large_gpu`` and bound to a data center; that data center's node moves to ``large_gpu``
(the orchid shows both); the gang's job runs there with all 8 devices; a 1-GPU job runs only on the other node."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import yt.wrapper as ytw
from live_procs import ORCHID, Procs, client
from polling import wait_for

from pooltree.node.isolation import probe_bwrap

pytestmark = pytest.mark.skipif(
    probe_bwrap() is not None, reason=f"bubblewrap cannot sandbox jobs here: {probe_bwrap()}"
)

REPORT = "echo $CUDA_VISIBLE_DEVICES >&2; sleep 2"


def _task(job_count: int, gpu: int) -> ytw.VanillaSpecBuilder:
    task = ytw.VanillaSpecBuilder().begin_task("main").command(REPORT).job_count(job_count).gpu_limit(gpu)
    return task.end_task()


def _node(procs: Procs, url: str, tmp_path: Path, name: str, data_center: str) -> None:
    devices = tmp_path / f"devices-{name}"
    devices.mkdir()
    listed = []
    for index in range(8):
        (devices / f"gpu{index}").write_text("")
        listed.append(f"{index}={devices / f'gpu{index}'}")
    procs.spawn(
        "node", "--scheduler", url, "--address", name, "--root", str(tmp_path / "nodes" / name),
        "--resources", "user_slots=8,cpu=8,memory=8Gi", "--memory-meter", "psutil",
        "--node-secret-file", str(procs.node_secret_file),
        "--gpu-devices", ",".join(listed), "--data-center", data_center,
    )  # fmt: skip


def _gpu_cluster(procs: Procs, tmp_path: Path) -> tuple[Any, str]:
    """A scheduler and two 8-GPU nodes in dc-a and dc-b, the default tree's main resource gpu: (client, orchid
    path of the tree)."""
    _, url = procs.scheduler(tmp_path / "data", 0)
    _node(procs, url, tmp_path, "gpu-a", "dc-a")
    _node(procs, url, tmp_path, "gpu-b", "dc-b")
    yt = client(url)
    tree = f"{ORCHID}/default"
    wait_for(lambda: yt.exists(tree) and yt.get(f"{tree}/resource_limits/gpu") == 16, timeout=30)
    yt.set("//sys/pool_trees/default/@config/main_resource", "gpu")
    return yt, tree


def test_live_full_host_gang_gets_a_large_gpu_node_of_one_data_center(tmp_path: Path) -> None:
    procs = Procs(tmp_path)
    try:
        yt, tree = _gpu_cluster(procs, tmp_path)
        yt.set(
            "//sys/pool_trees/default/@config/scheduling_segments",
            {
                "mode": "large_gpu",
                "data_centers": ["dc-a", "dc-b"],
                "initialization_timeout": 0,
                "unsatisfied_segments_rebalancing_timeout": 100,
                "manage_period": 100,
            },
        )
        wait_for(lambda: yt.exists(f"{tree}/scheduling_segments"), timeout=30)
        gang = yt.run_operation(_task(1, 8).spec({"is_gang": True}), sync=False)
        operation = f"{tree}/operations/{gang.id}"
        wait_for(
            # The orchid names an operation's module only once the segments manager has bound it (as YTsaurus's
            # orchid omits an unset module), so the operation may be listed before the key exists.
            lambda: yt.exists(operation) and yt.get(operation).get("scheduling_segment_module") == "dc-a",
            30,
        )
        assert yt.get(f"{operation}/scheduling_segment") == "large_gpu"
        gang.wait()
        jobs = yt.list_jobs(gang.id)["jobs"]
        assert [job["address"] for job in jobs] == ["gpu-a"]
        assert yt.get_job_stderr(gang.id, jobs[0]["id"]).read().decode() == "0,1,2,3,4,5,6,7\n"
        nodes = yt.get(f"{tree}/scheduling_segments/nodes")
        assert nodes["gpu-a"] == {"scheduling_segment": "large_gpu", "scheduling_segment_module": "dc-a"}
        assert nodes["gpu-b"]["scheduling_segment"] == "default"
        small = yt.run_operation(_task(3, 1), sync=True)
        addresses = {job["address"] for job in yt.list_jobs(small.id)["jobs"]}
        assert addresses == {"gpu-b"}  # gpu-a stays large_gpu until the imbalance outlasts the timeout
    finally:
        procs.close()


def test_live_gpu_policy_plans_the_gang_onto_one_host_with_all_its_devices(tmp_path: Path) -> None:
    """The GPU scheduling policy in the live service: ``policy_kind: gpu`` set with the official client, a
    one-job full-host gang runs on one host with all 8 devices (``exec_attributes/gpu_devices`` says which), 1-GPU
    jobs run where the plan puts them, and the orchid's ``gpu_assignment_plan`` counts the planned assignments."""
    procs = Procs(tmp_path)
    try:
        yt, tree = _gpu_cluster(procs, tmp_path)
        yt.set(
            "//sys/pool_trees/default/@config/gpu_scheduling_policy",
            {"mode": "allocating", "modules": ["dc-a", "dc-b"], "plan_update_period": 100},
        )
        yt.set("//sys/pool_trees/default/@config/policy_kind", "gpu")
        plan = f"{tree}/gpu_assignment_plan"
        wait_for(lambda: yt.exists(plan) and yt.get(f"{plan}/policy_kind") == "gpu", timeout=30)
        gang = yt.run_operation(_task(1, 8).spec({"is_gang": True}), sync=False)
        gang.wait()
        [job] = yt.list_jobs(gang.id)["jobs"]
        assert yt.get_job_stderr(gang.id, job["id"]).read().decode() == "0,1,2,3,4,5,6,7\n"
        assert [d["device_number"] for d in job["exec_attributes"]["gpu_devices"]] == list(range(8))
        small = yt.run_operation(_task(3, 1), sync=True)
        assert len(yt.list_jobs(small.id)["jobs"]) == 3
        statistics = yt.get(f"{plan}/statistics")
        assert statistics["planned_assignments_total"] >= 4  # the gang's host and the three 1-GPU jobs
        assert set(yt.get(f"{plan}/modules")) == {"dc-a", "dc-b"}
    finally:
        procs.close()
