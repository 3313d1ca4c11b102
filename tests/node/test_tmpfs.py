"""A task's ``tmpfs_path`` / ``tmpfs_volumes`` on the node: a real tmpfs of the asked size in the job's sandbox,
the job's own and gone with it, where the node sandboxes jobs (a slot's keeper mounts it in the job's mount
namespace; a job in a bubblewrap of its own gets it from bubblewrap); a plain directory where it cannot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from node_support import executor, run, spec

from pooltree.node import JobState
from pooltree.node.bubblewrap import find_bubblewrap
from pooltree.node.files import JobFile
from pooltree.node.isolation import JobIsolation
from pooltree.node.job import TmpfsVolume

MiB = 1024 * 1024
PROBE = (
    "stat -f -c 'type=%T' data/tmpfs; df -B1 --output=size data/tmpfs | tail -1 | tr -d ' ' | sed 's/^/size=/'; "
    "echo kept > data/tmpfs/file && echo wrote; "
    "head -c 3145728 /dev/zero > data/tmpfs/big 2>/dev/null && echo big-fits || echo big-refused; "
    "echo owner=$(stat -c %u data/tmpfs) me=$(id -u)"
)


def _sandboxed() -> list[tuple[str, bool]]:
    if os.geteuid() != 0 or find_bubblewrap().found is None:
        return []
    return [("sandbox", True), ("sandbox", False)]


def _lines(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.replace(" ", "\n").splitlines() if "=" in line)


@pytest.mark.parametrize(("mode", "slots"), _sandboxed(), ids=lambda v: str(v))
def test_a_sandboxed_job_gets_a_tmpfs_of_its_size(tmp_path: Path, mode: str, slots: bool) -> None:
    isolation = JobIsolation(tmp_path / "slots", mode=mode)

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation=isolation, sandbox_slots=slots) as ex:
            assert ex.sandbox_slots is slots
            await ex.start(spec("t", PROBE, tmpfs=(TmpfsVolume("data/tmpfs", 2 * MiB),)))
            return await ex.wait("t", 30), ex.stdout("t").decode(), ex.stderr("t").decode()

    result, stdout, stderr = run(scenario(), 60)
    assert result.state is JobState.COMPLETED, stderr
    seen = _lines(stdout)
    assert seen["type"] == "tmpfs" and int(seen["size"]) == 2 * MiB, stdout
    assert "wrote" in stdout and "big-refused" in stdout, "a 3 MiB file does not fit a 2 MiB tmpfs"
    if slots:
        assert seen["owner"] == seen["me"], "the tmpfs is the job's own"


def test_without_a_sandbox_the_volume_is_a_plain_directory(tmp_path: Path) -> None:
    isolation = JobIsolation(tmp_path / "slots", mode="none")

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation=isolation) as ex:
            await ex.start(spec("p", PROBE, tmpfs=(TmpfsVolume("data/tmpfs", 2 * MiB),)))
            return await ex.wait("p", 30), ex.stdout("p").decode()

    result, stdout = run(scenario(), 60)
    assert result.state is JobState.COMPLETED
    assert "wrote" in stdout and _lines(stdout)["type"] != "tmpfs"


@pytest.mark.skipif(not _sandboxed(), reason="needs root and bubblewrap (slots)")
def test_a_tmpfs_path_that_is_a_file_of_the_job_refuses_the_job(tmp_path: Path) -> None:
    isolation = JobIsolation(tmp_path / "slots", mode="sandbox")

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation=isolation) as ex:
            files = (JobFile(name="tmpfs", data=b"x"),)
            await ex.start(spec("f", "echo ran", files=files, tmpfs=(TmpfsVolume("tmpfs", MiB),)))
            return await ex.wait("f", 30), ex.stdout("f").decode(), ex.stderr("f").decode()

    result, stdout, stderr = run(scenario(), 60)
    assert result.state is JobState.FAILED and "ran" not in stdout
    assert "tmpfs" in stderr, stderr
