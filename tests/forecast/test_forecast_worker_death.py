"""The forecast worker killed with SIGKILL under a live scheduler: the death is seen while nothing waits for it,
shown as the ``forecast_worker_died`` scheduler alert and in ``/metrics``, heartbeats and API calls go on, and a
new worker makes the next forecast after the back-off."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import psutil

from pooltree.forecast import ForecastSettings
from pooltree.forecast.worker import WorkerSettings
from tests.forecast.forecast_kit import queue_cluster, start_in_queue
from tests.polling import wait_for
from tests.server.live_cluster import auth_headers

SETTINGS = WorkerSettings(
    forecast=ForecastSettings(seeds=2, horizon=600.0), refresh_periods=5, restart_backoff=1.0
)
"""A refresh every 5 fair-share periods while read (5 s): after the death, the next one comes by itself."""


def _worker() -> psutil.Process | None:
    """This test process's forecast worker: its one spawned child (``multiprocessing``'s spawn)."""
    for child in psutil.Process(os.getpid()).children():
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                return child
        except psutil.Error:
            continue
    return None


def _metric(url: str, token: str, name: str) -> float | None:
    text = httpx.get(f"{url}/metrics", headers=auth_headers(token), timeout=30).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_a_killed_worker_is_alerted_counted_and_replaced_while_heartbeats_go_on(tmp_path: Path) -> None:
    cluster = queue_cluster(tmp_path, SETTINGS)
    try:
        client = cluster.client()
        busy = start_in_queue(client, "sleep 3600", 4)  # outlives the test: ``queued`` waits throughout
        queued = start_in_queue(client, "sleep 1", 1)

        def forecast() -> dict[str, Any]:
            return client.get_operation(queued, attributes=["scheduling_forecast"])["scheduling_forecast"]

        first = wait_for(lambda: (found := forecast())["state"] == "ready" and found, 120, 0.5)
        worker = wait_for(_worker, 30)
        assert _metric(cluster.url, cluster.token, "pooltree_forecast_worker_deaths_total") == 0
        heartbeats = cluster.nodes[0].heartbeats
        worker.kill()  # as the kernel's OOM killer would

        def alerted() -> dict[str, Any] | None:
            alerts = client.get("//sys/scheduler/@alerts")
            return next((a for a in alerts if a["attributes"]["alert_type"] == "forecast_worker_died"), None)

        alert = wait_for(alerted, 60, 0.2)
        assert alert["attributes"]["last_death_reason"] == "killed by SIGKILL"
        assert alert["attributes"]["deaths"] == 1
        assert _metric(cluster.url, cluster.token, "pooltree_forecast_worker_deaths_total") == 1
        # the API answers and heartbeats go on meanwhile
        assert client.get_operation(busy)["state"] == "running"
        wait_for(lambda: cluster.nodes[0].heartbeats >= heartbeats + 5, 60)
        # a new worker after the back-off makes a newer forecast; the alert says it recovered
        wait_for(
            lambda: (found := forecast())["state"] == "ready" and found["computed_at"] > first["computed_at"],
            180,
            0.5,
        )
        replacement = wait_for(_worker, 30)
        assert replacement.pid != worker.pid
        assert _metric(cluster.url, cluster.token, "pooltree_forecast_worker_restarts_total") == 1
        recovered = wait_for(alerted, 30)
        assert recovered["attributes"]["deaths_in_a_row"] == 0
        assert "succeeded since" in recovered["message"]
        assert not cluster.nodes[0].errors
    finally:
        cluster.close()
