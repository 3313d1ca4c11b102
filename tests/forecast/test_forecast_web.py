"""The forecast on the web pages, in a real browser (Debian's Chromium driven by Playwright): the operation page
and the Scheduling page show a queued operation's start and finish ranges, drawn by Plotly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yt.wrapper as ytw

from pooltree.forecast import ForecastSettings
from pooltree.forecast.worker import WorkerSettings
from tests.polling import wait_for
from tests.server.live_cluster import Cluster

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (.ci/run installs Debian's chromium with apt)"
)
SETTINGS = WorkerSettings(forecast=ForecastSettings(seeds=4, horizon=1800.0), refresh_periods=1)


def test_the_forecast_is_drawn_on_the_operation_and_scheduling_pages(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    cluster = Cluster(tmp_path, nodes=1, slots=2, forecast_settings=SETTINGS)
    try:
        client = cluster.client()
        client.create(
            "scheduler_pool",
            attributes={"name": "queue", "pool_tree": "default", "max_running_operation_count": 1},
        )

        def start(command: str, jobs: int) -> str:
            builder = (
                ytw.VanillaSpecBuilder()
                .begin_task("main")
                .command(command)
                .job_count(jobs)
                .cpu_limit(1)
                .end_task()
            )
            return client.run_operation(builder.pool("queue"), sync=False).id

        running = start("sleep 3", 30)  # ~45 s on the 2 slots: queued waits behind it (max 1 running)
        wait_for(lambda: client.get_operation(running)["brief_progress"]["jobs"].get("completed", 0) >= 2, 60)
        queued = start("sleep 2", 2)
        wait_for(
            lambda: (
                client.get_operation(queued, attributes=["scheduling_forecast"])["scheduling_forecast"][
                    "state"
                ]
                == "ready"
            ),
            60,
            0.2,
        )
        screens = tmp_path / "screens"
        screens.mkdir()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            context = browser.new_context(
                viewport={"width": 1400, "height": 1000},
                extra_http_headers={"Authorization": f"OAuth {cluster.token}"},
            )
            page = context.new_page()
            page.goto(f"{cluster.url}/?page=scheduling&tree=default")
            page.wait_for_selector(f"#forecast-rows tr[data-id='{queued}']", timeout=30_000)
            page.wait_for_selector("#forecast-chart .main-svg", timeout=30_000)
            assert page.locator("#forecast-chart .bars path").count() >= 1
            page.screenshot(path=str(screens / "scheduling-forecast.png"), full_page=True)

            page.goto(f"{cluster.url}/operation/{queued}")
            page.wait_for_selector("#operation-forecast[data-state=ready]", timeout=30_000)
            page.wait_for_selector("#forecast-chart .main-svg", timeout=30_000)
            assert "start" in page.inner_text("#forecast-start")
            assert page.locator("#forecast-chart .bars path").count() >= 1
            page.screenshot(path=str(screens / "operation-forecast.png"), full_page=True)
            browser.close()
    finally:
        cluster.close()
