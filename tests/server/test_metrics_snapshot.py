"""``GET /metrics`` is answered from the read snapshot and counters (``server/metrics.py``), over real HTTP on
127.0.0.1 while another thread holds the scheduling lock (a slow heartbeat, an update): the published views' pool
and operation gauges, the snapshot's scheduler alerts, the operations' alerts read without the lock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from busy_lock import held_elsewhere
from published_cluster import published_service, serving

from pooltree.server.live.alerts import UNLOCKED_READS
from pooltree.server.service import SchedulerService

ANSWER_WITHIN = 10.0
"""Seconds a scrape may take while the lock is held (the holder keeps it for ``busy_lock.WAIT``, 30 s)."""
TOO_BIG = {"tasks": {"main": {"command": "true", "job_count": 1, "cpu_limit": 64}}}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[SchedulerService, str, list[float]]]:
    """A service without authentication on 127.0.0.1 on a clock the test moves (no loops: the test publishes),
    one node (4 cpu) and one running operation published."""
    now = [1000.0]
    service = published_service(tmp_path, now, authentication=False)
    with serving(service) as url:
        yield service, url, now


def test_metrics_are_scraped_while_the_lock_is_held(
    served: tuple[SchedulerService, str, list[float]],
) -> None:
    service, url, now = served
    scheduler = service.scheduler
    running = next(iter(scheduler.operations))
    unfit = scheduler.start_operation("vanilla", TOO_BIG, "root", now[0] + 1.5)  # no 4-cpu node fits it
    scheduler.update_fair_share("default", now[0] + 2)  # published with both operations
    with held_elsewhere(scheduler.lock):
        metrics = httpx.get(f"{url}/metrics", timeout=ANSWER_WITHIN).text
    assert 'pooltree_pool_fair_share_ratio{pool="<Root>",tree="default"}' in metrics
    assert 'pooltree_pool_running_operations{pool="<Root>",tree="default"} 2.0' in metrics
    assert f'pooltree_operation_fair_share_ratio{{operation="{running}",tree="default"}} 0.5' in metrics
    assert f'pooltree_operation_usage_ratio{{operation="{running}",tree="default"}} 1.0' in metrics
    assert f'pooltree_operation_demand_ratio{{operation="{unfit.id}",tree="default"}} 16.0' in metrics
    assert 'pooltree_alerts{scope="operation",type="no_online_node_to_schedule_job"} 1.0' in metrics
    assert 'pooltree_alerts{scope="scheduler",type="pool_tree_without_nodes"} 0.0' in metrics
    assert "pooltree_nodes 1.0" in metrics
    published = scheduler.snapshots.published
    assert published >= 1 and scheduler.snapshots.capture_seconds > 0
    assert f"pooltree_scheduler_read_snapshot_capture_cpu_seconds_count {float(published)}" in metrics
    assert "pooltree_scheduler_read_snapshot_capture_cpu_max_seconds " in metrics


def test_an_operation_changed_while_its_alerts_are_read_is_read_again(
    served: tuple[SchedulerService, str, list[float]],
) -> None:
    """``SchedulerAlerts.counts`` reads each operation's alerts without the lock; one that changed while read
    (a ``RuntimeError`` of a dict read mid-change) is read again, and after ``UNLOCKED_READS`` failures under the
    lock."""
    service, _, now = served
    scheduler = service.scheduler
    center = scheduler.alert_center
    unfit = scheduler.start_operation("vanilla", TOO_BIG, "root", now[0] + 1.5)
    real = center.operation_alerts
    calls: list[bool] = []  # the unfit operation's reads: whether under the lock

    for fails, locked in ((2, False), (UNLOCKED_READS, True)):

        def changing(op: Any, at: float, fails: int = fails) -> dict[str, Any]:
            if op is unfit:
                calls.append(scheduler.lock.held)
                if len(calls) <= fails:
                    raise RuntimeError("dictionary changed size during iteration")
            return real(op, at)

        calls.clear()
        center.operation_alerts = changing  # type: ignore[method-assign]
        counts = center.counts(now[0] + 2, [])
        assert counts[("operation", "no_online_node_to_schedule_job")] == 1
        assert len(calls) == fails + 1 and calls[-1] is locked and not any(calls[:-1])
