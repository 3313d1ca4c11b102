"""The store under faults, with real ``pooltree scheduler`` / ``pooltree node`` processes (issue 13):
acknowledged means stored and refused means never runs.

- SQLite file deleted, or overwritten with garbage, while the scheduler runs: the next start is refused (503, the
  reason named), never a 200 into a file nobody reads again; ``/internal/store_health`` says so.
- A restart on a corrupted file, or with an unusable ``--data``, prints one line and no traceback.
- A second scheduler on the same data dir is refused with one line naming the first one's pid.
- Removing a pool tree with an operation in it is refused; the store and the running scheduler keep the tree.
- A retried start with a mutation id answers the first operation's id, also after a SIGKILL and restart.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
import live_procs
from live_procs import PYTHON, Procs, client, free_port, state, vanilla
from polling import wait_for

HEADERS = {"Authorization": f"OAuth {live_procs.ROOT_TOKEN}"}


def auth_args(procs: Procs) -> list[str]:
    """The secrets ``Procs.scheduler`` gives its schedulers, for schedulers started another way."""
    return [
        "--token-file", str(procs.token_file), "--node-secret-file", str(procs.node_secret_file),
        "--store-key-file", str(procs.store_key_file),
    ]  # fmt: skip


SPEC = {"tasks": {"main": {"command": "true", "job_count": 1}}}


def start(url: str, spec: dict[str, Any] | None = None, **params: Any) -> httpx.Response:
    """A raw ``start_operation`` (no client retries: each call is one attempt)."""
    body = {"operation_type": "vanilla", "spec": spec or SPEC, **params}
    return httpx.post(f"{url}/api/v4/start_operation", json=body, headers=HEADERS, timeout=30)


def operation_ids(url: str) -> list[str]:
    response = httpx.post(f"{url}/api/v4/list_operations", json={"limit": 1000}, headers=HEADERS, timeout=30)
    assert response.status_code == 200, response.text
    return sorted(op["id"] for op in response.json()["operations"])


def health(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/internal/store_health", headers=HEADERS, timeout=10).json()


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "pooltree.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def one_line_failure(result: subprocess.CompletedProcess[str]) -> str:
    """The process failed with exactly one error line and no traceback; returns that line."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip() and " INFO " not in line]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_deleted_sqlite_file_stops_acknowledgements(tmp_path: Path) -> None:
    procs = Procs(tmp_path)
    try:
        data = tmp_path / "data"
        _, url = procs.scheduler(data)
        first = start(url)
        assert first.status_code == 200, first.text
        for path in data.glob("scheduler.db*"):
            path.unlink()
        refused = start(url)
        assert refused.status_code == 503, refused.text
        assert "deleted" in refused.json()["message"]
        assert start(url).status_code == 503  # and it stays refused
        report = health(url)
        assert report["ok"] is False and "deleted" in report["store"]["error"]

        def store_alerts() -> list[str]:
            alerts = httpx.post(
                f"{url}/api/v4/get",
                json={"path": "//sys/scheduler/orchid/scheduler/alerts"},
                headers=HEADERS,
                timeout=30,
            ).json()["value"]
            return [a["attributes"]["alert_type"] for a in alerts if "deleted" in a["message"]]

        # the orchid reads the read snapshot, published within a fair-share period of the alert (docs/live-cluster.md)
        assert wait_for(store_alerts, timeout=30) == ["store_trouble"]
    finally:
        procs.close()


def test_corrupted_sqlite_file_stops_acknowledgements_and_restart_says_one_line(tmp_path: Path) -> None:
    procs = Procs(tmp_path)
    try:
        data = tmp_path / "data"
        scheduler, url = procs.scheduler(data)
        assert start(url).status_code == 200
        database = data / "scheduler.db"
        size = database.stat().st_size
        with database.open("r+b") as handle:  # same inode, garbage content
            handle.write(os.urandom(size))
        refused = start(url)
        assert refused.status_code == 503, refused.text
        assert "corrupted" in refused.json()["message"]
        procs.stop(scheduler, signal.SIGKILL)
        for wal in data.glob("scheduler.db-*"):
            wal.unlink()
        line = one_line_failure(
            run_cli("scheduler", "--data", str(data), "--port", str(free_port()), *auth_args(procs))
        )
        assert "scheduler.db" in line and "not a SQLite database" in line
    finally:
        procs.close()


def test_unusable_data_dir_says_one_line(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    line = one_line_failure(run_cli("scheduler", "--data", str(not_a_dir), "--port", str(free_port())))
    assert str(not_a_dir) in line and "not a usable directory" in line


def test_second_scheduler_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    procs = Procs(tmp_path)
    try:
        data = tmp_path / "data"
        first, url = procs.scheduler(data)
        line = one_line_failure(
            run_cli("scheduler", "--data", str(data), "--port", str(free_port()), *auth_args(procs))
        )
        assert f"pid {first.pid}" in line and "already runs" in line
        assert start(url).status_code == 200  # the first one is untouched
    finally:
        procs.close()


def test_removing_a_tree_aborts_its_operations_and_a_restart_agrees(tmp_path: Path) -> None:
    """As on YTsaurus, a pool tree with operations can be removed: an operation only in that tree is aborted
    ("No suitable fair-share trees to schedule operation"), one also in another tree leaves it and keeps running;
    the store agrees, so a restart shows the same."""
    procs = Procs(tmp_path)
    try:
        data = tmp_path / "data"
        trees = tmp_path / "trees.json"
        trees.write_text(
            json.dumps(
                {
                    "pool_trees": {
                        "default": {"config": {"node_tag_filter": "!b"}, "pools": {}},
                        "other": {"config": {"node_tag_filter": "b"}, "pools": {}},
                    },
                    "default_pool_tree": "default",
                }
            )
        )
        scheduler, url = procs.scheduler(data, free_port(), "--config", str(trees))
        yt = client(url)
        only_other = yt.run_operation(vanilla("sleep 60", 1, pool_trees=["other"]), sync=False).id
        both = yt.run_operation(vanilla("sleep 60", 1, pool_trees=["default", "other"]), sync=False).id
        wait_for(lambda: state(yt, only_other) in ("running", "pending"), timeout=10)
        yt.remove("//sys/pool_trees/other", recursive=True)
        assert not yt.exists("//sys/pool_trees/other")
        wait_for(lambda: state(yt, only_other) == "aborted", timeout=10)
        error = yt.get_operation(only_other, attributes=["result"])["result"]["error"]
        assert error["message"] == "No suitable fair-share trees to schedule operation"
        assert state(yt, both) in ("running", "pending")
        options = yt.get_operation(both, attributes=["runtime_parameters"])["runtime_parameters"]
        assert list(options["scheduling_options_per_pool_tree"]) == ["default"]
        port = int(url.rsplit(":", 1)[1])
        procs.stop(scheduler, signal.SIGKILL)
        _, url = procs.scheduler(data, port)
        assert "other" not in yt.list("//sys/pool_trees")
        assert state(yt, only_other) == "aborted"
        assert state(yt, both) in ("running", "pending")  # revived in the tree it kept
        yt.abort_operation(both)
    finally:
        procs.close()


def test_retried_start_with_a_mutation_id_is_one_operation_across_a_restart(tmp_path: Path) -> None:
    procs = Procs(tmp_path)
    try:
        data = tmp_path / "data"
        scheduler, url = procs.scheduler(data, free_port())
        mutation = str(uuid.uuid4())
        first = start(url, mutation_id=mutation)
        assert first.status_code == 200, first.text
        op_id = first.json()["operation_id"]
        not_marked = start(url, mutation_id=mutation)
        assert not_marked.status_code == 400 and "retry" in not_marked.json()["message"]
        assert start(url, mutation_id=mutation, retry=True).json() == {"operation_id": op_id}
        port = int(url.rsplit(":", 1)[1])
        procs.stop(scheduler, signal.SIGKILL)
        _, url = procs.scheduler(data, port)
        assert start(url, mutation_id=mutation, retry=True).json() == {"operation_id": op_id}
        headers = {**HEADERS, "X-YT-Mutation-Id": mutation, "X-YT-Retry": "true"}
        by_header = httpx.post(
            f"{url}/api/v4/start_operation",
            json={"operation_type": "vanilla", "spec": SPEC},
            headers=headers,
            timeout=30,
        )
        assert by_header.json() == {"operation_id": op_id}
        assert operation_ids(url) == [op_id]
        wait_for(lambda: json.dumps(health(url)).count('"ok": true') == 2, timeout=10)
    finally:
        procs.close()
