"""``start_operation`` with ``dry_run=%true``: the checks of a real start, the forecast of it, nothing stored."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import yt.wrapper as ytw

from pooltree.forecast import ForecastSettings
from pooltree.forecast.worker import WorkerSettings
from tests.polling import wait_for
from tests.server.live_cluster import Cluster

SETTINGS = WorkerSettings(forecast=ForecastSettings(seeds=3, horizon=600.0))


def _start(cluster: Cluster, spec: dict[str, Any], **parameters: Any) -> httpx.Response:
    headers = {
        "Authorization": f"OAuth {cluster.token}",
        "X-YT-Output-Format": '"json"',
        "X-YT-Header-Format": '"json"',
        "X-YT-Parameters": json.dumps({"operation_type": "vanilla", "spec": spec, **parameters}),
    }
    return httpx.post(f"{cluster.url}/api/v4/start_operation", headers=headers, timeout=120)


def _store_bytes(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.glob("state.db*")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _without_times(error: Any) -> Any:
    """A YT error without its ``datetime`` attributes (the same error at another moment)."""
    if isinstance(error, dict):
        return {key: _without_times(value) for key, value in error.items() if key != "datetime"}
    if isinstance(error, list):
        return [_without_times(value) for value in error]
    return error


def cluster_operations(cluster: Cluster) -> list[str]:
    return [op["id"] for op in cluster.client().list_operations(state="running")["operations"]]


def _settled_store_bytes(root: Path) -> str:
    """The store's bytes once nothing writes any more (a start's follow-up writes, e.g. its state once the
    trees are published, land a loop tick after the start answered)."""
    previous: list[str] = []

    def settled() -> str | None:
        current = _store_bytes(root)
        found = current if previous and previous[-1] == current else None
        previous.append(current)
        return found

    return wait_for(settled, 20, 0.5)


def _sleeper(jobs: int, pool: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"tasks": {"main": {"command": "sleep 30", "job_count": jobs, "cpu_limit": 1}}}
    if pool is not None:
        spec["pool"] = pool
    return spec


def test_a_dry_run_answers_the_forecast_and_changes_nothing(tmp_path: Path) -> None:
    # no node: nothing in the background writes to the store (heartbeats store job reports), so the bytes of the
    # store before and after the dry run can be compared; with no node the forecast says "after the horizon"
    cluster = Cluster(tmp_path, nodes=0, forecast_settings=SETTINGS)
    try:
        client = cluster.client()
        client.create(
            "scheduler_pool",
            attributes={"name": "small", "pool_tree": "default", "max_running_operation_count": 1},
        )
        running = client.run_operation(
            ytw.VanillaSpecBuilder()
            .begin_task("main")
            .command("sleep 30")
            .job_count(2)
            .cpu_limit(1)
            .end_task()
            .pool("small"),
            sync=False,
        )
        before = _settled_store_bytes(tmp_path)
        operations = [(op["id"], op["state"]) for op in client.list_operations()["operations"]]

        response = _start(cluster, _sleeper(1, "small"), dry_run=True)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["dry_run"] is True and answer["pool_trees"] == {"default": "small"}
        forecast = answer["scheduling_forecast"]
        assert forecast["state"] == "ready", forecast
        assert forecast["waiting_for"]["reason"] == "max_running_operation_count"
        assert forecast["waiting_for"]["pool"] == "small"
        assert forecast["started"] is False
        assert forecast["estimated_start_time"] == {"p10": None, "p50": None, "p90": None}
        assert forecast["horizon"] == 600.0 and forecast["seeds"] == 3
        assert forecast["job_durations"]["main"]["source"] in ("prior", "pool")

        assert _store_bytes(tmp_path) == before
        assert [(op["id"], op["state"]) for op in client.list_operations()["operations"]] == operations
        assert list(cluster_operations(cluster)) == [running.id]
    finally:
        cluster.close()


def test_a_dry_run_refuses_what_a_start_refuses(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, nodes=0, forecast_settings=SETTINGS)
    try:
        cluster.client().create(
            "scheduler_pool", attributes={"name": "full", "pool_tree": "default", "max_operation_count": 0}
        )
        for spec in (
            {"tasks": {"main": {"command": "true", "job_count": 0}}},
            _sleeper(1, "full"),
            {"tasks": {"main": {"command": "true", "job_count": 1}}, "pool": "bad name!"},
        ):
            before = _settled_store_bytes(tmp_path)
            dry = _start(cluster, spec, dry_run=True)
            assert _store_bytes(tmp_path) == before
            real = _start(cluster, spec)
            assert dry.status_code == real.status_code >= 400, (dry.text, real.text)
            assert _without_times(dry.json()) == _without_times(real.json())
        bad = _start(cluster, _sleeper(1), dry_run="yes")
        assert bad.status_code == 400 and "dry_run" in bad.text
    finally:
        cluster.close()


def test_a_dry_run_holds_no_command_thread_while_the_worker_computes(tmp_path: Path, monkeypatch) -> None:
    """With one command thread, other commands are answered while a dry run waits for the forecast worker (the
    worker's answer is held back here until they were), and the dry run then answers its forecast."""
    import concurrent.futures
    import threading

    from pooltree.forecast.worker import ForecastService

    monkeypatch.setenv("POOLTREE_COMMAND_THREADS", "1")
    sent = threading.Event()
    release = threading.Event()
    original = ForecastService._send

    def held(self: ForecastService, state: Any, settings: Any) -> concurrent.futures.Future[Any]:
        computing = original(self, state, settings)
        gate: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def pass_on() -> None:
            release.wait(60)
            try:
                gate.set_result(computing.result(timeout=120))
            except Exception as error:  # the worker's own failure, passed on as it came
                gate.set_exception(error)

        threading.Thread(target=pass_on, daemon=True).start()
        sent.set()
        return gate

    monkeypatch.setattr(ForecastService, "_send", held)
    cluster = Cluster(tmp_path, nodes=0, forecast_settings=SETTINGS)
    try:
        client = cluster.client()
        answers: list[httpx.Response] = []
        dry = threading.Thread(target=lambda: answers.append(_start(cluster, _sleeper(1), dry_run=True)))
        dry.start()
        assert sent.wait(60), "the dry run never reached the forecast worker"
        for _ in range(3):  # each needs the one command thread
            assert client.list_operations()["operations"] == []
        assert dry.is_alive() and not answers  # still waiting for the worker, off the command threads
        release.set()
        dry.join(120)
        assert answers and answers[0].status_code == 200, answers
        assert answers[0].json()["scheduling_forecast"]["state"] == "ready"
    finally:
        release.set()
        cluster.close()
