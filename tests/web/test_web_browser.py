"""The web UI in a real browser (Debian's Chromium driven by Playwright) against a real ``pooltree local``.

One cluster and one browser for the module. The pages' numbers are checked against the orchid; the operation
page is reached through the link the ``yt`` client prints; pools collapse and expand; the page refreshes itself
(htmx) without a reload; an operation no node can fit shows its alert and then fails with the reason.
Screenshots go to the module's tmp directory (``screens/``).
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "live"))
from live_procs import ORCHID, Procs, client, yt_cli
from polling import wait_for

from pooltree.web.app import percent

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (.ci/run installs Debian's chromium with apt)"
)
LINK = re.compile(r"Operation started: (http://\S+)")


QUIET_LOOP = {"POOLTREE_HEARTBEAT_QUEUED_LIMIT": "60"}
"""The browser, the cluster and the ``yt`` client share the machine's two cores: under CI's load a node heartbeat
can wait past the default 0.25 s in the scheduler's event loop, be throttled by its queue wait and raise the
``heartbeats_throttled`` alert, which the scheduling page's check for no alerts would then see (CI, stop 44).
Throttling is tested in ``tests/server/test_live_throttle.py``; here its queued limit is out of the way."""


class Cluster:
    """``pooltree local`` with 2 nodes; the token (when the scheduler requires one) read from DATA/token."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs = Procs(root)
        self.data = root / "data"
        self.process = self.procs.spawn(
            "local",
            "--nodes",
            "2",
            "--data",
            str(self.data),
            "--node-resources",
            "user_slots=2,cpu=2,memory=4Gi",
            env=QUIET_LOOP,
        )
        line = self.procs.read_until(self.process, "scheduler at ")
        self.url = line.split("scheduler at ", 1)[1].split()[0]
        token_file = self.data / "token"
        self.token = token_file.read_text().strip() if token_file.exists() else None
        self.yt = client(self.url, self.token)

    def cli(self, *args: str) -> Any:
        return yt_cli(self.url, self.root, *args, token=self.token)

    def start(self, tasks: str, spec: str) -> tuple[str, str]:
        """``yt vanilla --async``: the operation id and the link the client printed."""
        result = self.cli("vanilla", "--tasks", tasks, "--spec", spec, "--async")
        match = LINK.search(result.stderr + result.stdout)
        assert match, result.stderr
        operation_id = result.stdout.strip().splitlines()[-1]
        return operation_id, match.group(1)

    def orchid(self, path: str = "") -> Any:
        return self.yt.get(ORCHID + path)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("web"))
    try:
        wait_for(lambda: len(cluster.yt.get("//sys/scheduler/orchid/scheduler/nodes")) == 2, timeout=30)
        cluster.cli("create", "scheduler_pool", "--attributes", "{name=research;pool_tree=default;weight=3}")
        cluster.cli(
            "create",
            "scheduler_pool",
            "--attributes",
            "{name=adhoc;pool_tree=default;max_running_operation_count=1}",
        )
        yield cluster
    finally:
        cluster.procs.close()


@pytest.fixture(scope="module")
def operations(cluster: Cluster) -> dict[str, tuple[str, str]]:
    """Started once: two running, one held by adhoc's running-operation limit, one no node can fit."""
    started = {
        "research": cluster.start('{main={command="sleep 60";job_count=2}}', "{pool=research}"),
        "adhoc": cluster.start('{main={command="sleep 60";job_count=1}}', "{pool=adhoc}"),
        "queued": cluster.start('{main={command="sleep 60";job_count=1}}', "{pool=adhoc}"),
        "huge": cluster.start('{main={command="sleep 1";job_count=1;cpu_limit=64}}', "{pool=research}"),
    }
    wait_for(lambda: len(cluster.orchid("/default/operations")) >= 3, timeout=20)
    return started


@pytest.fixture(scope="module")
def page(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1500, "height": 1000})
        if cluster.token:
            context.set_extra_http_headers({"Authorization": f"OAuth {cluster.token}"})
        tab = context.new_page()
        tab.screens = tmp_path_factory.mktemp("screens")  # type: ignore[attr-defined]
        try:
            yield tab
        finally:
            browser.close()


def shot(page: Any, name: str) -> Path:
    path = page.screens / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def cell(page: Any, row: str, column: str) -> str:
    return page.locator(f'tr[id="{row}"] td.{column}').first.inner_text().strip()


def test_scheduling_page_matches_the_orchid(cluster: Cluster, operations: dict, page: Any) -> None:
    research_op = operations["research"][0]
    wait_for(lambda: cluster.orchid(f"/default/operations/{research_op}/usage_ratio") > 0, timeout=30)

    def page_matches_orchid() -> bool:
        page.goto(cluster.url + "/")
        page.wait_for_selector('tr[id="pool-research"]')
        before = cluster.orchid("/default/pools")
        shown = {
            name: (cell(page, f"pool-{name}", "fair-share"), cell(page, f"pool-{name}", "usage"))
            for name in ("research", "adhoc")
        }
        after = cluster.orchid("/default/pools")
        return all(
            shown[name]
            in {
                (percent(v[name]["fair_share_ratio"]), percent(v[name]["usage_ratio"]))
                for v in (before, after)
            }
            for name in shown
        )

    wait_for(page_matches_orchid, timeout=20, period=0.5)
    pools = cluster.orchid("/default/pools")
    assert cell(page, "pool-research", "weight") == "3"
    assert cell(page, "pool-adhoc", "running-ops") == f"1/{pools['adhoc']['max_running_operation_count']}"
    assert cell(page, "pool-adhoc", "pending-ops") == "1"
    assert page.locator(f'tr[id="operation-{research_op}"]').is_visible()
    assert cluster.yt.get("//sys/scheduler/@alerts") == []
    assert page.locator("#no-alerts").is_visible()
    shot(page, "scheduling")
    # pools collapse and expand, and stay so across the htmx refresh. The button is clicked from a script: a
    # mouse click can land on the old row while the refresh swaps the body (Playwright resolves, then clicks).
    toggle = "document.querySelector('tr[id=\"pool-research\"] button.toggle').click()"
    row = page.locator(f'tr[id="operation-{research_op}"]')
    page.evaluate(toggle)
    assert row.is_hidden()
    swapped = page.evaluate("document.querySelector('#page-body').dataset.swapped || ''")
    page.wait_for_function(
        f"(document.querySelector('#page-body').dataset.swapped || '') !== '{swapped}'", timeout=10_000
    )
    assert row.is_hidden()
    page.evaluate(toggle)
    assert row.is_visible()


def test_operation_link_from_the_client_explains_pending(
    cluster: Cluster, operations: dict, page: Any
) -> None:
    operation_id, link = operations["queued"]
    assert link.startswith(cluster.url + "/?page=operation&mode=detail&id=" + operation_id)
    page.goto(link)
    assert page.locator("#operation-id").inner_text() == operation_id
    assert page.locator("#operation-state").inner_text() == "pending"
    reason = page.locator("#pending-reason")
    assert reason.get_attribute("data-reason") == "max_running_operation_count"
    assert 'pool "adhoc"' in reason.inner_text() and "position 1 of 1" in reason.inner_text()
    assert page.locator('#operation-alerts [data-alert-type="operation_pending"]').count() == 1
    assert '"pool": "adhoc"' in page.locator("#spec").inner_text()
    # the client sees the same explanation
    progress = cluster.yt.get_operation(operation_id, attributes=["progress"])["progress"]
    explained = progress["scheduling_info_per_pool_tree"]["default"]["pending_allocations_reason"]
    assert (explained["reason"], explained["pool"], explained["queue_position"]) == (
        "max_running_operation_count",
        "adhoc",
        1,
    )
    shot(page, "operation-pending")


def test_page_refreshes_without_reload(cluster: Cluster, operations: dict, page: Any) -> None:
    operation_id, link = cluster.start(
        '{main={command="sleep 2; echo done >&2";job_count=1}}', "{pool=research}"
    )
    page.goto(link)
    page.evaluate("window.__not_reloaded = true")
    page.wait_for_function(
        "document.querySelector('#operation-state').innerText === 'completed'", timeout=40_000
    )
    assert page.evaluate("window.__not_reloaded") is True
    assert cluster.yt.get_operation(operation_id, attributes=["state"])["state"] == "completed"
    stderr_link = page.locator("#jobs a", has_text="stderr")
    assert stderr_link.count() == 1
    page.goto(cluster.url + stderr_link.get_attribute("href"))
    assert "done" in page.inner_text("body")


def test_operations_nodes_and_history_pages(cluster: Cluster, operations: dict, page: Any) -> None:
    page.goto(cluster.url + "/operations?state=running")
    states = page.locator("#operations-table tr[data-state]")
    assert states.count() >= 2
    assert set(states.evaluate_all("rows => rows.map(r => r.dataset.state)")) == {"running"}
    page.goto(cluster.url + "/operations?pool=adhoc")
    ids = page.locator("#operations-table tr[data-state]").evaluate_all("rows => rows.map(r => r.id)")
    assert sorted(ids) == sorted(f"op-{operations[k][0]}" for k in ("adhoc", "queued"))
    shot(page, "operations")
    page.goto(cluster.url + "/nodes")
    nodes = cluster.yt.get("//sys/scheduler/orchid/scheduler/nodes")
    for address, node in nodes.items():
        assert cell(page, f"node-{address}", "res-cpu").endswith(f"/ {node['resource_limits']['cpu']:g}")
        assert "default" in cell(page, f"node-{address}", "trees")
    shot(page, "nodes")
    page.goto(cluster.url + "/history?tree=default&pool=research")
    page.wait_for_selector("#history-chart .main-svg", timeout=15_000)
    assert int(page.locator("#sample-count").inner_text()) >= 1
    shot(page, "history")


def test_impossible_operation_fails_with_the_reason(cluster: Cluster, operations: dict, page: Any) -> None:
    operation_id, link = operations["huge"]

    def failed() -> bool:
        return cluster.yt.get_operation(operation_id, attributes=["state"])["state"] == "failed"

    wait_for(failed, timeout=40, period=0.5)
    result = cluster.yt.get_operation(operation_id, attributes=["result"])["result"]["error"]
    assert result["code"] == 4410 and result["message"] == "No online node can satisfy the resource demand"
    page.goto(link)
    assert page.locator("#operation-state").inner_text() == "failed"
    error = page.locator("#operation-error").inner_text()
    assert "No online node can satisfy the resource demand" in error and "4410" in error
    shot(page, "operation-failed")


def test_login_form_in_the_browser(cluster: Cluster, operations: dict, page: Any) -> None:
    """Without the token the operation link shows the login form; a wrong token is refused; the cluster's token
    logs in (cookie) and the browser lands on the page it asked for."""
    assert cluster.token, "pooltree local runs with authentication on and writes DATA/token"
    operation_id, link = operations["queued"]
    context = page.context.browser.new_context()
    tab = context.new_page()
    try:
        response = tab.goto(link)
        assert response is not None and response.status == 401
        tab.fill("#token", "not-the-token")
        tab.click("#login-button")
        assert tab.locator("#login-error").is_visible()
        tab.fill("#token", cluster.token)
        tab.click("#login-button")
        tab.wait_for_selector("#operation-id")
        assert tab.locator("#operation-id").inner_text() == operation_id
        assert tab.url == link
        assert any(c["name"] == "pooltree_token" and c["httpOnly"] for c in context.cookies())
        tab.screenshot(path=str(page.screens / "after-login.png"))
    finally:
        context.close()
