"""The forecast on the web pages, in a real browser (Debian's Chromium driven by Playwright): the operation page
and the Scheduling page show a queued operation's start and finish ranges, drawn by Plotly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from pooltree.forecast import ForecastSettings
from pooltree.forecast.worker import WorkerSettings
from tests.forecast.forecast_kit import queue_cluster, start_in_queue
from tests.polling import wait_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (.ci/run installs Debian's chromium with apt)"
)
SETTINGS = WorkerSettings(forecast=ForecastSettings(seeds=4, horizon=1800.0), niceness=0)
"""The default refresh period, ``niceness=0``: tests/forecast/test_forecast_live.py's SETTINGS say why."""


def test_the_forecast_is_drawn_on_the_operation_and_scheduling_pages(tmp_path: Path) -> None:
    cluster = queue_cluster(tmp_path, SETTINGS)
    try:
        client = cluster.client()

        # 180 s of work on the 2 slots (its jobs end with the cluster; a forecast's CPU grows with it): queued
        # waits behind it (max 1 running) until both pages have shown it waiting, on a loaded machine too
        running = start_in_queue(client, "sleep 3", 120)
        # a read starts the worker meanwhile
        client.get_operation(running, attributes=["scheduling_forecast"])
        wait_for(lambda: client.get_operation(running)["brief_progress"]["jobs"].get("completed", 0) >= 2, 60)
        queued = start_in_queue(client, "sleep 2", 2)
        wait_for(
            lambda: (
                client.get_operation(queued, attributes=["scheduling_forecast"])["scheduling_forecast"][
                    "state"
                ]
                == "ready"
            ),
            60,
            0.5,
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
