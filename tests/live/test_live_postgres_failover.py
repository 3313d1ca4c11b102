"""PostgreSQL faults with real processes (issue 13): refused means never runs, one leader and a standby.

- PostgreSQL stopped while operations are submitted: each start answers an error; when the database is back the
  scheduler revives from it and none of the refused operations ever runs (the old scheduler ran all of them).
- Two schedulers on one database: the second waits as a standby and answers "not the leader" naming the leader;
  when the leader is SIGKILLed it takes over within 10 s, the node follows (``--scheduler A,B``) and no operation
  or job is lost or duplicated.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import live_procs
from live_procs import READY_PREFIX, Procs, free_port
from pg_server import PgServer, PgUnavailable
from polling import wait_for

HEADERS = {"Authorization": f"OAuth {live_procs.ROOT_TOKEN}"}


def auth_args(procs: Procs) -> list[str]:
    """The secrets ``Procs.scheduler`` gives its schedulers, for schedulers started another way."""
    return [
        "--token-file", str(procs.token_file), "--node-secret-file", str(procs.node_secret_file),
        "--store-key-file", str(procs.store_key_file),
    ]  # fmt: skip


@pytest.fixture
def own_postgres() -> Iterator[PgServer]:
    """A PostgreSQL server of this test alone (it is stopped and started again)."""
    try:
        server = PgServer.create()
    except PgUnavailable as error:
        pytest.skip(str(error))
    try:
        yield server
    finally:
        server.destroy()


def spec(command: str, jobs: int) -> dict[str, Any]:
    return {"tasks": {"main": {"command": command, "job_count": jobs}}}


def call(url: str, command: str, **params: Any) -> httpx.Response:
    return httpx.post(f"{url}/api/v4/{command}", json=params, headers=HEADERS, timeout=30)


def start(url: str, command: str = "true", jobs: int = 1) -> httpx.Response:
    return call(url, "start_operation", operation_type="vanilla", spec=spec(command, jobs))


def try_start(url: str, command: str, jobs: int) -> httpx.Response | None:
    """The answer of a start when it is accepted (None for an error or no answer)."""
    try:
        response = start(url, command, jobs)
    except httpx.HTTPError:
        return None
    return response if response.status_code == 200 else None


def operations(url: str) -> dict[str, dict[str, Any]]:
    response = call(url, "list_operations", limit=1000)
    assert response.status_code == 200, response.text
    return {op["id"]: op for op in response.json()["operations"]}


def jobs(url: str, op_id: str) -> list[dict[str, Any]]:
    response = call(url, "list_jobs", operation_id=op_id, limit=1000)
    assert response.status_code == 200, response.text
    return response.json()["jobs"]


def op_state(url: str, op_id: str) -> str | None:
    try:
        response = call(url, "get_operation", operation_id=op_id, attributes=["state"])
    except httpx.HTTPError:
        return None
    return response.json().get("state") if response.status_code == 200 else None


def is_leader(url: str) -> bool:
    try:
        return (
            httpx.get(f"{url}/internal/store_health", headers=HEADERS, timeout=5).json()["role"] == "leader"
        )
    except (httpx.HTTPError, ValueError, KeyError):
        return False


def test_operations_refused_while_postgresql_is_down_never_run(
    tmp_path: Path, own_postgres: PgServer
) -> None:
    procs = Procs(tmp_path)
    try:
        _, url = procs.scheduler(tmp_path / "data", free_port(), "--store", own_postgres.url)
        procs.node(url, "n1")
        first = start(url)
        assert first.status_code == 200, first.text
        done = first.json()["operation_id"]
        wait_for(lambda: op_state(url, done) == "completed", timeout=30)

        own_postgres.stop()
        refused = [start(url) for _ in range(3)]
        assert all(r.status_code >= 400 for r in refused), [r.text for r in refused]
        own_postgres.start()

        later = wait_for(lambda: try_start(url, "true", 1), timeout=30, period=0.1).json()["operation_id"]
        wait_for(lambda: op_state(url, later) == "completed", timeout=30)
        time.sleep(0.5)  # not a wait for a condition: a window in which a ghost operation would show up
        assert sorted(operations(url)) == sorted([done, later])
        assert [r.status_code for r in refused] == [503, 503, 503]  # retriable: the client may send it again
        assert all("nothing is acknowledged" in r.json()["message"] for r in refused)
        assert is_leader(url)
    finally:
        procs.close()


def test_standby_takes_over_when_the_leader_is_killed(tmp_path: Path, fresh_postgres_url: str) -> None:
    procs = Procs(tmp_path)
    try:
        store = ["--store", fresh_postgres_url, "--heartbeat-period", "0.2"]
        leader, leader_url = procs.scheduler(tmp_path / "a", free_port(), *store)
        standby = procs.spawn(
            "scheduler",
            "--data",
            str(tmp_path / "b"),
            "--port",
            str(free_port()),
            "--create-default-tree",
            *store,
            *auth_args(procs),
        )
        procs.read_until(standby, "role: standby")  # printed before it listens
        standby_url = procs.read_until(standby, READY_PREFIX)[len(READY_PREFIX) :]
        procs.node(f"{leader_url},{standby_url}", "n1", "user_slots=4,cpu=4,memory=4Gi")

        refused = start(standby_url)
        assert refused.status_code == 503, refused.text
        assert f"pid {leader.pid}" in refused.json()["message"] and leader_url in refused.json()["message"]

        before = [start(leader_url, "sleep 2", 2).json()["operation_id"] for _ in range(2)]
        retried = call(
            leader_url, "start_operation", operation_type="vanilla", spec=spec("true", 1), mutation_id="m-1"
        ).json()["operation_id"]
        wait_for(lambda: all(op_state(leader_url, op) == "running" for op in before), timeout=30)
        wait_for(lambda: sum(len(jobs(leader_url, op)) for op in before) == 4, timeout=30)

        procs.stop(leader, signal.SIGKILL)
        killed = time.monotonic()
        answered = wait_for(lambda: try_start(standby_url, "true", 2), timeout=15, period=0.1)
        assert time.monotonic() - killed < 10.0
        after = answered.json()["operation_id"]
        again = call(
            standby_url,
            "start_operation",
            operation_type="vanilla",
            spec=spec("true", 1),
            mutation_id="m-1",
            retry=True,
        )
        assert again.json() == {"operation_id": retried}  # the mutation id survived the failover

        for op in [*before, retried, after]:
            wait_for(lambda op=op: op_state(standby_url, op) == "completed", timeout=30)
        listed = operations(standby_url)
        assert sorted(listed) == sorted([*before, retried, after])
        for op in before:
            job_list = jobs(standby_url, op)
            assert len(job_list) == 2, job_list  # re-attached after the failover, not started again
            assert {job["state"] for job in job_list} == {"completed"}
        assert [job["state"] for job in jobs(standby_url, after)] == ["completed", "completed"]
    finally:
        procs.close()
