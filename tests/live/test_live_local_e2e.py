"""``pooltree local`` as real processes (one scheduler + 2 nodes), driven by the official ``yt`` CLI and
``yt.wrapper.YtClient``: pools, attributes, vanilla to completion, pending under a running-operation limit, abort,
jobs and stderr, the orchid, the memory limit, malformed requests; then a clean SIGINT shutdown."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import yt.wrapper as ytw

sys.path.insert(0, str(Path(__file__).parent))
from job_python import JOB_PYTHON
from live_procs import ORCHID, Procs, client, state, vanilla, yt_cli
from polling import wait_for

from pooltree.node.isolation import resolve_isolation


class Local:
    """One ``pooltree local`` process and its proxy URL."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs = Procs(root)
        self.process = self.procs.spawn(
            "local",
            "--nodes",
            "2",
            "--data",
            str(root / "data"),
            "--node-resources",
            "user_slots=2,cpu=2,memory=4Gi",
        )
        line = self.procs.read_until(self.process, "scheduler at ")
        self.url = line.split("scheduler at ", 1)[1].split()[0]
        self.token = (root / "data" / "token").read_text().strip()
        self.yt = client(self.url, self.token)

    def cli(self, *args: str, check: bool = True) -> str:
        return yt_cli(self.url, self.root, *args, check=check, token=self.token).stdout


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Local]:
    cluster = Local(tmp_path_factory.mktemp("local"))
    try:
        wait_for(lambda: len(cluster.yt.get("//sys/scheduler/orchid/scheduler/nodes")) == 2, timeout=30)
        yield cluster
    finally:
        cluster.procs.close()


def test_local_prints_proxy_and_creates_default_tree(local: Local) -> None:
    assert local.url.startswith("http://127.0.0.1:")
    local.procs.read_until(local.process, "yt --proxy")
    hint = "".join(local.procs.stdout[local.process.pid])
    assert f"yt --proxy {local.url}" in hint
    assert f"job isolation: {resolve_isolation().summary()}" in hint  # the nodes' mode, printed at start
    token_file = local.root / "data" / "token"
    assert f"export YT_TOKEN=$(cat {token_file.resolve()})" in hint
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert (local.root / "data" / "node_secret").stat().st_mode & 0o777 == 0o600
    assert (local.root / "data" / "scheduler.db").stat().st_mode & 0o777 == 0o600
    assert local.cli("list", "//sys/pool_trees").split() == ["default"]
    nodes = local.yt.get("//sys/scheduler/orchid/scheduler/nodes")
    assert sorted(nodes) == ["node-0", "node-1"]
    assert nodes["node-0"]["resource_limits"]["user_slots"] == 2.0  # labelled, as YTsaurus shows resources
    cluster = local.yt.get("//sys/scheduler/orchid/scheduler/cluster/resource_limits")
    assert cluster["user_slots"] == 2 * nodes["node-0"]["resource_limits"]["user_slots"]


def test_pools_and_attributes_with_cli(local: Local) -> None:
    local.cli("create", "scheduler_pool", "--attributes", "{name=research;pool_tree=default}")
    local.cli(
        "create", "scheduler_pool", "--attributes", '{name=adhoc;pool_tree=default;parent_name="research"}'
    )
    local.cli("set", "//sys/pool_trees/default/research/@weight", "3")
    assert local.cli("get", "//sys/pool_trees/default/research/@weight").strip() == "3"
    assert local.yt.exists("//sys/pool_trees/default/research/adhoc")
    assert sorted(local.cli("list", "//sys/pool_trees/default/research").split()) == ["adhoc"]
    bad = yt_cli(
        local.url,
        local.root,
        "set",
        "//sys/pool_trees/default/research/@weight",
        "-1",
        check=False,
        token=local.token,
    )
    assert bad.returncode == 1 and "weight" in bad.stderr
    assert local.yt.get("//sys/pool_trees/default/research/@weight") == 3

    def orchid_pools() -> dict | None:
        pools = local.yt.get(f"{ORCHID}/default/pools")
        return pools if "adhoc" in pools and float(pools["research"]["weight"]) == 3.0 else None

    pools = wait_for(orchid_pools)
    assert pools["adhoc"]["parent"] == "research"


def test_vanilla_to_completion_jobs_and_stderr(local: Local) -> None:
    result = yt_cli(
        local.url,
        local.root,
        "vanilla",
        "--tasks",
        '{main={command="echo hello-from-$YT_JOB_INDEX >&2"; job_count=3}}',
        token=local.token,
    )
    assert "completed" in result.stderr
    ops = local.yt.list_operations(state="completed")["operations"]
    op_id = ops[0]["id"]
    jobs = local.yt.list_jobs(op_id)["jobs"]
    assert len(jobs) == 3 and {job["state"] for job in jobs} == {"completed"}
    assert {job["address"] for job in jobs} <= {"node-0", "node-1"}
    stderr = local.cli("get-job-stderr", jobs[0]["id"], op_id)
    assert stderr.startswith("hello-from-")
    texts = {local.yt.get_job_stderr(op_id, job["id"]).read().decode() for job in jobs}
    assert texts == {f"hello-from-{i}\n" for i in range(3)}


def test_running_limit_pending_then_abort(local: Local) -> None:
    local.yt.create(
        "scheduler_pool", attributes={"name": "one", "pool_tree": "default", "max_running_operation_count": 1}
    )
    first = local.yt.run_operation(vanilla("sleep 30", 1, pool="one"), sync=False).id
    second = local.yt.run_operation(vanilla("sleep 30", 1, pool="one"), sync=False).id
    wait_for(lambda: state(local.yt, first) == "running")
    assert state(local.yt, second) == "pending"
    assert '"state" = "pending"' in local.cli("get-operation", second)
    wait_for(
        lambda: (
            local.yt.get_operation(first, attributes=["brief_progress"])["brief_progress"]["jobs"]["running"]
            == 1
        )
    )
    orchid_ops = local.yt.get(f"{ORCHID}/default/operations")
    assert orchid_ops[first]["pool"] == "one"
    local.cli("abort-op", first)
    assert state(local.yt, first) == "aborted"
    wait_for(lambda: state(local.yt, second) == "running", timeout=20)
    local.cli("abort-op", second)
    assert state(local.yt, second) == "aborted"
    jobs = wait_for(lambda: local.yt.list_jobs(first, job_state="aborted")["jobs"])
    assert jobs[0]["state"] == "aborted"


def test_job_over_memory_limit_fails(local: Local) -> None:
    command = f"{JOB_PYTHON} -c 'import time; x = b\"x\" * (300 * 1024 * 1024); time.sleep(10)'"
    builder = (
        ytw.VanillaSpecBuilder()
        .begin_task("main")
        .command(command)
        .job_count(1)
        .memory_limit(80 * 1024 * 1024)
        .end_task()
        .spec({"max_failed_job_count": 1})
    )
    op_id = local.yt.run_operation(builder, sync=False).id
    wait_for(lambda: state(local.yt, op_id) == "failed", timeout=30)
    job = local.yt.list_jobs(op_id, job_state="failed")["jobs"][0]
    assert job["error"]["message"] == "Memory limit exceeded"
    shown = local.cli("get-operation", op_id)
    assert "Memory limit exceeded" in shown


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("POST", "/internal/node_heartbeat", {"content": b"{not json"}),
        ("POST", "/internal/node_heartbeat", {"json": {"node_address": "", "resource_limits": {}}}),
        ("GET", "/api/v4/get", {}),
        ("POST", "/api/v4/start_operation", {"json": {"operation_type": "vanilla", "spec": {"tasks": 5}}}),
    ],
)
def test_malformed_requests_are_400_yt_errors(local: Local, method: str, path: str, kwargs: dict) -> None:
    secret = (local.root / "data" / "node_secret").read_text().strip()
    headers = {"Authorization": f"OAuth {local.token}", "X-Pooltree-Node-Secret": secret}
    response = httpx.request(method, local.url + path, timeout=10, headers=headers, **kwargs)
    assert response.status_code == 400, response.text
    error = (
        response.json()
        if "x-yt-error" not in response.headers
        else httpx.Response(200, content=response.headers["x-yt-error"]).json()
    )
    assert error["code"] != 0 and error["message"]
    assert httpx.get(local.url + "/api/v4", timeout=10).status_code == 200


def test_sigint_stops_every_child(local: Local) -> None:
    children = psutil.Process(local.process.pid).children(recursive=True)
    assert len(children) >= 3
    assert local.procs.stop(local.process, signal.SIGINT, timeout=30) == 0
    wait_for(
        lambda: not any(child.is_running() and child.status() != "zombie" for child in children), timeout=10
    )
