"""A live job gets exactly its GPUs (issue 30): a real scheduler, a real ``pooltree node`` with a configured list
of fake GPU device files, data center and InfiniBand cluster, and vanilla jobs started by the official client
that print their GPU variables, list ``/dev`` and read the device files they see."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from live_procs import ORCHID, Procs, client, vanilla
from polling import wait_for

from pooltree.node.isolation import probe_bwrap

pytestmark = pytest.mark.skipif(
    probe_bwrap() is not None, reason=f"bubblewrap cannot sandbox jobs here: {probe_bwrap()}"
)

REPORT = "echo CUDA=$CUDA_VISIBLE_DEVICES NVIDIA=$NVIDIA_VISIBLE_DEVICES >&2; ls /dev | grep nvidia >&2; cat /dev/nvidia[0-9]* >&2 2>/dev/null; true"


def test_live_jobs_get_their_own_fake_gpus(tmp_path: Path) -> None:
    devices = tmp_path / "devices"
    devices.mkdir()
    listed = []
    for index in range(4):
        (devices / f"gpu{index}").write_text(f"fake-gpu-{index}\n")
        (devices / f"gpu{index}").chmod(0o644)
        listed.append(f"{index}={devices / f'gpu{index}'}")
    procs = Procs(tmp_path)
    try:
        _, url = procs.scheduler(tmp_path / "data", 0)
        procs.spawn(
            "node", "--scheduler", url, "--address", "gpu-node", "--root", str(tmp_path / "nodes" / "gpu-node"),
            "--resources", "user_slots=4,cpu=4,memory=4Gi", "--memory-meter", "psutil",
            "--node-secret-file", str(procs.node_secret_file),
            "--gpu-devices", ",".join(listed), "--data-center", "dc-a", "--infiniband-cluster", "ib-1",
        )  # fmt: skip
        yt = client(url)
        total = f"{ORCHID}/default/resource_limits/gpu"
        wait_for(lambda: yt.exists(total) and yt.get(total) == 4, timeout=30)
        builder = vanilla(REPORT + "; sleep 1", 2)
        operation = yt.run_operation(
            builder.begin_task("two").command(REPORT + "; sleep 1").job_count(1).gpu_limit(2).end_task(),
            sync=False,
        )
        operation.wait()
        jobs = yt.list_jobs(operation.id)["jobs"]
        assert len(jobs) == 3 and {job["state"] for job in jobs} == {"completed"}
        seen: dict[str, list[str]] = {}
        for job in jobs:
            seen[job["id"]] = yt.get_job_stderr(operation.id, job["id"]).read().decode().splitlines()
        by_task = sorted(seen.values(), key=len)
        assert len(by_task[2]) == 5, by_task
        # the 'main' jobs ask for no GPU: no device file, no device named
        for lines in by_task[:2]:
            assert lines == ["CUDA= NVIDIA=void"]
        two = by_task[2]
        first, second = two[1], two[2]
        assert two[0] in ("CUDA=0,1 NVIDIA=0,1", "CUDA=2,3 NVIDIA=2,3")
        indices = two[0].split()[0].removeprefix("CUDA=").split(",")
        assert [first, second] == [f"nvidia{i}" for i in indices]
        assert two[3:] == [f"fake-gpu-{i}" for i in indices]
        # the scheduler reports the devices as YTsaurus does: exec_attributes/gpu_devices, get_job and list_jobs
        [gpu_job] = [job for job in jobs if seen[job["id"]] == two]
        expected = [{"device_number": int(i), "device_name": f"/dev/nvidia{i}"} for i in indices]
        assert gpu_job["exec_attributes"] == {"gpu_devices": expected}
        assert yt.get_job(operation.id, gpu_job["id"])["exec_attributes"] == {"gpu_devices": expected}
        assert all("exec_attributes" not in job for job in jobs if job is not gpu_job)
    finally:
        procs.close()


def test_a_scheduler_restart_keeps_the_running_jobs_gpus(tmp_path: Path) -> None:
    """Revival: a 1-GPU job runs on a 2-GPU node; the scheduler is killed and restarted on the same port; the node
    re-registers the job with its device, so the next 1-GPU job gets the other device."""
    import signal

    from live_procs import free_port

    devices = tmp_path / "devices"
    devices.mkdir()
    for index in range(2):
        (devices / f"gpu{index}").write_text(f"fake-gpu-{index}\n")
        (devices / f"gpu{index}").chmod(0o644)
    procs = Procs(tmp_path)
    try:
        port = free_port()
        scheduler, url = procs.scheduler(tmp_path / "data", port)
        procs.spawn(
            "node", "--scheduler", url, "--address", "gpu-node", "--root", str(tmp_path / "nodes" / "gpu-node"),
            "--resources", "user_slots=4,cpu=4,memory=4Gi", "--memory-meter", "psutil",
            "--node-secret-file", str(procs.node_secret_file),
            "--gpu-devices", f"0={devices / 'gpu0'},1={devices / 'gpu1'}",
        )  # fmt: skip
        yt = client(url)
        wait_for(
            lambda: yt.exists(f"{ORCHID}/default") and yt.get(f"{ORCHID}/default/resource_limits/gpu") == 2,
            30,
        )
        command = "echo $CUDA_VISIBLE_DEVICES >&2; sleep 600"
        holding = _gpu_operation(yt, command)

        def running(op_id: str) -> list[dict]:
            return [job for job in yt.list_jobs(op_id)["jobs"] if job["state"] == "running"]

        [before] = wait_for(lambda: running(holding), timeout=30)
        held = {"gpu_devices": [{"device_number": 0, "device_name": "/dev/nvidia0"}]}
        # a running job's devices come with the node's heartbeats
        wait_for(lambda: yt.get_job(holding, before["id"]).get("exec_attributes") == held, timeout=30)
        procs.stop(scheduler, signal.SIGKILL)
        procs.scheduler(tmp_path / "data", port)
        yt = client(url)
        wait_for(lambda: yt.exists(f"{ORCHID}/default/operations/{holding}"), timeout=30)
        second = _gpu_operation(yt, "echo $CUDA_VISIBLE_DEVICES >&2")
        wait_for(lambda: yt.get_operation(second, attributes=["state"])["state"] == "completed", timeout=60)
        [job] = yt.list_jobs(second)["jobs"]
        # lowest free device first: "1" means device 0 is still the revived job's, which kept running
        assert yt.get_job_stderr(second, job["id"]).read().decode() == "1\n"
        assert job["exec_attributes"] == {
            "gpu_devices": [{"device_number": 1, "device_name": "/dev/nvidia1"}]
        }
        assert [job["id"] for job in running(holding)] == [before["id"]]
        assert yt.get_job(holding, before["id"])["exec_attributes"] == held
    finally:
        procs.close()


def _gpu_operation(yt: object, command: str) -> str:
    import yt.wrapper as ytw

    builder = (
        ytw.VanillaSpecBuilder().begin_task("main").command(command).job_count(1).gpu_limit(1).end_task()
    )
    return yt.run_operation(builder, sync=False).id  # type: ignore[attr-defined]
