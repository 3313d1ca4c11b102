"""The orchid and the web pages are read from the snapshot the live scheduler publishes with its trees
(``pooltree/server/live/snapshot.py``): served over real HTTP while the scheduling lock is held (a slow heartbeat,
an update), at any path and page, however long ago anything was read; a change shows after the next
publication (a fair-share update run to its end, a pool trees change), not before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from busy_lock import held_elsewhere
from published_cluster import SPEC, published_service, serving

from pooltree.server.service import SchedulerService

ANSWER_WITHIN = 10.0
"""Seconds a read may take while the lock is held (a read that waits for the lock takes the holder's 30): the
client's timeout, generous for a loaded CI machine."""
ORCHID = "//sys/scheduler/orchid/scheduler"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[SchedulerService, str, list[float]]]:
    """A service without authentication served by uvicorn on 127.0.0.1, on a clock the test moves (no loops: the
    test runs the fair-share updates), with tree ``default``, one node and one running operation published."""
    now = [1000.0]
    service = published_service(tmp_path, now, authentication=False)
    with serving(service) as url:
        yield service, url, now


def _orchid(http: httpx.Client, path: str) -> Any:
    answer = http.get(
        "/api/v4/get", params={"path": f"{ORCHID}{path}"}, headers={"Accept": "application/json"}
    )
    assert answer.status_code == 200, answer.text
    return json.loads(answer.content)["value"]


def test_orchid_and_pages_are_answered_while_the_lock_is_held(
    served: tuple[SchedulerService, str, list[float]],
) -> None:
    """Paths and pages never read before, long after the last read, are answered while another thread holds the
    scheduling lock. (Before, a read with no answer of its own kept from the last second waited for the lock.) The
    operation pages read the live operation's map from the snapshot too, captured since a page asked for it."""
    service, url, now = served
    op_id = next(iter(service.scheduler.operations))
    with httpx.Client(base_url=url, timeout=ANSWER_WITHIN) as http:
        assert http.get("/").status_code == 200  # a page asks for the operations' page reads...
    service.scheduler.update_fair_share("default", now[0] + 2)  # ...which the next publication captures
    now[0] += 60.0  # nothing read in the last minute
    orchid_paths = [
        "/pool_trees/default/operations",
        f"/pool_trees/default/operations/{op_id}/fair_share_ratio",
        "/scheduling_info_per_pool_tree/default/fair_share_info/pools",
        "/nodes",
        "/alerts",
        "/event_log",
        "",
    ]
    pages = [
        "/",
        "/?page=scheduling&tree=default",
        "/nodes",
        "/history",
        f"/operation/{op_id}",
        "/operations",
    ]
    with httpx.Client(base_url=url, timeout=ANSWER_WITHIN) as http, held_elsewhere(service.scheduler.lock):
        answers = {path: _orchid(http, path) for path in orchid_paths}
        for page in pages:
            for headers in ({}, {"HX-Request": "true"}):  # the page and its refreshing fragment
                assert http.get(page, headers=headers).status_code == 200, page
    assert set(answers["/pool_trees/default/operations"]) == {op_id}
    assert answers[f"/pool_trees/default/operations/{op_id}/fair_share_ratio"] == 1.0
    assert "<Root>" in answers["/scheduling_info_per_pool_tree/default/fair_share_info/pools"]
    assert set(answers["/nodes"]) == {"n1"}
    assert answers["/alerts"] == []
    assert {event["event"] for event in answers["/event_log"]} == {"allocation_started"}
    assert answers[""]["default_pool_tree"] == "default"


def test_a_change_shows_after_the_next_publication(served: tuple[SchedulerService, str, list[float]]) -> None:
    """A start between two updates shows in the orchid and on the Scheduling page once the next update is
    published; a pool trees change once it is applied (its own publication)."""
    service, url, now = served
    scheduler = service.scheduler
    with httpx.Client(base_url=url, timeout=ANSWER_WITHIN) as http:
        before = set(_orchid(http, "/pool_trees/default/operations"))
        published = scheduler.snapshots.current.number
        started = scheduler.start_operation("vanilla", SPEC, "root", now[0])
        assert set(_orchid(http, "/pool_trees/default/operations")) == before  # the last publication's
        assert started.id not in http.get("/").text
        assert scheduler.snapshots.changed_at is not None  # the change waits for a publication
        scheduler.update_fair_share("default", now[0] + 2)
        assert scheduler.snapshots.current.number > published
        assert set(_orchid(http, "/pool_trees/default/operations")) == before | {started.id}
        assert started.id in http.get("/").text
        assert scheduler.snapshots.changed_at is None
        service.cypress.set("//sys/pool_trees/default/@config/fair_share_starvation_timeout", 7000)
        assert _orchid(http, "/pool_trees/default/config/fair_share_starvation_timeout") == 7000


def test_an_update_left_in_parts_is_published_at_its_end(
    served: tuple[SchedulerService, str, list[float]],
) -> None:
    """A stale tree published by a heartbeat leaves its preemptible lists to configure in parts: the snapshot is
    published when they are configured, not before (its views count the lists)."""
    service, _, now = served
    scheduler = service.scheduler
    publisher = scheduler.snapshots
    scheduler.start_operation("vanilla", SPEC, "root", now[0])  # runnable: the tree is stale
    published = publisher.current.number
    with scheduler.lock:
        scheduler.updates.update_tree("default", now[0] + 3, in_parts=True)
        assert publisher.current.number == published and "default" in publisher.unfinished
        scheduler.updates.finish_in_parts(scheduler.cores["default"])
    assert publisher.current.number == published + 1 and not publisher.unfinished
