"""The orchid does not wait for the scheduling lock: while heartbeats or an update hold it, a read is answered
from the orchid an earlier read published, if that is at most ``ORCHID_CACHE_PERIOD`` old (YTsaurus's
``static_orchid_cache_update_period``); an older one is not served, the read waits and publishes anew."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pooltree.server.orchid import ORCHID_CACHE_PERIOD
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

WAIT = 30.0


def _read_in_thread(service: SchedulerService, path: list[str]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(service.orchid.get(path)), daemon=True)
    thread.start()
    return thread, out


@contextlib.contextmanager
def _lock_held(service: SchedulerService) -> Iterator[None]:
    """The scheduling lock held by another thread (heartbeats, an update) for the body's length."""
    has_lock, release = threading.Event(), threading.Event()

    def hold() -> None:
        with service.scheduler.lock:
            has_lock.set()
            release.wait(WAIT)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert has_lock.wait(WAIT)
    try:
        yield
    finally:
        release.set()
        holder.join(WAIT)


def _service(tmp_path: Path) -> tuple[SchedulerService, list[float]]:
    """A service with tree ``default`` after one fair-share update, its orchid on a clock the test moves."""
    service = SchedulerService(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), create_default_tree=True)
    now = [100.0]
    service.orchid.clock = lambda: now[0]
    service.cypress.create("scheduler_pool_tree", "//sys/pool_trees/default")
    service.scheduler.update_fair_share("default", 1.0)
    return service, now


def test_orchid_reads_do_not_wait_for_a_busy_lock(tmp_path: Path) -> None:
    service, now = _service(tmp_path)
    path = ["scheduler", "pool_trees", "default", "pools"]
    first = service.orchid.get(path)  # lock free: built and published
    assert "<Root>" in first
    with _lock_held(service):
        reader, out = _read_in_thread(service, path)
        reader.join(WAIT)
        assert out == [first] and service.orchid.served_published == 1  # answered while the lock is held
        now[0] += ORCHID_CACHE_PERIOD + 0.5  # the published orchid is now too old to serve
        late_reader, late = _read_in_thread(service, path)
        late_reader.join(0.5)
        assert late == [] and late_reader.is_alive()  # it waits for the lock
    late_reader.join(WAIT)
    assert late == [first] and service.orchid.served_published == 1
    service.scheduler.update_fair_share(
        "default", 2.0
    )  # a new update: what was published before is not served
    with _lock_held(service):
        after_update, out = _read_in_thread(service, path)
        after_update.join(0.5)
        assert out == [] and after_update.is_alive()
    after_update.join(WAIT)
    assert out and service.orchid.served_published == 1
    service.store.close()


def _types(alerts: list[dict[str, Any]]) -> list[str]:
    return [a["attributes"]["alert_type"] for a in alerts]


def test_a_path_is_never_answered_older_than_before(tmp_path: Path) -> None:
    """A change between two fair-share updates (here a tree config raising the "unrecognized options" alert),
    once read, is never read as before it again while the lock is busy: the answer built under the lock
    replaces the one kept for that path, fresh or not. (Before, a fresh kept answer was not replaced, and a
    read that found the lock busy was answered from before the change: `//sys/scheduler/@alerts` showed the
    alert, then none.)"""
    service, _ = _service(tmp_path)
    path = ["scheduler", "alerts"]
    assert _types(service.orchid.get(path)) == ["pool_tree_without_nodes"]  # kept for the path
    service.cypress.set("//sys/pool_trees/default/@config/pool_config_presets", {"p": {"ffair_share": 1}})
    seen = service.orchid.get(path)  # lock free: built anew
    assert _types(seen) == ["pool_tree_without_nodes", "unrecognized_pool_tree_config_options"]
    with _lock_held(service):
        reader, out = _read_in_thread(service, path)
        reader.join(WAIT)
        assert out == [seen] and service.orchid.served_published == 1  # while the lock is held: as last read
    service.store.close()


def test_no_path_is_answered_older_than_another_path_was(tmp_path: Path) -> None:
    """A change read at one path is not read as before it at another: a kept answer built before any later
    answer (of any path) waits for the lock. (Before, each path kept its own: reading a tree's ``config`` after
    a change, then its ``config/<option>`` while the lock was busy, gave the option from before the change.)"""
    service, _ = _service(tmp_path)
    config = ["scheduler", "pool_trees", "default", "config"]
    option = [*config, "fair_share_starvation_timeout"]
    before = service.orchid.get(option)  # kept for the path
    service.cypress.set("//sys/pool_trees/default/@config/fair_share_starvation_timeout", 7000)
    assert service.orchid.get(config)["fair_share_starvation_timeout"] == 7000 != before
    with _lock_held(service):
        reader, out = _read_in_thread(service, option)
        reader.join(0.5)
        assert out == [] and reader.is_alive()  # the option kept from before the change is not served
    reader.join(WAIT)
    assert out == [7000] and service.orchid.served_published == 0
    with _lock_held(service):  # the newest answer is served while the lock is busy
        again, out = _read_in_thread(service, option)
        again.join(WAIT)
        assert out == [7000] and service.orchid.served_published == 1
    service.store.close()
