"""The forecast of a live cluster through the official client: a queued operation shows when it will start."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pooltree.forecast import ForecastSettings
from pooltree.forecast.arrivals import ArrivalSettings
from pooltree.forecast.worker import WorkerSettings
from tests.forecast.forecast_kit import queue_cluster, start_in_queue
from tests.polling import wait_for
from tests.server.live_cluster import Cluster

SETTINGS = WorkerSettings(
    forecast=ForecastSettings(
        seeds=3, horizon=900.0, arrivals=ArrivalSettings(enabled=True, min_history=30.0)
    ),
    niceness=0,
)
"""The default refresh period (30 fair-share periods): the waits below are for conditions, each met by the refresh
a read asks for when the operation read is newer than the latest forecast (``ForecastService.read``), not by a
worker recomputing continuously. ``niceness=0``: the worker runs at the test's own priority. Its production ``nice`` +10 protects a scheduler's
heartbeats from the forecast; here it would only turn the machine's load into a race between the forecast and the
jobs' wall-clock sleeps (at a load of 15 on 2 cores a forecast with arrivals, ~10 CPU seconds, took minutes)."""

BUSY_JOBS = 64
BUSY_SECONDS = BUSY_JOBS * 3 / 2
"""The operation ahead of the queued one: 3 s jobs on 2 slots, 96 s of work (more than the 30 + 60 s of the waits
while the queued operation must still wait; the forecast's start is asserted within this and a minute)."""


def _seconds(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pooltree.cli",
            "forecast",
            *args,
            "--proxy",
            cluster.url,
            "--token",
            cluster.token,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr
    return result


def test_a_queued_operation_shows_when_it_will_start(tmp_path: Path) -> None:
    cluster = queue_cluster(tmp_path, SETTINGS)
    try:
        client = cluster.client()
        # BUSY_SECONDS of work on the node's 2 slots; the queued operation waits behind it (one running in
        # "queue") for longer than the two waits below may take together, so it is still waiting when asked
        busy = start_in_queue(client, "sleep 3", BUSY_JOBS)
        client.get_operation(busy, attributes=["scheduling_forecast"])  # a read starts the worker meanwhile
        # busy's first jobs complete: the forecast learns their run times
        wait_for(lambda: client.get_operation(busy)["brief_progress"]["jobs"].get("completed", 0) >= 2, 30)
        queued = start_in_queue(client, "sleep 2", 2)
        assert client.get_operation(queued)["state"] == "pending"

        def ready() -> dict[str, Any] | None:
            found = client.get_operation(queued, attributes=["scheduling_forecast", "state"])
            attribute = found.get("scheduling_forecast")
            assert attribute is not None and attribute.get("state") != "unavailable", attribute
            return attribute if attribute.get("state") == "ready" else None

        attribute = wait_for(ready, 60, 0.5)
        start = attribute["estimated_start_time"]
        computed = _seconds(attribute["computed_at"])
        # it starts when busy's last jobs end: after the forecast was made, within busy's work (and a minute)
        assert not attribute["started"]
        assert start["p10"] is not None and start["p90"] is not None
        assert computed <= _seconds(start["p10"]) <= _seconds(start["p50"]) <= _seconds(start["p90"])
        assert _seconds(start["p90"]) - computed < BUSY_SECONDS + 60
        assert attribute["waiting_for"]["reason"] == "max_running_operation_count"
        durations = attribute["job_durations"]["main"]
        assert durations["source"] in ("pool", "operation")
        assert 0.5 < durations["median"] < 5
        assert attribute["seeds"] == 3 and attribute["horizon"] == 900.0
        assert "waiting_for" in attribute
        # the submissions it saw (all in "queue") are what a forecast made once 30 s of history exist (SETTINGS)
        # assumes will keep coming. ``later`` outlives every wait below (its jobs end with the cluster), so the wait
        # is for the forecast alone, not a race with its jobs' wall-clock sleeps
        later = start_in_queue(client, "sleep 3600", 2)

        def assumed() -> dict[str, Any] | None:
            found = client.get_operation(later, attributes=["scheduling_forecast", "state"])
            attribute = found.get("scheduling_forecast")
            assert attribute is not None, (
                f"later ended ({found.get('state')}) before a forecast assumed arrivals"
            )
            assert attribute.get("state") != "unavailable", attribute
            return attribute.get("assumed_arrivals") if attribute.get("state") == "ready" else None

        arrivals = wait_for(assumed, 300, 0.5)
        assert arrivals["pools"] == 1 and arrivals["operations_per_hour"] > 0, arrivals
        assert 30.0 <= arrivals["observed_seconds"] <= arrivals["window"]
        # the CLI prints the same attribute (of ``later``: ``queued`` may have finished by now on a loaded
        # machine, with ~45 s of work ahead of it), and a dry run of a spec file
        printed = _cli(cluster, later)
        assert "new submissions assumed as seen recently" in printed.stdout
        assert "start" in printed.stdout and "p50" in printed.stdout and "finish" in printed.stdout, printed
        spec = tmp_path / "spec.yaml"
        spec.write_text("pool: queue\ntasks: {main: {command: 'sleep 1', job_count: 1, cpu_limit: 1}}\n")
        dry = _cli(cluster, "--spec", str(spec))
        assert "dry run: nothing was started; it would run in default/queue" in dry.stdout, dry
        assert "p50" in dry.stdout
    finally:
        cluster.close()
