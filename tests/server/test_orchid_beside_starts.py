"""Cypress reads take no lock (``Cypress``'s docstring): an orchid ``get`` through the API, and
``//sys/scheduler/@alerts``, are answered over real HTTP while a start holds Cypress's lock (the scheduler's
``config_lock``) waiting for the scheduling lock. Before, ``Cypress.get`` and the read's security checks took that
lock, so such a read waited behind the start for as long as the scheduling lock was held."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from busy_lock import held_elsewhere
from published_cluster import SPEC, published_service, root_and_alice, serving

from pooltree.server.service import SchedulerService

ROOT_TOKEN = "root-token-for-orchid-starts-0123456789"
ANSWER_WITHIN = 10.0
"""Seconds a read may take while the start waits (the lock's holder keeps it for ``busy_lock.WAIT``, 30 s)."""
ORCHID = "//sys/scheduler/orchid/scheduler"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[SchedulerService, str, dict[str, str]]]:
    """A service with authentication on 127.0.0.1 (no loops: the test publishes), one node and one running
    operation published, users root and alice with their tokens."""
    service = published_service(tmp_path, [1000.0], token=ROOT_TOKEN)
    tokens = root_and_alice(service, ROOT_TOKEN)
    with serving(service) as url:
        yield service, url, tokens


def _held_by_another_thread(lock: Any) -> bool:
    if lock.acquire(blocking=False):
        lock.release()
        return False
    return True


def _get(http: httpx.Client, token: str, path: str) -> Any:
    answer = http.get(
        "/api/v4/get",
        params={"path": path},
        headers={"Accept": "application/json", "Authorization": f"OAuth {token}"},
    )
    assert answer.status_code == 200, answer.text
    return json.loads(answer.content)["value"]


def test_orchid_reads_are_answered_while_a_start_waits_for_the_scheduling_lock(
    served: tuple[SchedulerService, str, dict[str, str]],
) -> None:
    service, url, tokens = served
    op_id = next(iter(service.scheduler.operations))
    started: list[httpx.Response] = []

    def start() -> None:
        with httpx.Client(base_url=url, timeout=60.0) as http:
            started.append(
                http.post(
                    "/api/v4/start_operation",
                    json={"operation_type": "vanilla", "spec": SPEC},
                    headers={"Authorization": f"OAuth {ROOT_TOKEN}"},
                )
            )

    with held_elsewhere(service.scheduler.lock):
        starter = threading.Thread(target=start, daemon=True)
        starter.start()
        deadline = time.monotonic() + ANSWER_WITHIN
        # the start holds Cypress's lock (its config lock) and waits for the scheduling lock
        while not (service.scheduler.lock._blocked and _held_by_another_thread(service.cypress.lock)):
            assert time.monotonic() < deadline, "the start never reached the scheduling lock"
            time.sleep(0.01)
        with httpx.Client(base_url=url, timeout=ANSWER_WITHIN) as http:
            for user in ("root", "alice"):  # a superuser and a user whose read checks the ACL chain
                token = tokens[user]
                assert set(_get(http, token, f"{ORCHID}/pool_trees/default/operations")) == {op_id}
                assert _get(http, token, f"{ORCHID}/default_pool_tree") == "default"
                assert _get(http, token, "//sys/scheduler/@alerts") == []
                assert _get(http, token, f"{ORCHID}/alerts") == []
        assert not started  # the start still waits: the reads did not wait for it
    starter.join(ANSWER_WITHIN)
    assert started and started[0].status_code == 200, started
