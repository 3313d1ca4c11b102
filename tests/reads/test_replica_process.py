"""The replica wired into ``pooltree scheduler --read-process`` (real processes): the read process answers pending
operations' ``get_operation`` from its replica (``pooltree_read_process_requests_total{answered_by="replica"}``), with
what the scheduler shows: a start through the read process is in the queue numbers of the next get (the feed's
stamp), a denial is the scheduler's 901, an unknown token is relayed (900), and the official client reads every
operation as it is."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
from yt.common import YtResponseError

sys.path.insert(0, str(Path(__file__).parent.parent / "live"))
from live_procs import ROOT_AUTH, Procs, client, vanilla
from polling import wait_for


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", headers=ROOT_AUTH, timeout=10).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def answered_by_replica(url: str) -> float:
    return metric(url, 'pooltree_read_process_requests_total{answered_by="replica"}')


def test_the_read_process_answers_pending_gets_from_its_replica(procs: Procs) -> None:
    process, url = procs.scheduler(procs.root / "data", 0, "--read-process")
    yt = client(url)
    yt.create(
        "scheduler_pool",
        attributes={"name": "queue", "pool_tree": "default", "max_running_operation_count": 0},
    )
    yt.create("user", attributes={"name": "alice"})
    alice = client(url, yt.issue_token("alice"))
    secret = {"acl": [{"action": "deny", "subjects": ["alice"], "permissions": ["read"]}]}
    ids = [yt.run_operation(vanilla("true", 1, pool="queue"), sync=False).id for _ in range(3)]
    hidden = yt.run_operation(vanilla("true", 1, pool="queue", **secret), sync=False).id

    def read_all() -> list[dict]:
        return [yt.get_operation(op_id) for op_id in ids]

    # read until the replica answers (the first read of each operation is relayed: its template is made then)
    wait_for(lambda: (read_all() and answered_by_replica(url) >= 6) or None, timeout=60, period=0.2)
    for position, op_id in enumerate(ids):
        got = yt.get_operation(op_id)
        info = got["progress"]["scheduling_info_per_pool_tree"]["default"]
        assert got["state"] == "pending" and info["pending_position"] == position
        assert f"position {position + 1} of 4 in its queue" in info["pending_reason"]
    yt.run_operation(vanilla("true", 1, pool="queue"), sync=False)  # through the read process: stamped
    for position, op_id in enumerate(ids):  # the start is in the very next get's queue numbers
        info = yt.get_operation(op_id)["progress"]["scheduling_info_per_pool_tree"]["default"]
        assert f"position {position + 1} of 5 in its queue" in info["pending_reason"]
    for _ in range(3):  # alice is denied as the scheduler denies her, by whichever process answers
        with pytest.raises(YtResponseError) as denied:
            alice.get_operation(hidden)
        assert denied.value.error["code"] == 901
        assert denied.value.error["attributes"]["user"] == "alice"
    assert alice.get_operation(ids[0])["id"] == ids[0]
    unknown = httpx.get(
        f"{url}/api/v4/get_operation",
        params={"operation_id": ids[0]},
        headers={"Authorization": "OAuth ytct-0000-" + "00" * 16},
        timeout=10,
    )
    assert unknown.status_code == 401
    wait_for(lambda: answered_by_replica(url) >= 12 or None, timeout=30, period=0.2)
    # what the feed cost the scheduler: the templates' maps it built and their CPU (``pooltree_read_feed_*``)
    assert metric(url, "pooltree_read_feed_templates_made_total") >= len(ids) + 1
    assert metric(url, "pooltree_read_feed_make_cpu_seconds_total") > 0
    assert metric(url, "pooltree_read_feed_ticks_total") > 0
    assert metric(url, "pooltree_read_feed_send_cpu_seconds_total") > 0
    assert process.poll() is None


def test_the_scheduler_runs_its_read_process_unless_told_not_to(
    procs: Procs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pooltree scheduler`` hands its port to a read process by default (session 37: the A/B in
    ``bench/RESULTS.md``, "The read process's cost to the scheduler, and the default"); ``--no-read-process``
    serves the port from the scheduler itself. Before, the default was the scheduler's own port."""
    monkeypatch.delenv("POOLTREE_READ_PROCESS", raising=False)
    _, url = procs.scheduler(procs.root / "default")
    assert metric(url, "pooltree_read_process_up") == 1.0
    _, url = procs.scheduler(procs.root / "off", 0, "--no-read-process")
    assert metric(url, "pooltree_read_process_up") == 0.0
