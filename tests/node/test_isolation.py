"""Jobs cannot touch the node (issue 12): each attack a job makes on the daemon fails under the default isolation.

Real jobs, real files: the scheduler's SQLite store made by the scheduler's own start-up code, a world-writable
directory outside the sandbox, another job's sandbox, the node agent (this test process) and a root process.
Per-slot uids need root; the tests skip (saying so) when the suite does not run as root or when bubblewrap
cannot start a sandbox on this host.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from node_support import executor, run, spec, wait_for_output

from pooltree.cli.live import store_url_for
from pooltree.node import JobState
from pooltree.node.isolation import JobIsolation, Mode, probe_bwrap
from pooltree.server.store import open_store

if os.geteuid() != 0:
    pytestmark = pytest.mark.skip(
        reason="per-slot job uids need the node to run as root; this suite is not root"
    )
elif (why := probe_bwrap()) is not None:
    pytestmark = pytest.mark.skip(reason=f"bubblewrap cannot sandbox jobs here: {why}")


@pytest.fixture
def outside() -> Path:
    """A directory outside /tmp (which the sandbox replaces by its own tmp), so that only ownership, modes and the
    read-only bind protect what is in it: a job sees it at the same path as the node does."""
    path = Path("/run/pooltree-tests") / uuid.uuid4().hex
    path.mkdir(parents=True)
    os.chmod(path.parent, 0o755)
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_default_isolation_as_root_is_per_slot_uid_in_bubblewrap(tmp_path: Path) -> None:
    isolation = JobIsolation(tmp_path)
    assert isolation.mode is Mode.BWRAP_UID and isolation.warning is None
    first, second = isolation.acquire("a"), isolation.acquire("b")
    assert first is not None and second is not None and first.uid != second.uid
    assert min(first.uid, second.uid) >= isolation.uid_base
    # A second node on the same host never gets the uids this one holds.
    other = JobIsolation(tmp_path / "other")
    third = other.acquire("c")
    assert third is not None and third.uid not in (first.uid, second.uid)
    isolation.release("a")
    isolation.release("b")
    other.release("c")


def test_job_cannot_read_the_schedulers_database(tmp_path: Path, outside: Path) -> None:
    data = outside / "data"
    store = open_store(store_url_for(None, data))  # the scheduler's own start-up: data dir + SQLite file
    store.close()
    database = data / "scheduler.db"
    assert database.exists()

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path) as ex:
            command = (
                f"id -u; ls {data}; cat {database} > stolen && echo READ; head -c 16 {database}; echo end"
            )
            await ex.start(spec("thief", command))
            result = await ex.wait("thief", 15)
            return result, ex.stdout("thief").decode(), ex.stderr("thief").decode()

    result, stdout, stderr = run(scenario())
    assert result.state is JobState.COMPLETED
    uid = int(stdout.split()[0])
    assert uid != 0 and uid != os.geteuid()
    assert "READ" not in stdout and "SQLite" not in stdout, stdout
    assert "Permission denied" in stderr, stderr


def test_job_cannot_write_outside_its_sandbox_and_tmp(tmp_path: Path, outside: Path) -> None:
    open_dir = outside / "world-writable"
    open_dir.mkdir()
    os.chmod(open_dir, 0o1777)  # anyone may write here: only the sandbox's read-only / stops the job
    node_root = tmp_path / "slots"
    command = (
        f"touch {open_dir}/x && echo WROTE-OPEN; "
        f"touch {node_root}/x && echo WROTE-ROOT; "
        "touch /etc/pooltree-job && echo WROTE-ETC; "
        "touch /tmp/mine && echo TMP-OK; touch $TMPDIR/t && echo TMPDIR-OK; touch ./here && echo SANDBOX-OK"
    )
    with_executor = executor(tmp_path)

    async def scenario():  # type: ignore[no-untyped-def]
        async with with_executor as ex:
            await ex.start(spec("writer", command, keep_sandbox=True))
            await ex.wait("writer", 15)
            return ex.stdout("writer").decode(), ex.stderr("writer").decode()

    stdout, stderr = run(scenario())
    assert "WROTE" not in stdout, stdout
    assert {"TMP-OK", "TMPDIR-OK", "SANDBOX-OK"} <= set(stdout.split()), (stdout, stderr)
    assert not (open_dir / "x").exists() and not Path("/etc/pooltree-job").exists()
    assert not (node_root / "x").exists()
    # /tmp inside the job is the sandbox's own tmp
    assert (node_root / "writer" / "sandbox" / "tmp" / "mine").exists()
    assert not Path("/tmp/mine").exists() or Path("/tmp/mine").stat().st_uid == 0


def test_job_cannot_list_or_read_another_jobs_sandbox(tmp_path: Path) -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path) as ex:
            await ex.start(spec("victim", "echo secret > secret.txt; echo ready; sleep 30"))
            await wait_for_output(ex, "victim", b"ready")
            victim = tmp_path / "slots" / "victim" / "sandbox"
            command = (
                f"ls {victim} && echo LISTED; cat {victim}/secret.txt && echo READ; "
                f"ls {tmp_path / 'slots'} && echo LISTED-ROOT; echo end"
            )
            await ex.start(spec("snoop", command))
            result = await ex.wait("snoop", 15)
            ex.abort("victim", "test over")
            await ex.wait("victim", 15)
            return result, ex.stdout("snoop").decode(), ex.stderr("snoop").decode()

    result, stdout, _stderr = run(scenario())
    assert result.state is JobState.COMPLETED
    assert "end" in stdout and "secret" not in stdout, stdout
    assert "LISTED" not in stdout and "READ" not in stdout, stdout
    assert "victim" not in stdout, stdout


def test_job_cannot_signal_the_node_or_other_processes(tmp_path: Path) -> None:
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a root process on the host
    try:

        async def scenario():  # type: ignore[no-untyped-def]
            async with executor(tmp_path) as ex:
                command = (
                    f"kill -9 {os.getpid()} && echo KILLED-NODE; kill -9 {bystander.pid} && echo KILLED-OTHER; "
                    "kill -9 1 && echo KILLED-INIT; ps -e -o pid= 2>/dev/null | wc -l; echo end"
                )
                await ex.start(spec("assassin", command))
                result = await ex.wait("assassin", 15)
                return result, ex.stdout("assassin").decode()

        result, stdout = run(scenario())
        assert result.state is JobState.COMPLETED, result
        assert "KILLED" not in stdout, stdout
        assert "end" in stdout
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait(5)


def test_interruption_signal_reaches_the_job_inside_the_sandbox(tmp_path: Path) -> None:
    """The operation's interruption_signal goes to the job's processes, not to bubblewrap's monitor (which would
    die of it and take the job down): the job traps it and completes."""
    command = "trap 'echo caught; exit 0' USR1; echo ready; while :; do sleep 0.05; done"

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path) as ex:
            await ex.start(spec("gentle", command, interruption_signal="SIGUSR1"))
            await wait_for_output(ex, "gentle", b"ready")
            ex.interrupt("gentle", 10, "preemption")
            result = await ex.wait("gentle", 15)
            return result, ex.stdout("gentle")

    result, stdout = run(scenario())
    assert result.state is JobState.COMPLETED and result.interruption_reason == "preemption"
    assert b"caught" in stdout


def test_killed_by_a_signal_is_reported_as_the_signal(tmp_path: Path) -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path) as ex:
            await ex.start(spec("self-kill", "kill -SEGV $$"))
            return await ex.wait("self-kill", 15)

    result = run(scenario())
    assert result.state is JobState.FAILED and result.exit_code == -signal.SIGSEGV
    assert result.error["inner_errors"][0]["attributes"]["signal_name"] == "SIGSEGV"


def test_warning_names_what_is_lost_without_the_sandbox(tmp_path: Path) -> None:
    isolation = JobIsolation(tmp_path, mode="uid")
    assert (
        isolation.warning is not None and "/tmp" in isolation.warning and "every process" in isolation.warning
    )
    assert "kill -9" not in isolation.warning, "the job's keeper kills every process of it with the node"
    assert JobIsolation(tmp_path, mode="none").warning is not None


def test_a_relative_node_root_runs_isolated_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pooltree local`` keeps its nodes under the relative ``.pooltree``: bubblewrap must get absolute paths
    (it answered "Can't find source path .pooltree/nodes/..." and every job failed)."""
    monkeypatch.chdir(tmp_path)

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(Path("relative")) as ex:
            await ex.start(spec("rel", "echo inside"))
            result = await ex.wait("rel", 15)
            return result, ex.stdout("rel").decode(), ex.stderr("rel").decode()

    result, stdout, stderr = run(scenario())
    assert result.state is JobState.COMPLETED, stderr
    assert stdout.strip() == "inside"
