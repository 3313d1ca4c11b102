"""The forecast of a live cluster through the official client: a queued operation shows when it will start."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import yt.wrapper as ytw

from pooltree.forecast import ForecastSettings
from pooltree.forecast.worker import WorkerSettings
from tests.polling import wait_for
from tests.server.live_cluster import Cluster

SETTINGS = WorkerSettings(forecast=ForecastSettings(seeds=3, horizon=900.0), refresh_periods=1)


def _seconds(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _vanilla(client: ytw.YtClient, command: str, jobs: int) -> str:
    builder = (
        ytw.VanillaSpecBuilder().begin_task("main").command(command).job_count(jobs).cpu_limit(1).end_task()
    )
    return client.run_operation(builder, sync=False).id


def test_a_queued_operation_shows_when_it_will_start(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, nodes=1, slots=2, forecast_settings=SETTINGS)
    try:
        client = cluster.client()
        busy = _vanilla(client, "sleep 2", 16)
        # busy's first jobs complete: the forecast learns their run times
        wait_for(lambda: client.get_operation(busy)["brief_progress"]["jobs"].get("completed", 0) >= 2, 30)
        queued = _vanilla(client, "sleep 2", 2)

        def ready() -> dict[str, Any] | None:
            found = client.get_operation(queued, attributes=["scheduling_forecast", "state"])
            attribute = found.get("scheduling_forecast")
            assert attribute is not None and attribute.get("state") != "unavailable", attribute
            return attribute if attribute.get("state") == "ready" else None

        attribute = wait_for(ready, 60, 0.2)
        start = attribute["estimated_start_time"]
        computed = _seconds(attribute["computed_at"])
        if attribute["started"]:
            assert start["p50"] is not None
        else:
            assert start["p10"] is not None and start["p90"] is not None
            assert computed <= _seconds(start["p10"]) <= _seconds(start["p50"]) <= _seconds(start["p90"])
            assert _seconds(start["p90"]) - computed < 120
        durations = attribute["job_durations"]["main"]
        assert durations["source"] in ("pool", "operation")
        assert 0.5 < durations["median"] < 5
        assert attribute["seeds"] == 3 and attribute["horizon"] == 900.0
        assert "waiting_for" in attribute
    finally:
        cluster.close()
