"""A job against a scheduler that runs without authentication (``--no-authentication``, loopback only): every
caller there is root, so a job that reached it could make itself a superuser. Jobs get a network namespace of
their own (bubblewrap ``--unshare-net``); a node that cannot give one (no bubblewrap) refuses the job.

The job here really tries: it sends ``create //tmp/pwned`` to the scheduler's loopback address."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yt.wrapper as ytw

sys.path.insert(0, str(Path(__file__).parent.parent / "server"))
sys.path.insert(0, str(Path(__file__).parent.parent))
from live_cluster import Cluster
from polling import wait_for

from pooltree.node.isolation import bwrap_path

ATTACK = """python3 - <<'PY'
import json, sys, urllib.request
request = urllib.request.Request(
    "{url}/api/v4/create",
    method="POST",
    headers={{"X-YT-Parameters": json.dumps({{"type": "map_node", "path": "//tmp/{name}"}}),
              "X-YT-Header-Format": "json"}},
)
try:
    print("REACHED", urllib.request.urlopen(request, timeout=5).status, file=sys.stderr)
except Exception as error:
    print("BLOCKED", type(error).__name__, error, file=sys.stderr)
PY
"""


@pytest.fixture
def open_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    made = Cluster(tmp_path, authentication=False, isolation=request.param)
    try:
        yield made
    finally:
        made.close()


def _run(cluster: Cluster, name: str) -> tuple[ytw.YtClient, str]:
    client = cluster.client()
    spec = ytw.VanillaSpecBuilder().task(
        "main", {"command": ATTACK.format(url=cluster.url, name=name), "job_count": 1}
    )
    spec = spec.max_failed_job_count(1)
    operation_id = client.run_operation(spec, sync=False).id
    wait_for(
        lambda: client.get_operation(operation_id, attributes=["state"])["state"] in ("completed", "failed"),
        timeout=60,
    )
    return client, operation_id


@pytest.mark.skipif(bwrap_path() is None, reason="needs bubblewrap")
@pytest.mark.parametrize("open_cluster", ["auto"], indirect=True)
def test_a_job_cannot_reach_a_scheduler_without_authentication(open_cluster: Cluster) -> None:
    client, operation_id = _run(open_cluster, "pwned")
    assert client.get_operation(operation_id, attributes=["state"])["state"] == "completed"
    job = client.list_jobs(operation_id)["jobs"][0]
    stderr = client.get_job_stderr(operation_id, job["id"]).read().decode()
    assert "BLOCKED" in stderr and "REACHED" not in stderr, stderr
    assert not client.exists("//tmp/pwned")


@pytest.mark.parametrize("open_cluster", ["none"], indirect=True)
def test_a_node_that_cannot_isolate_refuses_the_job(open_cluster: Cluster) -> None:
    client, operation_id = _run(open_cluster, "pwned2")
    result = client.get_operation(operation_id, attributes=["state", "result"])
    assert result["state"] == "failed"
    assert "network namespace of its own" in str(result["result"])
    assert not client.exists("//tmp/pwned2")
