"""Removing the default pool tree, as on YTsaurus (issue 27): the master lets ``//sys/pool_trees/default`` and
``@default_tree`` go; while ``@default_tree`` names no tree the scheduler refuses pool trees updates with its
``update_pools`` alert ("Error updating pool trees" / "Default tree is missing"); operations without
``pool_trees`` are refused with ``PoolTreesAreUnspecified`` (214); ``@default_tree`` can be set again; a restart
keeps all of it (``--create-default-tree`` does not bring a removed tree back)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yt.wrapper as ytw

sys.path.insert(0, str(Path(__file__).parent))
from live_cluster import Cluster, Scheduler
from polling import wait_for
from test_live_service import vanilla

TREES = "//sys/pool_trees"
ORCHID = "//sys/scheduler/orchid/scheduler"


def update_pools_alerts(client: ytw.YtClient) -> list[dict]:
    return [
        a for a in client.get("//sys/scheduler/@alerts") if a["attributes"]["alert_type"] == "update_pools"
    ]


def restart(cluster: Cluster) -> None:
    """Stop the scheduler and start it again on the same store, with ``--create-default-tree`` as before."""
    assert cluster.scheduler is not None
    cluster.scheduler.stop()
    cluster.scheduler = Scheduler(cluster.loop, cluster.db, **cluster.kwargs)
    for node in cluster.nodes:
        node.scheduler_url = cluster.url


def test_default_tree_removed_recreated_and_kept_over_restarts(cluster: Cluster) -> None:
    client = cluster.client()
    assert client.get(f"{TREES}/@default_tree") == "default"
    client.remove(f"{TREES}/default", recursive=True)
    assert client.get(TREES) == {}  # TestSchedulerPoolManipulations' setup
    alert = wait_for(lambda: update_pools_alerts(client))[0]
    assert alert["message"] == "Error updating pool trees"
    assert alert["inner_errors"][0]["message"] == "Default tree is missing"
    assert not client.exists(f"{ORCHID}/default_pool_tree")
    with pytest.raises(ytw.YtResponseError) as refused:
        client.run_operation(vanilla("true"), sync=False)
    assert refused.value.contains_code(214)
    assert "default fair-share tree is not configured" in str(refused.value)

    client.create("scheduler_pool_tree", attributes={"name": "other"})
    assert update_pools_alerts(client)  # @default_tree still names the removed tree
    client.set(f"{TREES}/@default_tree", "other")
    wait_for(lambda: not update_pools_alerts(client))
    assert client.get(f"{ORCHID}/default_pool_tree") == "other"
    assert client.get(f"{ORCHID}/default_fair_share_tree") == "other"
    op = client.run_operation(vanilla("true"), sync=False)
    op.wait(timeout=30_000)
    assert client.get_operation(op.id, attributes=["runtime_parameters"])["runtime_parameters"][
        "scheduling_options_per_pool_tree"
    ].keys() == {"other"}

    restart(cluster)  # with --create-default-tree: the removed tree stays removed
    client = cluster.client()
    assert client.get(TREES) == {"other": {}} and client.get(f"{TREES}/@default_tree") == "other"
    assert not update_pools_alerts(client)

    client.remove(f"{TREES}/@default_tree")
    wait_for(lambda: not client.exists(f"{ORCHID}/default_pool_tree"))
    restart(cluster)
    client = cluster.client()
    assert not client.exists(f"{TREES}/@default_tree") and not client.exists(f"{ORCHID}/default_pool_tree")
    with pytest.raises(
        ytw.YtResponseError
    ) as refused:  # one tree, but no @default_tree: YTsaurus has no default
        client.run_operation(vanilla("true"), sync=False)
    assert refused.value.contains_code(214)
    op = client.run_operation(vanilla("true", pool_trees=["other"]), sync=False)
    op.wait(timeout=30_000)

    client.set(f"{TREES}/@default_tree", "unexisting")
    restart(cluster)  # the refusal and its alert survive a restart too
    client = cluster.client()
    assert wait_for(lambda: update_pools_alerts(client))[0]["attributes"]["default_tree"] == "unexisting"
    with pytest.raises(ytw.YtResponseError) as refused:
        client.run_operation(vanilla("true"), sync=False)
    assert refused.value.contains_code(214)
