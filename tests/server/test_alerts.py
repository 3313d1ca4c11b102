"""Alerts of the live scheduler (pooltree/alerts.py, pooltree/server/live/alerts.py): each one appears when its
cause holds and clears when the cause goes; ``//sys/scheduler/@alerts``, the orchid and ``/metrics`` show them; an
operation no node can ever fit fails with YTsaurus's ``NoOnlineNodeToScheduleJob`` (4410) after the timeout. Driven
without processes: the ``LiveScheduler`` gets heartbeats and updates at injected times; the HTTP part goes through
the ASGI app."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from pooltree.alerts import AlertSettings
from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.job_commands import job_attributes
from pooltree.server.live import LiveScheduler
from pooltree.server.live.alerts import explain_pending
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

GIB = 1 << 30


def live(tmp_path: Path, trees: dict[str, Any], **settings: Any) -> LiveScheduler:
    scheduler = LiveScheduler(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), alert_settings=AlertSettings(**settings)
    )
    scheduler.apply_pool_trees(parse_pool_trees(trees), None, 0.0)
    return scheduler


def heartbeat(scheduler: LiveScheduler, address: str, now: float, cpu: float = 4, **extra: Any) -> dict:
    data = {
        "node_address": address,
        "resource_limits": {"user_slots": 4, "cpu": cpu, "memory": 8 * GIB, **extra.pop("limits", {})},
        **extra,
    }
    return scheduler.process_heartbeat(parse_heartbeat(data), now)


def update(scheduler: LiveScheduler, now: float) -> None:
    for tree in list(scheduler.cores):
        scheduler.update_fair_share(tree, now)


def types(alerts: list[dict[str, Any]]) -> list[str]:
    return [a["attributes"]["alert_type"] for a in alerts]


def vanilla(job_count: int = 1, **task: Any) -> dict[str, Any]:
    return {"tasks": {"main": {"command": "sleep 100", "job_count": job_count, **task}}}


def test_guarantees_overcommitted_appears_and_clears(tmp_path: Path) -> None:
    big = {"default": {"config": {}, "pools": {"a": {"strong_guarantee_resources": {"cpu": 100000}}}}}
    scheduler = live(tmp_path, big)
    heartbeat(scheduler, "n1", 1.0)
    update(scheduler, 1.0)
    alerts = scheduler.scheduler_alerts()
    assert types(alerts) == ["update_fair_share"]
    inner = alerts[0]["inner_errors"]
    assert {e["code"] for e in inner} == {29000}
    assert alerts[0]["attributes"]["pool_tree"] == "default"
    assert scheduler.alert_center.tree_alerts("default") == alerts
    small = {"default": {"config": {}, "pools": {"a": {"strong_guarantee_resources": {"cpu": 2}}}}}
    scheduler.apply_pool_trees(parse_pool_trees(small), None, 2.0)
    update(scheduler, 2.0)
    assert scheduler.scheduler_alerts() == []


def test_tree_without_nodes_and_nodes_without_tree(tmp_path: Path) -> None:
    trees = {"gpu": {"config": {"node_tag_filter": "gpu"}, "pools": {}}}
    scheduler = live(tmp_path, trees)
    update(scheduler, 0.5)
    assert types(scheduler.scheduler_alerts()) == ["pool_tree_without_nodes"]
    heartbeat(scheduler, "plain", 1.0)
    update(scheduler, 1.0)
    alerts = scheduler.scheduler_alerts()
    assert types(alerts) == ["pool_tree_without_nodes", "nodes_without_pool_tree"]
    assert alerts[1]["attributes"]["node_addresses"] == ["plain"]
    heartbeat(scheduler, "plain", 2.0, tags=["gpu"])
    update(scheduler, 2.0)
    assert scheduler.scheduler_alerts() == []


def test_operation_pending_names_pool_and_limit_and_clears(tmp_path: Path) -> None:
    trees = {"default": {"config": {}, "pools": {"small": {"max_running_operation_count": 1}}}}
    scheduler = live(tmp_path, trees)
    heartbeat(scheduler, "n1", 0.5)
    first = scheduler.start_operation("vanilla", {**vanilla(), "pool": "small"}, "alice", 1.0)
    second = scheduler.start_operation("vanilla", {**vanilla(), "pool": "small"}, "alice", 1.0)
    assert scheduler.alerts(first) == {}
    pending = scheduler.alerts(second)["operation_pending"]
    assert pending["attributes"]["pool"] == "small"
    assert pending["attributes"]["limit"] == 1
    assert pending["attributes"]["alert_type"] == "operation_pending"
    assert pending["message"] == "Max running operation count violated"
    scheduler.finish_operation(first.id, "aborted", 2.0)
    assert "operation_pending" not in scheduler.alerts(second)


def test_operation_no_node_fits_alerts_then_fails_with_4410(tmp_path: Path) -> None:
    scheduler = live(tmp_path, {"default": {"config": {}, "pools": {}}}, unschedulable_operation_timeout=5.0)
    heartbeat(scheduler, "n1", 0.5, cpu=2)
    op = scheduler.start_operation("vanilla", vanilla(cpu_limit=64), "alice", 1.0)
    update(scheduler, 1.0)
    error = scheduler.alerts(op)["no_online_node_to_schedule_job"]
    assert error["code"] == 4410
    assert error["message"] == "No online node can satisfy the resource demand"
    assert error["attributes"]["task_name"] == "main"
    assert error["attributes"]["needed_resources"]["cpu"] == 64
    assert error["attributes"]["unsatisfied_resources"] == ["cpu"]
    update(scheduler, 4.0)
    assert op.id in scheduler.operations and op.state == "running"
    update(scheduler, 6.5)
    assert op.id not in scheduler.operations
    record = scheduler.store.get_operation(op.id)
    assert record is not None and record.state == "failed"
    assert record.document["error"]["code"] == 4410
    assert record.document["error"]["attributes"]["needed_resources"]["cpu"] == 64


@pytest.mark.parametrize("cpu_limit", [0.25, 0.5])
def test_nodes_below_the_min_spare_fail_a_small_job_with_the_reason(tmp_path: Path, cpu_limit: float) -> None:
    """``pooltree local --nodes 4`` on 2 cpus made 0.5-cpu nodes: below the tree's default
    min_spare_allocation_resources_on_node (1 cpu) none of them ever starts a job, yet a 0.25- or 0.5-cpu job fits
    their limits, and such an operation stayed pending forever with no alert and no reason."""
    scheduler = live(tmp_path, {"default": {"config": {}, "pools": {}}}, unschedulable_operation_timeout=5.0)
    for index in range(4):
        heartbeat(scheduler, f"n{index}", 0.5, cpu=0.5)
    op = scheduler.start_operation("vanilla", vanilla(cpu_limit=cpu_limit), "alice", 1.0)
    update(scheduler, 1.0)
    assert heartbeat(scheduler, "n0", 1.5, cpu=0.5).get("start", []) == []  # the strategy starts nothing
    error = scheduler.alerts(op)["no_online_node_to_schedule_job"]
    assert error["code"] == 4410 and error["attributes"]["nodes_below_min_spare"] == 4
    assert error["attributes"]["min_spare_allocation_resources_on_node"]["cpu"] == 1
    assert "min_spare_allocation_resources_on_node" in error["inner_errors"][0]["message"]
    assert "cpu" in error["inner_errors"][0]["attributes"]["resources"]
    update(scheduler, 6.5)
    record = scheduler.store.get_operation(op.id)
    assert record is not None and record.state == "failed"
    assert record.document["error"]["inner_errors"][0]["attributes"]["pool_tree"] == "default"


def test_nodes_at_the_trees_own_min_spare_run_the_small_job(tmp_path: Path) -> None:
    """The same nodes in a tree whose min spare they reach: no alert, and the strategy starts the job."""
    spare = {"min_spare_allocation_resources_on_node": {"cpu": 0.25, "user_slots": 1}}
    scheduler = live(
        tmp_path, {"default": {"config": spare, "pools": {}}}, unschedulable_operation_timeout=5.0
    )
    heartbeat(scheduler, "n0", 0.5, cpu=0.5)
    op = scheduler.start_operation("vanilla", vanilla(cpu_limit=0.25), "alice", 1.0)
    update(scheduler, 1.0)
    assert "no_online_node_to_schedule_job" not in scheduler.alerts(op)
    assert len(heartbeat(scheduler, "n0", 1.5, cpu=0.5)["start"]) == 1


def test_no_node_fits_clears_when_a_big_enough_node_comes(tmp_path: Path) -> None:
    scheduler = live(tmp_path, {"default": {"config": {}, "pools": {}}}, unschedulable_operation_timeout=5.0)
    heartbeat(scheduler, "n1", 0.5, cpu=2)
    op = scheduler.start_operation("vanilla", vanilla(gpu_limit=1, cpu_limit=1), "alice", 1.0)
    update(scheduler, 1.0)
    assert scheduler.alerts(op)["no_online_node_to_schedule_job"]["attributes"]["unsatisfied_resources"] == [
        "gpu"
    ]
    heartbeat(scheduler, "gpu-node", 3.0, limits={"gpu": 1})
    update(scheduler, 3.0)
    assert "no_online_node_to_schedule_job" not in scheduler.alerts(op)
    update(scheduler, 10.0)
    assert op.id in scheduler.operations


def test_no_node_fits_waits_for_safe_online_node_count(tmp_path: Path) -> None:
    scheduler = live(
        tmp_path,
        {"default": {"config": {}, "pools": {}}},
        unschedulable_operation_timeout=1.0,
        safe_online_node_count=2,
    )
    heartbeat(scheduler, "n1", 0.5, cpu=2)
    op = scheduler.start_operation("vanilla", vanilla(cpu_limit=64), "alice", 1.0)
    update(scheduler, 1.0)
    update(scheduler, 5.0)
    assert "no_online_node_to_schedule_job" not in scheduler.alerts(op)
    assert op.id in scheduler.operations


def test_starving_operation_alert_after_threshold(tmp_path: Path) -> None:
    trees = {
        "default": {
            "config": {"fair_share_starvation_timeout": 1000, "fair_share_starvation_tolerance": 1.0},
            "pools": {"a": {}, "b": {}},
        }
    }
    scheduler = live(tmp_path, trees, starving_operation_timeout=10.0)
    heartbeat(scheduler, "n1", 0.5, cpu=4)
    hog = scheduler.start_operation("vanilla", {**vanilla(4, cpu_limit=1), "pool": "a"}, "alice", 1.0)
    heartbeat(scheduler, "n1", 1.1)
    update(scheduler, 1.2)
    late = scheduler.start_operation("vanilla", {**vanilla(4, cpu_limit=1), "pool": "b"}, "bob", 2.0)
    update(scheduler, 3.0)
    update(scheduler, 5.0)
    view = scheduler.strategy_views["default"][late.id]
    assert view["starvation_status"] != "non_starving", view
    assert "operation_starving" not in scheduler.alerts(late, now=5.0)
    update(scheduler, 20.0)
    starving = scheduler.alerts(late, now=20.0)["operation_starving"]
    assert starving["attributes"]["pool"] == "b"
    assert starving["attributes"]["starving_seconds"] >= 10.0
    scheduler.finish_operation(hog.id, "aborted", 21.0)
    heartbeat(scheduler, "n1", 21.5)
    update(scheduler, 22.0)
    assert "operation_starving" not in scheduler.alerts(late, now=22.0)


def test_unrecognized_spec_alert(tmp_path: Path) -> None:
    scheduler = live(tmp_path, {"default": {"config": {}, "pools": {}}})
    op = scheduler.start_operation("vanilla", {**vanilla(), "frobnicate": True}, "alice", 1.0)
    alert = scheduler.alerts(op)["unrecognized_spec"]
    assert alert["attributes"]["unrecognized_spec"] == {"frobnicate": True}
    assert "closest_known_options" not in alert["attributes"]  # nothing close to it


def test_unrecognized_spec_alert_names_the_closest_known_option(tmp_path: Path) -> None:
    scheduler = live(tmp_path, {"default": {"config": {}, "pools": {}}})
    op = scheduler.start_operation("vanilla", {**vanilla(), "max_failed_job_cuont": 3}, "alice", 1.0)
    alert = scheduler.alerts(op)["unrecognized_spec"]
    assert alert["attributes"]["closest_known_options"] == {
        "spec.max_failed_job_cuont": "max_failed_job_count"
    }


def test_spec_alerts_are_found_once_and_handed_out_as_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spec's own alerts (unsupported, unrecognized options) are made at the first read and kept: a pending
    operation's map is built again at every start into its pool. Readers get copies."""
    scheduler = live(tmp_path, {"default": {"config": {}, "pools": {}}})
    spec = {**vanilla(docker_image="registry.example/ml:1"), "max_failed_job_cuont": 3}
    op = scheduler.start_operation("vanilla", spec, "alice", 1.0)
    found: list[str] = []
    real = type(scheduler.alert_center)._spec_alerts

    def counted(operation: Any) -> Any:
        found.append(operation.id)
        return real(operation)

    monkeypatch.setattr(scheduler.alert_center, "_spec_alerts", counted)
    op.spec_alerts = None  # as if never read
    first = scheduler.alerts(op)
    assert set(first) >= {"unsupported_options", "unrecognized_spec"}
    first["unrecognized_spec"]["attributes"]["unrecognized_spec"].clear()
    scheduler.unrecognized_spec(op).clear()
    second = scheduler.alerts(op)
    assert second["unrecognized_spec"]["attributes"]["unrecognized_spec"] == {"max_failed_job_cuont": 3}
    assert scheduler.unrecognized_spec(op) == {"max_failed_job_cuont": 3}
    assert list(second) == list(first) and found == [op.id]  # made once


def test_store_trouble_appears_and_clears(tmp_path: Path) -> None:
    scheduler = live(tmp_path, {"default": {"config": {}, "pools": {}}})
    heartbeat(scheduler, "n1", 0.5)
    problem: list[str] = ["database is locked"]
    scheduler.alert_center.store_health = lambda: problem[0] if problem else None
    alerts = scheduler.scheduler_alerts()
    assert types(alerts) == ["store_trouble"]
    assert "database is locked" in alerts[0]["message"]
    problem.clear()
    assert scheduler.scheduler_alerts() == []


@pytest.mark.anyio
async def test_alerts_in_cypress_orchid_operation_and_metrics(tmp_path: Path) -> None:
    token = "ytct-0000-" + "a1" * 16
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), create_default_tree=True, token=token
    )
    await service.start()
    transport = httpx.ASGITransport(app=service.app)
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", headers={"Authorization": f"OAuth {token}"}
        ) as client:

            async def get(path: str) -> Any:
                response = await client.get("/api/v4/get", params={"path": path})
                assert response.status_code == 200, response.text
                return response.json()["value"]

            assert types(await get("//sys/scheduler/@alerts")) == ["pool_tree_without_nodes"]
            assert types(await get("//sys/scheduler/orchid/scheduler/alerts")) == ["pool_tree_without_nodes"]
            tree_alerts = await get("//sys/scheduler/orchid/scheduler/pool_trees/default/alerts")
            assert types(tree_alerts) == ["pool_tree_without_nodes"]
            metrics = (await client.get("/metrics")).text
            assert 'pooltree_alerts{scope="scheduler",type="pool_tree_without_nodes"} 1.0' in metrics
            now = service.clock()
            heartbeat(service.scheduler, "n1", now)
            service.scheduler.update_fair_share("default", now)
            assert await get("//sys/scheduler/@alerts") == []
            metrics = (await client.get("/metrics")).text
            assert 'pooltree_alerts{scope="scheduler",type="pool_tree_without_nodes"} 0.0' in metrics
            response = await client.post(
                "/api/v4/start_operation",
                json={"operation_type": "vanilla", "spec": vanilla(cpu_limit=64)},
            )
            operation_id = response.json()["operation_id"]
            service.scheduler.update_fair_share("default", service.clock())
            response = await client.get("/api/v4/get_operation", params={"operation_id": operation_id})
            assert response.json()["alerts"]["no_online_node_to_schedule_job"]["code"] == 4410
            metrics = (await client.get("/metrics")).text
            assert 'pooltree_alerts{scope="operation",type="no_online_node_to_schedule_job"} 1.0' in metrics
    finally:
        await service.stop()
        service.store.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_preempted_job_says_why_and_for_whom(tmp_path: Path) -> None:
    trees = {
        "default": {
            "config": {"fair_share_starvation_timeout": 1000, "fair_share_starvation_tolerance": 1.0},
            "pools": {"a": {}, "b": {}},
        }
    }
    scheduler = live(tmp_path, trees)
    heartbeat(scheduler, "n1", 0.5, cpu=4)
    hog = scheduler.start_operation("vanilla", {**vanilla(4, cpu_limit=1), "pool": "a"}, "alice", 1.0)
    started = heartbeat(scheduler, "n1", 1.1)["start"]
    running = [{"job_id": s["job_id"], "operation_id": hog.id, "state": "running"} for s in started]
    assert len(running) == 4
    late = scheduler.start_operation("vanilla", {**vanilla(4, cpu_limit=1), "pool": "b"}, "bob", 2.0)
    preempted: list[str] = []
    for step in range(3, 12):
        update(scheduler, float(step))
        answer = heartbeat(scheduler, "n1", step + 0.5, running_jobs=running)
        preempted += [a["job_id"] for a in answer["abort"]] + [p[0] for p in answer["preempt"]]
        if preempted:
            break
    assert preempted, "no preemption happened"
    job = hog.jobs[preempted[0]]
    attributes = job_attributes(job)
    info = attributes["interruption_info"]
    assert info["interruption_reason"] == "preemption"
    assert info["preempted_for"]["operation_id"] == late.id
    assert attributes["preempted_for"]["operation_id"] == late.id
    assert isinstance(attributes["preemption_reason"], str) and attributes["preemption_reason"]
    stored = scheduler.store.get_job(hog.id, job.id)
    assert (
        stored is not None
        and stored.document["interruption_info"]["preempted_for"]["operation_id"] == late.id
    )
    events = [e for e in scheduler.event_log if e["event"] == "allocation_preempted"]
    assert events and events[0]["job_id"] == job.id
    assert events[0]["preempted_for"]["operation_id"] == late.id
    # the node reports the job aborted with its own error (abort_reason only): the job's error then says why and
    # for whom, where YTsaurus puts it (test_pass_preemption_reason_to_node)
    node_error = {
        "code": 1101,
        "message": "Job aborted by scheduler",
        "attributes": {"abort_reason": "preemption"},
    }
    finished = {"job_id": job.id, "operation_id": hog.id, "state": "aborted", "abort_reason": "preemption"}
    heartbeat(scheduler, "n1", 13.0, finished_jobs=[{**finished, "error": node_error}])
    attributes = job_attributes(hog.jobs[job.id])
    assert attributes["state"] == "aborted" and attributes["abort_reason"] == "preemption"
    error_attributes = attributes["error"]["attributes"]
    assert error_attributes["abort_reason"] == "preemption"
    assert error_attributes["preemption_reason"].startswith("Preempted to start allocation")
    assert f"of operation {late.id}" in error_attributes["preemption_reason"]
    assert error_attributes["preempted_for"]["operation_id"] == late.id
    stored = scheduler.store.get_job(hog.id, job.id)
    assert (
        stored is not None
        and stored.document["error"]["attributes"]["preemption_reason"]
        == (error_attributes["preemption_reason"])
    )


def explanation(scheduler: LiveScheduler, op: Any, tree: str = "default") -> dict[str, Any] | None:
    return explain_pending(scheduler, op, tree)


def test_pending_explanations_name_the_limit(tmp_path: Path) -> None:
    trees = {
        "default": {
            "config": {},
            "pools": {
                "capped": {"resource_limits": {"cpu": 1}},
                "free": {},
                "one": {"max_running_operation_count": 1},
            },
        }
    }
    scheduler = live(tmp_path, trees)
    heartbeat(scheduler, "n1", 0.5, cpu=4, tags=["ssd"])
    capped = scheduler.start_operation("vanilla", {**vanilla(3, cpu_limit=1), "pool": "capped"}, "a", 1.0)
    tagged = scheduler.start_operation(
        "vanilla", {**vanilla(1, cpu_limit=1), "pool": "free", "scheduling_tag_filter": "gpu"}, "a", 1.0
    )
    first = scheduler.start_operation("vanilla", {**vanilla(1), "pool": "one"}, "a", 1.0)
    queued = scheduler.start_operation("vanilla", {**vanilla(1), "pool": "one"}, "a", 1.0)
    big = scheduler.start_operation("vanilla", {**vanilla(1, cpu_limit=8), "pool": "free"}, "a", 1.0)
    heartbeat(scheduler, "n1", 1.5, tags=["ssd"])
    update(scheduler, 2.0)
    reason = explanation(scheduler, capped)
    assert reason is not None and reason["reason"] == "resource_limits", reason
    assert (reason["pool"], reason["resource"], reason["limit"]) == ("capped", "cpu", 1.0)
    reason = explanation(scheduler, tagged)
    assert reason is not None and reason["reason"] == "scheduling_tag_filter", reason
    reason = explanation(scheduler, queued)
    assert reason is not None and reason["reason"] == "max_running_operation_count"
    assert (reason["pool"], reason["queue_position"]) == ("one", 1)
    reason = explanation(scheduler, big)
    assert reason is not None and reason["reason"] == "no_node_fits"
    assert explanation(scheduler, first) is None


def test_unsupported_tree_options_alert_appears_and_clears(tmp_path: Path) -> None:
    scheduler = live(tmp_path, {"default": {"config": {"enable_by_user_profiling": True}, "pools": {}}})
    heartbeat(scheduler, "n1", 0.5)
    update(scheduler, 1.0)
    alerts = scheduler.scheduler_alerts()
    assert types(alerts) == ["unsupported_options"]
    assert alerts[0]["attributes"]["pool_tree"] == "default"
    assert alerts[0]["attributes"]["options"][0]["option"] == "enable_by_user_profiling"
    scheduler.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), None, 2.0)
    update(scheduler, 2.0)
    assert scheduler.scheduler_alerts() == []


def test_unrecognized_tree_options_alert_names_the_closest_option(tmp_path: Path) -> None:
    """YTsaurus's tree alert "Pool tree config contains unrecognized options" (issue 14: they were refused)."""
    doc = {"default": {"config": {"fair_share_starvation_tolerence": 0.5}, "pools": {"p": {"wieght": 2}}}}
    scheduler = live(tmp_path, doc)
    heartbeat(scheduler, "n1", 0.5)
    update(scheduler, 1.0)
    alerts = scheduler.scheduler_alerts()
    assert types(alerts) == ["unrecognized_pool_tree_config_options"]
    assert alerts[0]["message"] == "Pool tree config contains unrecognized options"
    entries = alerts[0]["attributes"]["unrecognized"]
    assert [(e["path"], e["closest"]) for e in entries] == [
        ("pool_trees.default.config.fair_share_starvation_tolerence", "fair_share_starvation_tolerance"),
        ("pool_trees.default.pools.p.wieght", "weight"),
    ]
    scheduler.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), None, 2.0)
    update(scheduler, 2.0)
    assert scheduler.scheduler_alerts() == []


def test_pending_explanation_fair_share_reached_with_position(tmp_path: Path) -> None:
    scheduler = live(tmp_path, {"default": {"config": {}, "pools": {"shared": {}}}})
    heartbeat(scheduler, "n1", 0.5, cpu=4)
    first = scheduler.start_operation("vanilla", {**vanilla(10, cpu_limit=1), "pool": "shared"}, "a", 1.0)
    second = scheduler.start_operation("vanilla", {**vanilla(10, cpu_limit=1), "pool": "shared"}, "b", 1.0)
    heartbeat(scheduler, "n1", 1.5)
    update(scheduler, 2.0)
    reasons = [explanation(scheduler, op) for op in (first, second)]
    assert all(r is not None and r["reason"] == "fair_share_reached" for r in reasons), reasons
    assert sorted(r["queue_position"] for r in reasons) == [1, 2]  # type: ignore[index]
    assert all(r["pool"] == "shared" for r in reasons)  # type: ignore[index]
