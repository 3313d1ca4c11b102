"""The orchid and the web pages answer from the published snapshot what they answered when they read the scheduler
under its lock: byte for byte, at the same state (the last fair-share update published, nothing changed since).

``golden/read_answers.json`` was written by main before the snapshot (667839e), running this file with
``POOLTREE_WRITE_READ_GOLDEN=1``; a change that alters what is shown on purpose writes it again the same way (and
says so). Ids come from a seeded generator and the clock is the test's, so two runs make the same state."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import model
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

GOLDEN = Path(__file__).parent / "golden" / "read_answers.json"
ORCHID_PATHS = [
    [],
    ["scheduler", "pool_trees", "default"],
    ["scheduler", "pool_trees", "default", "operations"],
    ["scheduler", "scheduling_info_per_pool_tree", "default", "fair_share_info", "pools"],
    ["scheduler", "nodes"],
    ["scheduler", "cluster"],
    ["scheduler", "alerts"],
    ["scheduler", "event_log"],
]


class _SeededSecrets:
    """``secrets`` as ``model.new_guid`` reads it, from a seeded generator (the same ids in every run)."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)

    def token_bytes(self, count: int) -> bytes:
        return self.random.randbytes(count)


@pytest.fixture
def seeded_ids(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(model, "secrets", _SeededSecrets(25))
    monkeypatch.setattr(model, "_GUIDS", [])
    yield


def _heartbeat(service: SchedulerService, address: str, now: float, **extra: Any) -> dict[str, Any]:
    data = {
        "node_address": address,
        "resource_limits": {"user_slots": 4, "cpu": 4, "memory": 8 << 30},
        **extra,
    }
    return service.scheduler.process_heartbeat(parse_heartbeat(data), now)


def _state(tmp_path: Path, serve: Callable[[object], str]) -> tuple[SchedulerService, list[str], str]:
    """Two pools (one queue of one running operation), three nodes, four operations (one pending), jobs started,
    two fair-share updates; then the pages that show per-operation reads asked for once, and one more update.
    The service's app is served by uvicorn on loopback; its URL is returned beside it."""
    now = [1000.0]
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), authentication=False, clock=lambda: now[0]
    )
    cypress = service.cypress
    cypress.create("scheduler_pool_tree", "//sys/pool_trees/default")
    cypress.set("//sys/pool_trees/@default_tree", "default")
    cypress.create("scheduler_pool", "//sys/pool_trees/default/a", attributes={"weight": 2.0})
    cypress.create(
        "scheduler_pool", "//sys/pool_trees/default/q", attributes={"max_running_operation_count": 1}
    )
    scheduler = service.scheduler
    for i, tags in enumerate((["ssd"], [], ["gpu-less", "ssd"])):
        _heartbeat(service, f"n{i}", now[0], tags=tags)
    ids = []
    for pool, jobs in (("a", 10), ("a", 4), ("q", 3), ("q", 3)):
        spec = {"pool": pool, "tasks": {"main": {"command": "true", "job_count": jobs, "cpu_limit": 1}}}
        ids.append(scheduler.start_operation("vanilla", spec, "alice", now[0]).id)
    scheduler.update_fair_share("default", now[0] + 1)
    for i in range(3):
        _heartbeat(service, f"n{i}", now[0] + 1.5 + i / 10)
    scheduler.update_fair_share("default", now[0] + 2)
    now[0] += 5
    url = serve(service.app)
    # the Scheduling page asks for its operations' alerts and pending reasons
    assert httpx.get(url + "/", timeout=30).status_code == 200
    scheduler.update_fair_share("default", now[0])
    return service, ids, url


def _answers(service: SchedulerService, ids: list[str], url: str) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    for path in ORCHID_PATHS:
        answers["orchid:/" + "/".join(path)] = json.dumps(service.orchid.get(path))
    pages = ["/", "/?page=scheduling&tree=default", "/nodes", "/history", "/operations"]
    pages += [f"/?page=operation&mode=detail&id={op_id}" for op_id in ids]
    with httpx.Client(base_url=url, timeout=30) as client:
        for page in pages:
            for fragment in (False, True):
                response = client.get(page, headers={"HX-Request": "true"} if fragment else {})
                assert response.status_code == 200, page
                answers[f"page:{page}{' (fragment)' if fragment else ''}"] = response.text
    return answers


def test_answers_are_those_read_under_the_lock_before(
    tmp_path: Path, seeded_ids: None, serve: Callable[[object], str]
) -> None:
    service, ids, url = _state(tmp_path, serve)
    try:
        answers = _answers(service, ids, url)
    finally:
        service.store.close()
    if os.environ.get("POOLTREE_WRITE_READ_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    assert sorted(answers) == sorted(golden)
    for key, answer in answers.items():
        assert answer == golden[key], key
