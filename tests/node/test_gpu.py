"""GPU devices on a node (issue 30): discovery, whole-device assignment, the job's view of its devices.

Fake device files stand for GPUs (a configured list, as ``pooltree node --gpu-devices`` takes it), so the same
code path runs on machines without NVIDIA hardware: each fake file holds its own name, and a job proves which
device it was given by reading ``/dev/nvidiaN`` inside its sandbox.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from node_support import executor, run, spec, wait_for_output

from pooltree.errors import ConfigError, PooltreeError
from pooltree.node import JobState
from pooltree.node.agent import NodeAgent
from pooltree.node.gpu import (
    GpuSlots,
    device_binds,
    discover_gpus,
    gpu_demand,
    gpu_environment,
    parse_gpu_devices,
)
from pooltree.node.isolation import probe_bwrap
from pooltree.node.job import JobSpec
from pooltree.node.service import gpu_limits
from pooltree.node.topology import NodeTopology
from pooltree.resources import GPU, vector

needs_bwrap = pytest.mark.skipif(probe_bwrap() is not None, reason=f"no bubblewrap sandbox: {probe_bwrap()}")


def fake_devices(root: Path, count: int) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    files = []
    for index in range(count):
        path = root / f"fake-gpu-{index}"
        path.write_text(f"fake-gpu-{index}\n")
        path.chmod(0o644)
        files.append(path)
    return files


def test_configured_list_forms_and_errors(tmp_path: Path) -> None:
    files = fake_devices(tmp_path, 3)
    explicit = parse_gpu_devices(f"2={files[0]}, 0={files[1]}")
    assert [(d.index, d.path) for d in explicit] == [(0, str(files[1])), (2, str(files[0]))]
    positional = parse_gpu_devices([str(files[0]), str(files[1])])
    assert [d.index for d in positional] == [0, 1]
    named = tmp_path / "nvidia7"
    named.write_text("")
    assert [d.index for d in parse_gpu_devices(str(named))] == [7]
    assert [d.sandbox_path for d in discover_gpus(f"5={files[2]}")] == ["/dev/nvidia5"]
    with pytest.raises(ConfigError, match=r"gpu_devices\[1\].*does not exist"):
        parse_gpu_devices(f"{files[0]},{tmp_path / 'missing'}")
    with pytest.raises(ConfigError, match=r"gpu_devices\[1\].*index 0 is given twice"):
        parse_gpu_devices(f"0={files[0]},0={files[1]}")
    with pytest.raises(ConfigError, match=r"gpu_devices\[0\].*device index"):
        parse_gpu_devices(f"x={files[0]}")


def test_discovery_falls_back_to_device_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))  # no nvidia-smi
    for name in ("nvidia1", "nvidia0", "nvidiactl", "nvidia-uvm", "null"):
        (tmp_path / name).write_text("")
    found = discover_gpus(None, device_directory=tmp_path)
    assert [(d.index, Path(d.path).name) for d in found] == [(0, "nvidia0"), (1, "nvidia1")]
    assert discover_gpus(None, device_directory=tmp_path / "empty") == ()


def test_nvidia_smi_names_the_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, GPU-aaa, NVIDIA A100'\necho '1, GPU-bbb, NVIDIA A100'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))
    found = discover_gpus(None, device_directory=tmp_path)
    assert [(d.index, d.uuid, d.name) for d in found] == [
        (0, "GPU-aaa", "NVIDIA A100"),
        (1, "GPU-bbb", "NVIDIA A100"),
    ]
    assert found[1].path == str(tmp_path / "nvidia1")


def test_whole_devices_lowest_first_returned_on_release(tmp_path: Path) -> None:
    slots = GpuSlots(
        parse_gpu_devices([str(p) for p in fake_devices(tmp_path, 4)]), control_files=["/somewhere/nvidiactl"]
    )
    assert [d.index for d in slots.acquire("a", 2)] == [0, 1]
    assert [d.index for d in slots.acquire("b", 1)] == [2]
    assert slots.acquire("a", 2) == slots.assigned("a")  # a re-sent start does not take more
    with pytest.raises(PooltreeError, match=r"needs 2 GPU.*1 free of 4"):
        slots.acquire("c", 2)
    assert slots.assigned("c") == ()
    slots.release("a")
    assert [d.index for d in slots.acquire("c", 2)] == [0, 1]
    assert slots.assignments() == {"b": [2], "c": [0, 1]}
    assert gpu_environment(slots.assigned("c")) == {
        "NVIDIA_VISIBLE_DEVICES": "0,1",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    assert gpu_environment(()) == {"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_VISIBLE_DEVICES": ""}
    binds = device_binds(slots.assigned("b"), slots.control_files)
    assert binds == [
        (str(tmp_path / "fake-gpu-2"), "/dev/nvidia2"),
        ("/somewhere/nvidiactl", "/dev/nvidiactl"),
    ]
    assert device_binds((), slots.control_files) == []


def test_gpu_demand_is_whole_devices() -> None:
    assert gpu_demand(0.0) == 0 and gpu_demand(8.0) == 8
    for bad in (0.5, -1.0, float("nan")):
        with pytest.raises(ConfigError, match="whole number of GPUs"):
            gpu_demand(bad)


def test_node_gpu_limit_is_its_device_count() -> None:
    limits = vector(user_slots=4, cpu=4, gpu=0, memory=1, network=100)
    assert gpu_limits(limits, {}, 8)[GPU] == 8
    assert gpu_limits(limits, {"gpu": 2}, 8)[GPU] == 0  # given: kept as given (here the vector's 0)
    with pytest.raises(ConfigError, match=r"resources\.gpu"):
        gpu_limits(vector(gpu=9), {"gpu": 9}, 8)


def test_topology_tags_and_heartbeat_fields() -> None:
    topology = NodeTopology(data_center="dc-a", infiniband_cluster="ib1")
    assert topology.tags() == ("dc-a", "infiniband_cluster:ib1")
    assert topology.heartbeat_fields() == {"data_center": "dc-a", "infiniband_cluster": "ib1"}
    assert NodeTopology().tags() == () and NodeTopology().heartbeat_fields() == {}
    with pytest.raises(ConfigError, match="data_center"):
        NodeTopology(data_center="bad name")


LIST_DEVICES = "echo CUDA=$CUDA_VISIBLE_DEVICES NVIDIA=$NVIDIA_VISIBLE_DEVICES; ls /dev | grep nvidia; "


@needs_bwrap
def test_jobs_get_exactly_their_devices(tmp_path: Path) -> None:
    """Three fake GPUs: a 2-GPU job and a 1-GPU job each see only their own device files and variables; a job
    that asks for more than is free is aborted (``waiting_timeout``) once its waiting timeout passes; the devices
    come back when a job ends."""
    files = fake_devices(tmp_path / "devices", 3)
    control = tmp_path / "devices" / "nvidiactl"
    control.write_text("ctl\n")
    control.chmod(0o644)
    slots = GpuSlots(parse_gpu_devices([str(p) for p in files]), control_files=[str(control)])
    resources = {n: vector(user_slots=1, gpu=n) for n in (0, 1, 2)}

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, gpus=slots) as ex:
            agent = NodeAgent("n1", ex, vector(user_slots=4, cpu=4, gpu=3, memory=2**30, network=100))
            hold = LIST_DEVICES + "cat /dev/nvidia*[0-9]; echo ready; sleep 30"
            await ex.start(spec("two", hold, resources=resources[2]))
            await ex.start(spec("one", hold, resources=resources[1]))
            await wait_for_output(ex, "two", b"ready")
            await wait_for_output(ex, "one", b"ready")
            heartbeat = agent.build_heartbeat()
            await ex.start(
                spec("greedy", LIST_DEVICES, resources=resources[2], waiting_for_resources_timeout=0.3)
            )
            greedy = await ex.wait("greedy", 15)
            await ex.start(spec("none", LIST_DEVICES + "ls /dev/nvidiactl", resources=resources[0]))
            none = await ex.wait("none", 15)
            outputs = {job: ex.stdout(job).decode() for job in ("two", "one")}
            ex.abort("two", "test")
            await ex.wait("two", 15)
            await ex.start(spec("after", LIST_DEVICES, resources=resources[2]))
            after = await ex.wait("after", 15)
            return outputs, heartbeat, greedy, (none, ex.stdout("none").decode()), (after, ex.stdout("after"))

    outputs, heartbeat, greedy, (none, none_out), (after, after_out) = run(scenario(), 60)
    two, one = outputs["two"].splitlines(), outputs["one"].splitlines()
    assert two[:3] == ["CUDA=0,1 NVIDIA=0,1", "nvidia0", "nvidia1"] and two[3] == "nvidiactl"
    assert two[4:6] == ["fake-gpu-0", "fake-gpu-1"]
    assert one[:3] == ["CUDA=2 NVIDIA=2", "nvidia2", "nvidiactl"] and one[3] == "fake-gpu-2"
    running = {job["job_id"]: job.get("gpu_devices") for job in heartbeat["running_jobs"]}
    assert running == {"two": [0, 1], "one": [2]}
    assert [d["device"] for d in heartbeat["gpu_devices"]] == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]
    assert greedy.state is JobState.ABORTED and greedy.abort_reason == "waiting_timeout"
    assert "needs 2 GPU(s) but the node has 0 free of 3; waited 0.3 s" in str(greedy.error)
    assert none.state is JobState.FAILED  # no device and no control file in a job without GPUs
    assert none_out.splitlines() == ["CUDA= NVIDIA=void"]
    assert after.state is JobState.COMPLETED and after_out.decode().startswith(
        "CUDA=0,1 NVIDIA=0,1\nnvidia0\n"
    )
    assert slots.assignments() == {}  # every job ended (the executor aborted "one" on exit)


def test_no_gpus_no_variables(tmp_path: Path) -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path) as ex:
            await ex.start(spec("plain", "echo CUDA=${CUDA_VISIBLE_DEVICES-unset}"))
            await ex.wait("plain", 15)
            return ex.stdout("plain").decode()

    assert run(scenario()) == "CUDA=unset\n"
    assert GpuSlots().count == 0


@needs_bwrap
def test_a_job_waits_for_devices_another_job_still_holds(tmp_path: Path) -> None:
    """YTsaurus's allocation waiting for resources on its node: a job whose devices are held by a job being
    stopped (a preempted one finishing) starts once they are released, within its waiting timeout."""
    files = fake_devices(tmp_path / "devices", 2)
    slots = GpuSlots(parse_gpu_devices([str(p) for p in files]), control_files=())
    both = vector(user_slots=1, gpu=2)

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, gpus=slots) as ex:
            await ex.start(spec("holder", "echo ready; sleep 30", resources=both))
            await wait_for_output(ex, "holder", b"ready")
            await ex.start(spec("next", LIST_DEVICES, resources=both, waiting_for_resources_timeout=20.0))
            waiting = slots.assignments()
            ex.abort("holder", "preemption")
            holder = await ex.wait("holder", 15)
            after = await ex.wait("next", 20)
            return waiting, holder, after, ex.stdout("next").decode()

    waiting, holder, after, out = run(scenario(), 60)
    assert waiting == {"holder": [0, 1]}  # "next" waited
    assert holder.state is JobState.ABORTED
    assert after.state is JobState.COMPLETED and out.startswith("CUDA=0,1 NVIDIA=0,1")


def test_job_spec_carries_the_waiting_timeout() -> None:
    parsed = JobSpec.from_dict(
        {"job_id": "j", "operation_id": "o", "command": "true", "waiting_for_resources_timeout": 60}
    )
    assert parsed.waiting_for_resources_timeout == 60.0
    with pytest.raises(ConfigError, match="waiting_for_resources_timeout"):
        JobSpec.from_dict(
            {"job_id": "j", "operation_id": "o", "command": "true", "waiting_for_resources_timeout": -1}
        )
