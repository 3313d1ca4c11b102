"""The forecast worker killed with SIGKILL under a live scheduler: the death is seen while nothing waits for it,
shown as the ``forecast_worker_died`` scheduler alert and in ``/metrics``, heartbeats and API calls go on, and a
new worker makes the next forecast after the back-off, also while nobody reads forecasts (the alert then says it
recovered). A refresh's phases go to ``/metrics``, not to the INFO log."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from pooltree.forecast import ForecastSettings
from pooltree.forecast.worker import WorkerSettings
from tests.forecast.forecast_kit import queue_cluster, start_in_queue
from tests.polling import wait_for
from tests.server.live_cluster import auth_headers

SETTINGS = WorkerSettings(
    forecast=ForecastSettings(seeds=2, horizon=600.0), refresh_periods=60, idle_after=0.5, restart_backoff=1.0
)
"""Periodic refreshes only while read in the last half second (and a forecast stale after 60 s): the test reads
before the death only, so a refresh after it is one the death asked for."""


def _spawned() -> set[int]:
    """This test process's children started by ``multiprocessing``'s spawn, by pid."""
    found = set()
    for child in psutil.Process(os.getpid()).children():
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                found.add(child.pid)
        except psutil.Error:
            continue
    return found


def _worker(before: set[int]) -> psutil.Process | None:
    """The cluster's forecast worker: a spawned child of this test process that was not there before the cluster
    started (under pytest-xdist the process ran other tests first; a child one of them left, such as a shard
    process still ending, would be taken for the worker, and killing it would raise no forecast alert)."""
    for pid in sorted(_spawned() - before):
        try:
            return psutil.Process(pid)
        except psutil.Error:
            continue
    return None


def _metric(url: str, token: str, name: str) -> float | None:
    text = httpx.get(f"{url}/metrics", headers=auth_headers(token), timeout=30).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_a_killed_worker_is_alerted_counted_and_replaced_while_heartbeats_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pooltree.forecast")
    before = _spawned()
    cluster = queue_cluster(tmp_path, SETTINGS)
    try:
        client = cluster.client()
        busy = start_in_queue(client, "sleep 3600", 4)  # outlives the test: ``queued`` waits throughout
        queued = start_in_queue(client, "sleep 1", 1)

        def forecast() -> dict[str, Any]:
            return client.get_operation(queued, attributes=["scheduling_forecast"])["scheduling_forecast"]

        first = wait_for(lambda: (found := forecast())["state"] == "ready" and found, 120, 0.5)
        copies = _metric(
            cluster.url, cluster.token, 'pooltree_forecast_refresh_phase_seconds_count{phase="copy"}'
        )
        assert copies is not None and copies >= 1
        worker_sum = _metric(
            cluster.url, cluster.token, 'pooltree_forecast_refresh_phase_seconds_sum{phase="worker"}'
        )
        assert worker_sum is not None and worker_sum > 0
        assert not [r for r in caplog.records if r.levelno >= logging.INFO and "forecast" in r.getMessage()]
        worker = wait_for(lambda: _worker(before), 30)
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
        # the API answers and heartbeats go on meanwhile (no forecast read: listing does not read one)
        assert client.list_operations(pool="queue")["operations"]
        wait_for(lambda: cluster.nodes[0].heartbeats >= heartbeats + 5, 60)
        # a new worker after the back-off makes a forecast though nobody reads: the alert says it recovered
        recovered = wait_for(
            lambda: (found := alerted()) and found["attributes"]["deaths_in_a_row"] == 0 and found, 180, 0.5
        )
        assert "succeeded since" in recovered["message"]
        refreshes = _metric(cluster.url, cluster.token, "pooltree_forecast_refreshes_total")
        assert refreshes is not None and refreshes >= 2
        replacement = wait_for(lambda: _worker(before), 30)
        assert replacement.pid != worker.pid
        assert _metric(cluster.url, cluster.token, "pooltree_forecast_worker_restarts_total") == 1
        newer = forecast()
        assert newer["state"] == "ready" and newer["computed_at"] > first["computed_at"]
        assert client.get_operation(busy)["state"] == "running"
        assert not cluster.nodes[0].errors
    finally:
        cluster.close()
