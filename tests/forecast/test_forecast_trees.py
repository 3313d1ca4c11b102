"""An operation in several pool trees: the forecast schedules it in its first tree only (the simulator runs an
operation in one tree), and says so where users look (``scheduling_forecast.limitation`` of ``get_operation``
and of a dry run, the CLI, the operation page), never silently."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import yt.wrapper as ytw
from rich.console import Console

from pooltree.cli.forecast import render
from pooltree.forecast import ForecastSettings
from pooltree.forecast.live import tree_limitation
from pooltree.forecast.worker import WorkerSettings
from tests.polling import wait_for
from tests.server.live_cluster import Cluster, auth_headers

SETTINGS = WorkerSettings(forecast=ForecastSettings(seeds=2, horizon=600.0), niceness=0)
SPEC = {
    "pool_trees": ["default", "other"],
    "tasks": {"main": {"command": "sleep 3600", "job_count": 2, "cpu_limit": 1}},
}


def test_an_operation_of_one_tree_has_no_limitation() -> None:
    assert tree_limitation(["default"]) is None
    assert tree_limitation([]) is None
    found = tree_limitation(["a", "b", "c"])
    assert found is not None
    assert (found["forecast_pool_tree"], found["pool_trees_not_forecast"]) == ("a", ["b", "c"])


def test_an_operation_in_two_trees_shows_what_the_forecast_leaves_out(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, nodes=1, forecast_settings=SETTINGS)
    try:
        client = cluster.client()
        # a second tree no node matches (a node in both trees is refused): the operation waits there
        client.create(
            "scheduler_pool_tree", attributes={"name": "other", "config": {"nodes_filter": "other"}}
        )
        operation = client.run_operation(
            ytw.VanillaSpecBuilder()
            .begin_task("main")
            .command("sleep 3600")
            .job_count(2)
            .cpu_limit(1)
            .end_task()
            .pool_trees(["default", "other"]),
            sync=False,
        )

        def ready() -> dict[str, Any] | None:
            found = client.get_operation(operation.id, attributes=["scheduling_forecast"])[
                "scheduling_forecast"
            ]
            return found if found["state"] == "ready" else None

        forecast = wait_for(ready, 120, 0.5)
        limitation = forecast["limitation"]
        assert limitation["reason"] == "multiple_pool_trees"
        assert limitation["forecast_pool_tree"] == "default"
        assert limitation["pool_trees_not_forecast"] == ["other"]
        assert "other are not forecast" in limitation["message"]
        # the dry run of the same spec says it too
        headers = {
            **auth_headers(cluster.token),
            "X-YT-Output-Format": '"json"',
            "X-YT-Header-Format": '"json"',
            "X-YT-Parameters": json.dumps({"operation_type": "vanilla", "spec": SPEC, "dry_run": True}),
        }
        answer = httpx.post(f"{cluster.url}/api/v4/start_operation", headers=headers, timeout=120)
        assert answer.status_code == 200, answer.text
        assert answer.json()["scheduling_forecast"]["limitation"]["pool_trees_not_forecast"] == ["other"]
        # the operation page
        page = httpx.get(
            f"{cluster.url}/operation/{operation.id}", headers=auth_headers(cluster.token), timeout=30
        )
        assert 'id="forecast-limitation" data-reason="multiple_pool_trees"' in page.text
    finally:
        cluster.close()


def test_the_cli_prints_the_limitation() -> None:
    console = Console(record=True, width=200)
    render({"state": "computing", "limitation": tree_limitation(["default", "other"])}, console)
    assert "not forecast: The operation runs in pool trees default, other" in console.export_text()
