"""Files for jobs through the official client (issue 15): ``yt write-file`` / ``read-file`` / ``upload`` in the
client's transactions, ``file_paths`` delivered into the sandbox, and a Python callable run as a vanilla task."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yt.wrapper as ytw

sys.path.insert(0, str(Path(__file__).parent))
from live_cluster import YT, Cluster, run_python_callable

from pooltree.node.bubblewrap import find_bubblewrap
from pooltree.node.launch import SAFE_PATH


def _cli(cluster: Cluster, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("YT_")}
    env.update(HOME=str(cluster.root), YT_PROXY=cluster.url, YT_TOKEN=cluster.token)
    return subprocess.run([YT, *args], env=env, input=stdin, capture_output=True, timeout=60)


def _stderrs(client: ytw.YtClient, op_id: str) -> list[bytes]:
    return [client.get_job_stderr(op_id, job["id"]).read() for job in client.list_jobs(op_id)["jobs"]]


def test_write_read_upload_and_file_paths_in_the_sandbox(cluster: Cluster, tmp_path: Path) -> None:
    client = cluster.client()
    script = b"import os, sys\nprint('script ran in', os.path.basename(os.getcwd()), file=sys.stderr)\n"
    written = _cli(cluster, "write-file", "//tmp/job.py", stdin=script)
    assert written.returncode == 0, written.stderr
    assert _cli(cluster, "read-file", "//tmp/job.py").stdout == script
    assert client.get("//tmp/job.py/@uncompressed_data_size") == len(script)
    assert client.get("//tmp/job.py/@type") == "file"
    tool = tmp_path / "tool.sh"
    tool.write_text("#!/bin/sh\necho tool says $1 >&2\n")
    tool.chmod(0o755)
    client.create("map_node", "//tmp/bin")
    uploaded = _cli(cluster, "upload", "//tmp/bin/tool", "--executable", stdin=tool.read_bytes())
    assert uploaded.returncode == 0, uploaded.stderr
    tasks = (
        '{main={command="python3 job.py && ./renamed.sh hi && test -x renamed.sh"; job_count=1; '
        'file_paths=["//tmp/job.py"; <file_name="renamed.sh">"//tmp/bin/tool"]}}'
    )
    run = _cli(cluster, "vanilla", "--tasks", tasks)
    assert run.returncode == 0, run.stderr
    op_id = client.list_operations()["operations"][0]["id"]
    assert _stderrs(client, op_id) == [b"script ran in sandbox\ntool says hi\n"]
    # a missing file is refused when the operation starts, naming the path and the spec field
    missing = _cli(
        cluster, "vanilla", "--tasks", '{main={command="true"; job_count=1; file_paths=["//tmp/nope"]}}'
    )
    assert missing.returncode != 0 and b"//tmp/nope" in missing.stderr and b"file_paths" in missing.stderr


def test_transactions_stage_file_writes_until_commit(cluster: Cluster) -> None:
    client = cluster.client()
    client.create("file", "//tmp/data")
    client.write_file("//tmp/data", b"v1")
    with client.Transaction() as outer:
        client.write_file("//tmp/data", b"v2")
        inner = client.start_transaction()  # nested in outer (the client passes transaction_id)
        client.abort_transaction(inner)
        other = cluster.client()
        assert other.read_file("//tmp/data").read() == b"v1"  # not committed yet
        assert outer.transaction_id
    assert client.read_file("//tmp/data").read() == b"v2"
    try:
        with client.Transaction():
            client.write_file("//tmp/data", b"v3")
            raise RuntimeError("abort")
    except RuntimeError:
        pass
    assert client.read_file("//tmp/data").read() == b"v2"
    with pytest.raises(ytw.YtResponseError, match="No such transaction"):
        client.commit_transaction("1-2-3-4")


def test_python_callable_runs_as_a_vanilla_task(cluster: Cluster) -> None:
    # Jobs run as their slot's user, which cannot reach the test venv (under /root here): they run the system
    # python3 (the one on the job's PATH), and the library ships the pure-Python modules the function needs
    # (compiled ones are left out, since the two interpreters' builds may differ). The operation is started from
    # a process of its own, as a user's script would (callable_client.py says why).
    python = shutil.which("python3", path=SAFE_PATH)
    if python is None:
        pytest.skip(f"no python3 on the jobs' PATH ({SAFE_PATH})")
    op_id, stderrs = run_python_callable(cluster, python)
    client = cluster.client()
    assert stderrs == [b"callable ran: 49\n"] * 2, (
        "nothing else: the wrapper's statistics went to descriptor 5"
    )
    alerts = client.get_operation(op_id)["alerts"]
    assert "unrecognized_spec" not in alerts and "unsupported_options" not in alerts, alerts
    for job in client.list_jobs(op_id)["jobs"]:  # the wrapper writes its preparation time there
        assert client.get_job(op_id, job["id"])["statistics"]["custom/python_job_preparation_time"] >= 0


def test_a_shell_job_s_custom_statistics_and_their_limit(cluster: Cluster) -> None:
    # YTsaurus's test_job_statistics / test_too_many_custom_statistics, through the official client
    client = cluster.client()
    line = 'echo "{ cpu={ k1=4; k3=7 }}; {k2=-7};{k2=1};" >&5'
    op = client.run_operation(ytw.VanillaSpecBuilder().task("main", {"command": line, "job_count": 1}))
    job = client.list_jobs(op.id)["jobs"][0]
    statistics = client.get_job(op.id, job["id"])["statistics"]
    assert {k: float(v) for k, v in statistics.items() if k.startswith("custom/")} == {
        "custom/cpu/k1": 4,
        "custom/cpu/k3": 7,
        "custom/k2": 1,
    }
    too_many = "".join(f'echo "{{name{i}=42}};" >&5; ' for i in range(3))
    task = {"command": too_many, "job_count": 1, "custom_statistics_count_limit": 2}
    spec = ytw.VanillaSpecBuilder().task("main", task).max_failed_job_count(1)
    with pytest.raises(ytw.YtOperationFailedError):
        client.run_operation(spec)
    failed = client.list_operations(state="failed")["operations"][0]["id"]
    error = client.list_jobs(failed)["jobs"][0]["error"]
    assert "custom_statistics_count_limit (2)" in str(error), error
    with pytest.raises(ytw.YtResponseError, match="custom_statistics_count_limit"):
        task = {"command": "true", "job_count": 1, "custom_statistics_count_limit": 0}
        client.run_operation(ytw.VanillaSpecBuilder().task("main", task))


def test_a_file_written_in_pieces_is_whole(cluster: Cluster) -> None:
    # the client sends a large file as several write_file requests, each after the first with <append=%true>
    client = ytw.YtClient(
        proxy=cluster.url,
        token=cluster.token,
        config={
            "proxy": {"enable_proxy_discovery": False},
            "write_retries": {"chunk_size": 1024 * 1024},
            "write_parallel": {"enable": False},
        },
    )
    data = bytes(range(256)) * (3 * 4096 + 7)  # about 3 MiB: several pieces
    client.write_file("//tmp/pieces", data)
    assert client.read_file("//tmp/pieces").read() == data
    assert client.get("//tmp/pieces/@chunk_count") >= 2  # appended, not replaced


def test_a_task_s_tmpfs_is_mounted_in_its_sandbox(cluster: Cluster) -> None:
    if os.geteuid() != 0 or find_bubblewrap().found is None:
        pytest.skip("tmpfs mounts need a sandboxing node (root with bubblewrap)")
    client = cluster.client()
    probe = "stat -f -c %T cache >&2; df -B1 --output=size cache | tail -1 | tr -d ' ' >&2"
    task = {"command": probe, "job_count": 1, "tmpfs_path": "cache", "tmpfs_size": 8 * 1024 * 1024}
    op = client.run_operation(ytw.VanillaSpecBuilder().task("main", task))
    assert _stderrs(client, op.id) == [b"tmpfs\n8388608\n"]
    with pytest.raises(ytw.YtResponseError, match="tmpfs_path"):
        bad = {"command": "true", "job_count": 1, "tmpfs_path": "../escape"}
        client.run_operation(ytw.VanillaSpecBuilder().task("main", bad))
