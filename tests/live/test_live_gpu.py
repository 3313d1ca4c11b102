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
    finally:
        procs.close()
