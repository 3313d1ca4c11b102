"""An operation in several pool trees is forecast in every tree it runs in (the simulator schedules it in each, as
the live service does): a pending operation that only its second tree can run is forecast to start there, in
``get_operation``, in a dry run and on the operation page. What the forecast still leaves out (past the simulated
part, the capacity hand-over starts its jobs in its first tree only) is said in ``scheduling_forecast.limitation``,
never silently."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import yt.wrapper as ytw
from rich.console import Console

from pooltree.cli.forecast import render
from pooltree.config import parse_snapshot
from pooltree.forecast import ForecastSettings
from pooltree.forecast.durations import DurationSettings
from pooltree.forecast.fork import fork
from pooltree.forecast.live import tree_limitation
from pooltree.forecast.run import forecast
from pooltree.forecast.state import ClusterState, NodeState, OperationState, RunningJob, TaskState, TreePlace
from pooltree.forecast.worker import WorkerSettings
from pooltree.resources import CPU, vector
from pooltree.sim import Simulation
from tests.polling import wait_for
from tests.server.live_cluster import Cluster, auth_headers

SETTINGS = WorkerSettings(forecast=ForecastSettings(seeds=2, horizon=4 * 3600.0), niceness=0)
"""A horizon long past the prior's job run time (600 s): the blocker's jobs are drawn to end within it."""
MULTI = {
    "pool_trees": ["default", "other"],
    # nothing of it may run in tree default: only tree other can start its job
    "scheduling_options_per_pool_tree": {"default": {"resource_limits": {"user_slots": 0}}},
    "tasks": {"main": {"command": "sleep 3600", "job_count": 1, "cpu_limit": 1}},
}


JOB = vector(user_slots=1, cpu=1, memory=2**30)


def two_tree_state() -> ClusterState:
    """Trees ``a`` (node ``na``) and ``b`` (node ``nb``), two slots each: ``multi`` (in both) runs its two jobs on
    ``nb``; ``waiter`` (in ``b`` only) needs ``nb``'s two slots."""
    node = {"count": 1, "resource_limits": {"user_slots": 2, "cpu": 2, "memory": "8Gi"}}
    snapshot = parse_snapshot(
        {
            "default_pool_tree": "a",
            "cluster": {
                "nodes": [
                    {**node, "address": "na", "tags": ["ta"]},
                    {**node, "address": "nb", "tags": ["tb"]},
                ]
            },
            "pool_trees": {
                "a": {"config": {"node_tag_filter": "ta"}, "pools": {"research": {}}},
                "b": {"config": {"node_tag_filter": "tb"}, "pools": {"research": {}}},
            },
        }
    )
    nodes = tuple(
        NodeState(group.address or "", np.array(group.resource_limits), group.tags)
        for group in snapshot.cluster.nodes
    )
    multi = OperationState(
        "multi",
        "bob",
        "vanilla",
        {"pool": "research", "pool_trees": ["a", "b"]},
        "a",
        "research",
        800.0,
        (
            TaskState(
                "main",
                JOB,
                0,
                (RunningJob("nb", 900.0), RunningJob("nb", 950.0)),
                3,
                durations=(200.0, 250.0, 300.0),
            ),
        ),
        first_job_time=850.0,
        other_trees=(TreePlace("b", "research"),),
    )
    waiter = OperationState(
        "waiter",
        "alice",
        "vanilla",
        {"pool": "research", "pool_trees": ["b"]},
        "b",
        "research",
        990.0,
        (TaskState("main", vector(user_slots=2, cpu=2, memory=2**30), 1),),
        state="pending",
    )
    return ClusterState(1000.0, snapshot.pool_trees, "a", nodes, (multi, waiter))


def cpu_usage_by_tree(simulation: Simulation) -> dict[str, dict[str, float]]:
    """Per pool tree of ``simulation``, each node's cpu usage as its core accounts it."""
    return {
        name: {address: float(node.usage[CPU]) for address, node in tree.core.strategy.nodes.items()}
        for name, tree in simulation.trees.items()
    }


def assert_waiter_starts_after_a_job_of_multi(state: ClusterState) -> None:
    """``waiter`` is forecast to start once a job of ``multi`` ends (~100-250 s left), not at once: simulated whole
    and carried by the capacity hand-over (whose runs stop one fair-share period in)."""
    simulated = forecast(state, ForecastSettings(seeds=3, horizon=3600.0))
    handed = forecast(state, ForecastSettings(seeds=3, horizon=3600.0, cpu_budget=1e-6))
    assert handed.simulated is not None and handed.simulated < 5.0
    for found in (simulated, handed):
        start = found.operations["waiter"].start
        assert start["p50"] is not None and start["p10"] is not None
        assert start["p10"] > state.now + 20.0


def test_running_jobs_of_an_operation_in_two_trees_are_placed_in_the_tree_of_their_node() -> None:
    state = two_tree_state()
    simulation = Simulation(fork(state, 0, horizon=1.0, durations=DurationSettings()), until=0.0)
    simulation.run()
    assert simulation.stats["placed_jobs_refused"] == 0
    usage = cpu_usage_by_tree(simulation)
    assert usage == {"a": {"na": 0.0}, "b": {"nb": 2.0}}


def test_the_hand_over_keeps_a_job_in_the_tree_of_its_node() -> None:
    """``waiter`` starts once a job of ``multi`` ends on ``nb``, simulated or carried by the capacity hand-over
    (whose runs stop one fair-share period in): ``multi``'s jobs hold tree ``b``'s capacity, not tree ``a``'s."""
    assert_waiter_starts_after_a_job_of_multi(two_tree_state())


def test_a_tentative_tree_of_the_spec_stays_tentative() -> None:
    """The live operation's trees include its ``tentative_pool_trees``: the fork lists them as tentative, not as
    regular trees too (a spec naming a tree as both fails its start)."""
    state = two_tree_state()
    multi = replace(
        state.operations[0],
        spec={"pool": "research", "pool_trees": ["a"], "tentative_pool_trees": ["b"]},
        revision=1,
    )
    scenario = fork(
        replace(state, operations=(multi, state.operations[1])), 0, horizon=1.0, durations=DurationSettings()
    )
    simulation = Simulation(scenario, until=0.0)
    simulation.run()
    forked = simulation.op_by_id["multi"]
    assert (forked.state, forked.error) == ("running", None)
    assert (forked.other_trees, forked.tentative_trees) == ((), ("b",))


def tentative_state() -> ClusterState:
    """`two_tree_state` with ``multi`` in tree ``a`` and tree ``b`` its spec's tentative tree, where its two jobs
    run (on ``nb``)."""
    state = two_tree_state()
    multi = replace(
        state.operations[0],
        spec={"pool": "research", "pool_trees": ["a"], "tentative_pool_trees": ["b"]},
        other_trees=(),
        revision=1,
    )
    return replace(state, operations=(multi, state.operations[1]))


def test_jobs_running_in_a_tentative_tree_are_placed_there() -> None:
    """The fork places ``multi``'s jobs on ``nb`` through tree ``b``'s core once it joined ``b`` (they were
    refused, and ran again as new jobs wherever a heartbeat started them)."""
    simulation = Simulation(fork(tentative_state(), 0, horizon=1.0, durations=DurationSettings()), until=0.0)
    simulation.run()
    assert simulation.stats["placed_jobs_refused"] == 0
    usage = cpu_usage_by_tree(simulation)
    assert usage == {"a": {"na": 0.0}, "b": {"nb": 2.0}}
    assert simulation.trees["b"].core.strategy.operations["multi"].controller.pending_allocation_count == 0


def test_a_pending_operation_waits_for_the_jobs_of_a_tentative_tree() -> None:
    """``waiter`` needs ``nb``'s two slots, which ``multi``'s jobs in its tentative tree hold: it starts once
    one of them ends, simulated or carried by the capacity hand-over."""
    assert_waiter_starts_after_a_job_of_multi(tentative_state())


def test_a_limitation_only_past_the_simulated_part_of_several_trees() -> None:
    whole = SimpleNamespace(simulated=None, horizon=600.0)
    cut = SimpleNamespace(simulated=120.0, horizon=600.0)
    assert tree_limitation(["a", "b"], whole) is None
    assert tree_limitation(["a", "b"], SimpleNamespace(simulated=600.0, horizon=600.0)) is None
    assert tree_limitation(["a"], cut) is None
    assert tree_limitation(["a", "b"], None) is None
    found = tree_limitation(["a", "b", "c"], cut)
    assert found is not None
    assert found["reason"] == "multiple_pool_trees_past_simulated_horizon"
    assert (found["forecast_pool_tree"], found["pool_trees_not_forecast"]) == ("a", ["b", "c"])
    assert found["simulated_horizon"] == 120.0
    console = Console(record=True, width=300)
    render({"state": "computing", "limitation": found}, console)
    assert "forecast limitation: The operation runs in pool trees a, b, c" in console.export_text()


def _start(client: ytw.YtClient, spec: dict[str, Any]) -> str:
    """``start_operation`` of a vanilla operation with ``spec`` as it is (the official client); its id."""
    from yt.wrapper.driver import make_formatted_request

    found = make_formatted_request(
        "start_operation", {"operation_type": "vanilla", "spec": spec}, format=None, client=client
    )
    return str(found["operation_id"])


def test_an_operation_that_only_its_second_tree_can_run_is_forecast_to_start_there(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, nodes=2, node_tags={1: ["other"]}, forecast_settings=SETTINGS)
    try:
        client = cluster.client()
        client.set("//sys/pool_trees/default/@config/nodes_filter", "!other")
        client.create(
            "scheduler_pool_tree", attributes={"name": "other", "config": {"nodes_filter": "other"}}
        )
        # node1 (tree other) is full with the blocker's two jobs; the multi-tree operation waits for them
        blocker = _start(
            client,
            {
                "pool_trees": ["other"],
                "tasks": {"main": {"command": "sleep 3600", "job_count": 2, "cpu_limit": 1}},
            },
        )
        wait_for(lambda: client.get_operation(blocker)["brief_progress"]["jobs"]["running"] == 2, 60, 0.2)
        multi = _start(client, MULTI)

        def ready() -> dict[str, Any] | None:
            found = client.get_operation(multi, attributes=["scheduling_forecast"])["scheduling_forecast"]
            return found if found["state"] == "ready" else None

        forecast = wait_for(ready, 120, 0.5)
        assert not forecast["started"]
        # forecast in its first tree only it would never start (user_slots 0 there); in tree other it starts
        # once a blocker's job ends
        assert forecast["estimated_start_time"]["p50"] is not None
        assert forecast.get("limitation") is None
        # the dry run of the same spec answers the same way
        headers = {
            **auth_headers(cluster.token),
            "X-YT-Output-Format": '"json"',
            "X-YT-Header-Format": '"json"',
            "X-YT-Parameters": json.dumps({"operation_type": "vanilla", "spec": MULTI, "dry_run": True}),
        }
        answer = httpx.post(f"{cluster.url}/api/v4/start_operation", headers=headers, timeout=120)
        assert answer.status_code == 200, answer.text
        dry = answer.json()
        assert list(dry["pool_trees"]) == ["default", "other"]
        assert dry["scheduling_forecast"]["state"] == "ready"
        assert dry["scheduling_forecast"]["estimated_start_time"]["p50"] is not None
        assert "limitation" not in dry["scheduling_forecast"]
        # the operation page shows the start, and no limitation
        page = httpx.get(f"{cluster.url}/operation/{multi}", headers=auth_headers(cluster.token), timeout=30)
        assert page.status_code == 200
        assert 'id="forecast-limitation"' not in page.text
    finally:
        cluster.close()
