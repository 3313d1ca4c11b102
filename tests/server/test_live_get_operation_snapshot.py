"""get_operation does not wait for the scheduling lock: while a slow heartbeat (or an update) holds it, a running
operation whose map is stale is answered from its map of a moment ago (at most ``STALE_READ_PERIOD`` old); an
older one is not served, the read waits for the lock and builds the map anew."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from busy_lock import WAIT, held_elsewhere

from pooltree.server.operations import STALE_READ_PERIOD
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

SPEC = {"tasks": {"main": {"command": "true", "job_count": 2, "cpu_limit": 1}}}


def _read_in_thread(service: SchedulerService, operation_id: str) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(
        target=lambda: out.append(service.commands.operation_attributes(operation_id)), daemon=True
    )
    thread.start()
    return thread, out


def test_get_operation_is_answered_while_a_slow_heartbeat_holds_the_lock(tmp_path: Path) -> None:
    now = [100.0]
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), create_default_tree=True, clock=lambda: now[0]
    )
    service.cypress.create("scheduler_pool_tree", "//sys/pool_trees/default")
    op = service.scheduler.start_operation("vanilla", SPEC, "root", now[0])
    first = service.commands.operation_attributes(op.id)
    assert first["state"] == "running"
    op.revision += 1  # what a heartbeat's change does: the kept map is stale now
    with held_elsewhere(service.scheduler.lock):  # a slow heartbeat
        reader, out = _read_in_thread(service, op.id)
        reader.join(WAIT)
        assert out == [first] and service.commands.stale_reads == 1  # answered while the lock is held
        now[0] += STALE_READ_PERIOD + 0.5  # the kept map is now too old to serve
        late_reader, late = _read_in_thread(service, op.id)
        late_reader.join(0.5)
        assert late == [] and late_reader.is_alive()  # it waits for the lock
    late_reader.join(WAIT)
    assert late and late[0] is not first and late[0]["state"] == "running"
    assert service.commands.stale_reads == 1
    service.store.close()
