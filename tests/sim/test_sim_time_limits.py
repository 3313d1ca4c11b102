"""The simulator applies the core's time limits and gang rules (same SchedulerCore as the live service)."""

from __future__ import annotations

from simkit import events, job, run


def _document(spec: dict, *, duration: str = "10m", job_count: int = 4) -> dict:
    return {
        "seed": 1,
        "until": "5m",
        "scheduler": {"fair_share_update_period": "1s", "node_heartbeat_period": "1s"},
        "cluster": {
            "nodes": [
                {"address": "n", "count": 2, "resource_limits": {"user_slots": 4, "cpu": 4, "memory": "8Gi"}}
            ]
        },
        "pool_trees": {"t": {"pools": {"a": {}}}},
        "operations": [
            {
                "id": "op",
                "submit_time": 0,
                "spec": {"pool": "a", **spec},
                "tasks": [
                    {"job_count": job_count, "resources": job(cpu=1, memory="1Gi"), "duration": duration}
                ],
            }
        ],
    }


def test_an_operation_past_its_time_limit_fails_with_ytsaurus_error(tmp_path) -> None:
    summary = run(_document({"time_limit": 60000}), tmp_path)
    op = summary["operations"][0]
    assert op["state"] == "failed"
    assert 60.0 < op["finish_time"] <= 62.0
    errors = [e for e in events(tmp_path) if e["event"] == "operation_error"]
    assert errors and errors[0]["error"] == "Operation is running for too long, aborted"


def test_without_a_time_limit_the_operation_runs_on(tmp_path) -> None:
    summary = run(_document({}), tmp_path)
    assert summary["operations"][0]["state"] in ("running", "completed")
    assert not [e for e in events(tmp_path) if e["event"] == "operation_error"]


def test_a_node_failure_restarts_every_job_of_a_gang_in_its_allocation(tmp_path) -> None:
    """YTsaurus's gang controller (task ``gang_options``): the jobs lost with the node go back to pending, every
    other job is aborted (``operation_incarnation_changed``) and restarted at once in its own allocation."""
    document = _document({"is_gang": True}, job_count=8)
    document["operations"][0]["type"] = "vanilla"
    document["operations"][0]["tasks"][0]["gang_options"] = {}
    document["cluster"]["nodes"][0]["count"] = 3  # 12 slots: the gang's 8 jobs spread over the nodes
    document["node_failures"] = [{"address": "n-1", "at": "30s", "duration": "10m"}]
    run(document, tmp_path)
    log = events(tmp_path)
    lost_on_node = [e for e in log if e["event"] == "allocation_aborted" and e["time"] == 30.0]
    restarted = [
        e
        for e in log
        if e["event"] == "allocation_preempted" and e["reason"] == "operation_incarnation_changed"
    ]
    assert lost_on_node and restarted
    # Every allocation running at the failure stopped: those on the failed node and, with them, the others.
    started = [e for e in log if e["event"] == "allocation_started"]
    running_before = {e["allocation_id"]: e["node"] for e in started if e["time"] < 30.0}
    stopped = {e["allocation_id"] for e in lost_on_node} | {e["allocation_id"] for e in restarted}
    assert set(running_before) <= stopped
    # The restarted ones start again at once on the same nodes (their allocations are kept).
    again = [e for e in started if e.get("stage") == "incarnation_switch"]
    assert sorted(e["node"] for e in again) == sorted(running_before[e["allocation_id"]] for e in restarted)
    assert all(e["time"] == 30.0 for e in again)


def test_is_gang_without_gang_options_loses_only_the_jobs_of_the_failed_node(tmp_path) -> None:
    document = _document({"is_gang": True}, job_count=8)
    document["cluster"]["nodes"][0]["count"] = 3
    document["node_failures"] = [{"address": "n-1", "at": "30s", "duration": "10m"}]
    run(document, tmp_path)
    log = events(tmp_path)
    assert [e for e in log if e["event"] == "allocation_aborted" and e["time"] == 30.0]
    assert not [e for e in log if e.get("reason") == "operation_incarnation_changed"]


def test_the_summary_lists_options_pooltree_ignores(tmp_path) -> None:
    document = _document({"allow_idle_cpu_policy": True})
    document["pool_trees"]["t"]["config"] = {"waiting_for_resources_on_node_timeout": 60000}
    summary = run(document, tmp_path)
    paths = [entry["path"] for entry in summary["unsupported_options"]]
    assert paths == [
        "pool_trees.t.config.waiting_for_resources_on_node_timeout",
        "operations.op.spec.allow_idle_cpu_policy",
    ]


def test_the_summary_lists_unrecognized_option_names_with_the_closest_one(tmp_path) -> None:
    document = _document({"poool": "a"})
    document["pool_trees"]["t"]["config"] = {"preemptive_scheduling_backof": 1}
    summary = run(document, tmp_path)
    found = [(entry["path"], entry.get("closest")) for entry in summary["unrecognized_options"]]
    assert found == [
        ("pool_trees.t.config.preemptive_scheduling_backof", "preemptive_scheduling_backoff"),
        ("operations.op.spec.poool", "pool"),
    ]


def test_a_tree_that_needs_gpu_fails_a_cpu_only_operation(tmp_path) -> None:
    document = _document({})
    document["pool_trees"]["t"]["config"] = {"necessary_resources_for_operation": ["gpu"]}
    summary = run(document, tmp_path)
    assert summary["operations"][0]["state"] == "failed"
    errors = [e for e in events(tmp_path) if e["event"] == "operation_error"]
    assert errors[0]["error"] == "Operation has zero demand for resources which are necessary in tree 't'"
