"""Fast job starts: start() returns before the launch, exits are swept in batches, directories go to a trash.

Every guarantee of the slow path must hold on the fast one: nothing of a job outlives it, an abort or a node
shutdown that arrives while the job is still being launched wins, and the node's directory is left clean.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

import pytest
from node_support import executor, gone, py, run, spec

from pooltree.errors import ConfigError
from pooltree.node import JobState
from pooltree.node.memory import ProcessTreeMeter, read_memory, read_process


def test_many_short_jobs_complete_and_leave_a_clean_root(tmp_path):
    jobs = 40

    async def scenario():
        ex = executor(tmp_path)
        slots = asyncio.Semaphore(8)

        async def one(index: int) -> JobState:
            async with slots:
                await ex.start(spec(f"job-{index}", "echo out; echo err >&2"))
                result = await ex.wait(f"job-{index}", 20)
            assert ex.stdout(f"job-{index}") == b"out\n" and ex.stderr(f"job-{index}") == b"err\n"
            assert not (tmp_path / "slots" / f"job-{index}" / "sandbox").exists()
            ex.forget(f"job-{index}")
            assert ex.result(f"job-{index}") is None
            return result.state

        states = await asyncio.gather(*(one(index) for index in range(jobs)))
        await ex.shutdown()
        return states

    states = run(scenario(), timeout=60)
    assert states == [JobState.COMPLETED] * jobs
    root = tmp_path / "slots"
    assert sorted(path.name for path in root.iterdir()) == [".trash"]
    assert list((root / ".trash").iterdir()) == [], "the background deletions finish by shutdown"


def test_start_returns_before_the_launch_and_wait_running_gives_the_root_pid(tmp_path):
    async def scenario():
        async with executor(tmp_path, isolation="none") as ex:  # $PPID must be the host's pid
            began = time.monotonic()
            await ex.start(spec("job-pid", "echo $PPID"))  # the root is the job's keeper, the shell's parent
            returned = time.monotonic() - began
            assert ex.running_job_ids() == ["job-pid"]
            pid = await ex.wait_running("job-pid", 10)
            result = await ex.wait("job-pid", 10)
            after = await ex.wait_running("job-pid")
            return returned, pid, result, ex.stdout("job-pid"), after

    returned, pid, result, stdout, after = run(scenario())
    assert returned < 0.5
    assert result.state is JobState.COMPLETED
    assert stdout == f"{pid}\n".encode()
    assert after is None, "a finished job has no running process"


def test_abort_before_the_launch_finishes_kills_the_job(tmp_path):
    async def scenario():
        async with executor(tmp_path, abort_grace=30) as ex:
            await ex.start(spec("job-early-abort", "sleep 300"))
            ex.abort("job-early-abort", "user_request")
            pid = await ex.wait_running("job-early-abort", 10)
            started = time.monotonic()
            result = await ex.wait("job-early-abort", 10)
            return result, pid, time.monotonic() - started

    result, pid, elapsed = run(scenario())
    assert result.state is JobState.ABORTED and result.abort_reason == "user_request"
    assert elapsed < 5, "killed at once, not after the 30 s grace"
    assert pid is None or gone(pid)


def test_shutdown_while_launching_aborts_the_job(tmp_path):
    async def scenario():
        ex = executor(tmp_path)
        await ex.start(spec("job-early-shutdown", "sleep 300"))
        await ex.shutdown()
        return ex.result("job-early-shutdown")

    result = run(scenario())
    assert result is not None
    assert result.state is JobState.ABORTED and result.abort_reason == "node_shutdown"


def test_process_in_another_group_of_the_session_is_killed_at_exit(tmp_path):
    # The child leaves the job's process group (not its session) and the job exits at once: the group kill
    # misses it, the exit sweep must find it through the session.
    command = py(
        "import subprocess\n"
        "child = subprocess.Popen(['sleep', '303'], process_group=0)\n"
        "print(child.pid, flush=True)\n"
    )

    async def scenario():
        async with executor(tmp_path, memory_sample_period=30, isolation="none") as ex:  # host pids
            await ex.start(spec("job-group", command))
            result = await ex.wait("job-group", 10)
            return result, int(ex.stdout("job-group").split()[0])

    result, pid = run(scenario())
    assert result.state is JobState.COMPLETED
    assert gone(pid)


def test_job_ids_starting_with_a_dot_are_reserved():
    with pytest.raises(ConfigError, match="job_id"):
        spec(".trash", "true")


def test_read_process_survives_odd_command_names(tmp_path):
    odd = tmp_path / "a) (b c"
    odd.symlink_to("/bin/sleep")
    process = subprocess.Popen([str(odd), "5"], start_new_session=True)
    try:
        entry = read_process(process.pid)
        assert entry is not None
        assert entry.ppid == os.getpid()
        assert entry.sid == process.pid == entry.pgid
        assert not entry.zombie
        memory = read_memory(process.pid)
        assert memory is not None and memory[0] > 0 and memory[1] >= memory[0]
    finally:
        process.kill()
        process.wait()
    assert read_process(process.pid) is None
    assert read_memory(process.pid) is None


def test_meter_finds_members_born_after_earlier_scans():
    # Scans remember foreign processes and skip them; members born later must still be found.
    meter = ProcessTreeMeter()
    process = subprocess.Popen(
        ["/bin/sh", "-c", "sleep 0.3; sleep 5 & sleep 5 & wait"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        meter.attach("job-late", process.pid)
        first = meter.leftovers(["job-late"])["job-late"]
        assert process.pid in first and 1 not in first
        deadline = time.monotonic() + 10
        later = first
        while len(later) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
            later = meter.leftovers(["job-late"])["job-late"]
        assert len(later) == 3, later
        assert 1 not in later and os.getpid() not in later
        sample = meter.sample(["job-late"])["job-late"]
        assert set(sample.pids) == set(later) and sample.current > 0
    finally:
        os.killpg(process.pid, 9)
        process.wait()
    meter.release("job-late")
    assert meter.leftovers(["job-late"]) == {}


def test_a_forgotten_job_id_can_start_again(tmp_path):
    # forget deletes in the background; a new start of the same id must not lose its fresh directory to it.
    async def scenario():
        async with executor(tmp_path) as ex:
            outputs = []
            for round_index in range(20):
                await ex.start(spec("job-again", f"echo round {round_index}"))
                result = await ex.wait("job-again", 10)
                outputs.append((result.state, ex.stdout("job-again")))
                ex.forget("job-again")
            return outputs

    outputs = run(scenario())
    assert outputs == [(JobState.COMPLETED, f"round {index}\n".encode()) for index in range(20)]


def test_exit_is_noticed_without_pidfds(tmp_path, monkeypatch):
    # Kernels before 5.3 have no pidfd_open: the exit is awaited with waitid(WNOWAIT) in a thread instead,
    # and the job's group is still killed before the root is reaped.
    monkeypatch.delattr(os, "pidfd_open")

    async def scenario():
        async with executor(tmp_path, isolation="none") as ex:  # the pid printed is the host's
            await ex.start(spec("job-nopidfd", "sleep 304 & echo $!; exit 7"))
            result = await ex.wait("job-nopidfd", 10)
            return result, int(ex.stdout("job-nopidfd").split()[0])

    result, pid = run(scenario())
    assert result.state is JobState.FAILED and result.exit_code == 7
    assert gone(pid)
