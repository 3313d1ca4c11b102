"""The official client against a live scheduler, as a YTsaurus user drives it (issue 15): tree ``@config``, the
default tree, pool moves and custom attributes, YTsaurus's type and name rules, disjoint trees, batches and the
answer to commands pooltree does not serve."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yt.wrapper as ytw

sys.path.insert(0, str(Path(__file__).parent))
from live_cluster import Cluster
from polling import wait_for
from test_live_service import vanilla

TREES = "//sys/pool_trees"
ORCHID = "//sys/scheduler/orchid/scheduler"


def _orchid_pool(client: ytw.YtClient, pool: str) -> dict:
    path = f"{ORCHID}/pool_trees/default/pools/{pool}"
    wait_for(lambda: client.exists(path))
    return client.get(path)


def test_tree_config_is_there_settable_key_by_key_and_in_the_orchid(cluster: Cluster) -> None:
    client = cluster.client()
    assert client.get(f"{TREES}/default/@config") == {}
    assert client.get(f"{TREES}/@default_tree") == "default"  # set when the first tree was created
    cluster.cli("set", f"{TREES}/default/@config/max_running_operation_count_per_pool", "3")
    cluster.cli("set", f"{TREES}/default/@config/fair_share_starvation_timeout", "5000")
    assert client.get(f"{TREES}/default/@config") == {
        "max_running_operation_count_per_pool": 3,
        "fair_share_starvation_timeout": 5000,
    }
    # the orchid shows the effective config: what was set plus every default, durations in milliseconds
    config_path = f"{ORCHID}/pool_trees/default/config"
    wait_for(lambda: client.get(config_path)["max_running_operation_count_per_pool"] == 3)
    effective = client.get(config_path)
    assert effective["fair_share_starvation_timeout"] == 5000
    assert effective["fair_share_starvation_tolerance"] == 0.8 and effective["main_resource"] == "cpu"
    # validated as a whole: a bad value is refused and the last good config stays, in Cypress and the scheduler
    bad = cluster.cli(
        "set", f"{TREES}/default/@config/fair_share_aggressive_starvation_timeout", "1000", check=False
    )
    assert bad.returncode != 0 and "fair_share_aggressive_starvation_timeout" in bad.stderr
    assert "fair_share_aggressive_starvation_timeout" not in client.get(f"{TREES}/default/@config")
    flag = cluster.cli("set", f"{TREES}/default/@config/max_operation_count", "%true", check=False)
    assert flag.returncode != 0 and "expected integer, got boolean" in flag.stderr
    assert client.get(config_path)["max_operation_count"] == 50000


def test_overlapping_trees_are_refused_by_the_scheduler_and_scheduling_goes_on(cluster: Cluster) -> None:
    # as on YTsaurus (test_basic_sanity): the master takes a tree whose filter overlaps another's; the scheduler
    # refuses the update while a known node would be in both, with its update_pools alert, and keeps its trees
    client = cluster.client()
    cluster.cli("create", "scheduler_pool_tree", "--attributes", "{name=gpu}")
    assert client.exists(f"{TREES}/gpu")
    alert = wait_for(
        lambda: [
            a
            for a in client.get("//sys/scheduler/@alerts")
            if a["attributes"]["alert_type"] == "update_pools"
        ]
    )[0]
    assert alert["message"] == "Error updating pool trees"
    inner = alert["inner_errors"][0]
    assert (
        inner["message"]
        == "Cannot update fair-share trees since there is node that belongs to multiple trees"
    )
    assert inner["attributes"]["matched_trees"] == ["default", "gpu"]
    assert not client.exists(f"{ORCHID}/pool_trees/gpu")
    # the node (no tags) stays in "default" only: its heartbeats are served and jobs run
    op = client.run_operation(vanilla("true", 1), sync=False)
    op.wait(timeout=30_000)
    assert client.get_operation(op.id)["state"] == "completed"
    assert not any("several pool trees" in error for node in cluster.nodes for error in node.errors)
    client.set(f"{TREES}/gpu/@config/node_tag_filter", "gpu")  # disjoint now: the update applies
    wait_for(lambda: client.exists(f"{ORCHID}/pool_trees/gpu"))
    assert not [
        a for a in client.get("//sys/scheduler/@alerts") if a["attributes"]["alert_type"] == "update_pools"
    ]


def test_pool_move_parent_name_and_operation_counts(cluster: Cluster) -> None:
    client = cluster.client()
    for name, parent in (("p1", None), ("p2", None), ("child", "p1")):
        attributes = {"name": name, "pool_tree": "default", **({"parent_name": parent} if parent else {})}
        client.create("scheduler_pool", attributes=attributes)
    op = client.run_operation(vanilla("sleep 60", 1, pool="child"), sync=False)
    wait_for(lambda: _orchid_pool(client, "p1")["running_operation_count"] == 1)
    cluster.cli("move", f"{TREES}/default/p1/child", f"{TREES}/default/p2/child")
    assert client.get(f"{TREES}/default/p2/child/@parent_name") == "p2"
    wait_for(lambda: _orchid_pool(client, "p2")["running_operation_count"] == 1)
    assert _orchid_pool(client, "p1")["running_operation_count"] == 0
    client.set(f"{TREES}/default/p2/child/@parent_name", "p1")  # a move too
    assert client.list(f"{TREES}/default/p1") == ["child"] and client.list(f"{TREES}/default/p2") == []
    wait_for(lambda: _orchid_pool(client, "p1")["running_operation_count"] == 1)
    # YTsaurus's refusals: into its own subtree, out of the tree, onto an existing pool name
    into_self = cluster.cli("move", f"{TREES}/default/p1", f"{TREES}/default/p1/child/p1", check=False)
    assert into_self.returncode != 0 and "own descendant" in into_self.stderr
    client.set("//tmp/x", 1)
    out = cluster.cli("move", f"{TREES}/default/p2", "//tmp/p2", check=False)
    assert out.returncode != 0 and "cannot be moved out of the pool trees" in out.stderr
    clash = cluster.cli("move", f"{TREES}/default/p2", f"{TREES}/default/p1/child", check=False)
    assert clash.returncode != 0 and "already exists" in clash.stderr
    client.abort_operation(op.id)


def test_custom_attributes_types_and_names(cluster: Cluster) -> None:
    client = cluster.client()
    client.create(
        "scheduler_pool", attributes={"name": "research", "pool_tree": "default", "owner_team": "ml"}
    )
    cluster.cli("set", f"{TREES}/default/research/@cost_center", "{id=42; tags=[a; b]}")
    assert client.get(f"{TREES}/default/research/@owner_team") == "ml"
    assert client.get(f"{TREES}/default/research/@cost_center/tags") == ["a", "b"]
    attributes = client.get(f"{TREES}/default/research/@")
    assert (
        attributes["cost_center"] == {"id": 42, "tags": ["a", "b"]} and attributes["type"] == "scheduler_pool"
    )
    wrong = cluster.cli("set", f"{TREES}/default/research/@max_running_operation_count", "%true", check=False)
    assert wrong.returncode != 0 and "expected integer, got boolean" in wrong.stderr
    text = cluster.cli("set", f"{TREES}/default/research/@weight", '"2"', check=False)
    assert text.returncode != 0 and "expected double, got string" in text.stderr
    long_name = "p" * 101
    too_long = cluster.cli("create", "scheduler_pool", "--attributes", f"{{name={long_name};pool_tree=default}}",
                           check=False)  # fmt: skip
    assert too_long.returncode != 0 and "is too long" in too_long.stderr
    assert client.list(f"{TREES}/default") == ["research"]
    client.create("scheduler_pool", attributes={"name": "p" * 100, "pool_tree": "default"})
    op = client.run_operation(vanilla("sleep 60", 1, pool="research"), sync=False)
    with pytest.raises(ytw.YtResponseError, match="must match regular expression"):
        client.update_operation_parameters(
            op.id, {"scheduling_options_per_pool_tree": {"default": {"pool": "bad$pool"}}}
        )
    with pytest.raises(ytw.YtResponseError, match="must match regular expression"):
        client.run_operation(vanilla("true", 1, pool="a$b"), sync=False)
    client.abort_operation(op.id)


def test_batches_and_unsupported_commands(cluster: Cluster) -> None:
    client = cluster.client()
    batch = client.create_batch_client()
    made = batch.create("map_node", "//tmp/b", recursive=True)
    present = batch.exists("//sys/pool_trees/default")
    missing = batch.get("//tmp/nowhere")
    batch.commit_batch()
    assert made.is_ok() and bool(present.get_result())
    assert not missing.is_ok() and "Error resolving path //tmp/nowhere" in str(missing.get_error())
    assert client.exists("//tmp/b")
    for args in (
        ("map", "cat", "--src", "//tmp/in", "--dst", "//tmp/out"),
        ("create", "table", "//tmp/t"),
    ):
        result = cluster.cli(*args, check=False)
        assert result.returncode != 0
        assert "pooltree is a scheduler" in result.stderr and "vanilla operations" in result.stderr, (
            result.stderr
        )
        assert "not supported by api/v4" not in result.stderr


def test_job_stderr_whole_with_ytsaurus_cut_and_abort_job(cluster: Cluster) -> None:
    client = cluster.client()
    # 1.2 MB of stderr: more than a heartbeat report carries (64 KiB), less than max_stderr_size (5 MiB)
    big = client.run_operation(
        vanilla("python3 -c \"import sys; [sys.stderr.write('%07d\\n' % i) for i in range(150000)]\"", 1),
        sync=False,
    )
    big.wait(timeout=60_000)
    job = client.list_jobs(big.id)["jobs"][0]
    assert job["stderr_size"] == 150000 * 8
    stderr = wait_for(
        lambda: (data := client.get_job_stderr(big.id, job["id"]).read()) and len(data) == 150000 * 8 and data
    )
    assert stderr.startswith(b"0000000\n0000001\n") and stderr.endswith(b"0149999\n")
    # past max_stderr_size: the first half, YTsaurus's marker, the last half
    huge = client.run_operation(
        vanilla("python3 -c \"import sys; sys.stderr.write('x' * 6291456 + 'END\\n')\"", 1), sync=False
    )
    huge.wait(timeout=60_000)
    job = client.list_jobs(huge.id)["jobs"][0]
    cut = wait_for(
        lambda: (data := client.get_job_stderr(huge.id, job["id"]).read()) and len(data) > 65536 and data
    )
    half = 5 * 1024 * 1024 // 2
    assert (
        cut[:half] == b"x" * half
        and cut[half : half + 15] == b"\n...skipped...\n"
        and cut.endswith(b"xEND\n")
    )
    assert len(cut) == 2 * half + 15
    # abort-job: aborted with reason user_request, and the job runs again
    op = client.run_operation(vanilla("sleep 60", 1), sync=False)
    running = wait_for(lambda: client.list_jobs(op.id, job_state="running")["jobs"])
    cluster.cli("abort-job", running[0]["id"])
    aborted = wait_for(lambda: client.list_jobs(op.id, job_state="aborted")["jobs"])
    assert aborted[0]["abort_reason"] == "user_request"
    wait_for(lambda: client.list_jobs(op.id, job_state="running")["jobs"])
    again = cluster.cli("abort-job", running[0]["id"], check=False)
    assert again.returncode != 0 and "No such running job" in again.stderr
    client.abort_operation(op.id)
