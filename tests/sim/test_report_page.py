"""The simulator's report.html: interactive Plotly charts with starvation shaded and preemptions marked, no empty
charts, one row per operation, numbers rounded for people; opened in a real browser (Debian's Chromium) when it is
installed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.sim.simkit import job, project_document, run


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("report")
    summary = run(project_document(until="12m"), out, plots=True)
    return summary, out


def test_report_has_interactive_charts_with_starvation_and_preemptions(report: tuple[dict, Path]) -> None:
    summary, out = report
    page = (out / "report.html").read_text()
    assert (
        '<script src="plotly.min.js"></script>' in page and (out / "plotly.min.js").stat().st_size > 1_000_000
    )
    assert "cdn" not in page.lower()
    assert page.count('class="plotly-graph-div"') >= 4
    assert summary["global"]["preempted_allocation_count"] > 0
    assert '"name":"preemption"' in page.replace(" ", "")
    assert "preempted for" in page  # the hover text names the preemptor
    assert '"fillcolor":"rgba(214,39,40,0.15)"' in page.replace(" ", "")  # a starving period is shaded
    rows = re.findall(r"<tr><td>([^<]+)</td>", page.split('id="operations"')[1])
    assert sorted(rows) == sorted(op["id"] for op in summary["operations"])
    for name in ("fair_share_vs_usage.png", "pending_time.png", "preemptions.png"):
        assert name in page


def test_numbers_are_rounded_and_empty_charts_say_so(report: tuple[dict, Path]) -> None:
    _, out = report
    page = (out / "report.html").read_text()
    tables = page.split('id="pools"')[1]
    assert not re.search(r">\d+\.\d{3,}", tables), "a table shows a number with more than 2 decimals"
    assert 'id="nothing-pending"' in page and "pending-chart" not in page


def test_a_run_without_preemptions_says_so(tmp_path: Path) -> None:
    document = project_document(until="3m")
    document["operations"] = [
        {"id": "small", "submit_time": 0, "spec": {"pool": "project-adhoc"},
         "tasks": [{"job_count": 5, "resources": job(), "duration": "1m"}]},
    ]  # fmt: skip
    run(document, tmp_path, plots=True)
    page = (tmp_path / "report.html").read_text()
    assert 'id="no-preemptions"' in page and "preemption-reasons" not in page


@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="Chromium is not installed (.ci/run installs it)"
)
def test_report_renders_in_a_browser(report: tuple[dict, Path]) -> None:
    from playwright.sync_api import sync_playwright

    _, out = report
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto((out / "report.html").as_uri())
            page.wait_for_selector("#pool-chart-0 .main-svg", timeout=15_000)
            assert page.locator(".js-plotly-plot").count() >= 4
            page.screenshot(path=str(out / "report.png"), full_page=True)
        finally:
            browser.close()
