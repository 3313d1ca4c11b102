"""Where a slow heartbeat's time went (``live/tail.py``): each heartbeat's phases counted, the slow ones kept with
the stalls beside them, and ``GET /internal/heartbeat_tail`` / ``/metrics`` showing them. A heartbeat that waits
for a lock held by another thread shows its time under ``lock_wait`` with the holder's function; one whose job
records' transaction is slow shows it under ``commit`` with the group commit's transaction."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from pooltree.errors import ConfigError
from pooltree.node import wire
from pooltree.server.gc_tuning import GcTuning
from pooltree.server.heartbeat_trace import HOLD_SECONDS, KEPT, TRACE, HeartbeatTrace, trace_seconds
from pooltree.server.live.commit import GroupCommit
from pooltree.server.live.lock import SchedulingLock
from pooltree.server.live.tail import PHASES, SLOW_SECONDS, HeartbeatTail, PhaseClock
from pooltree.server.service import SchedulerService
from pooltree.server.stalls import STALL_SECONDS, StallRing
from pooltree.server.store import JobRecord, open_store

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
from heartbeat_maps import node_heartbeat, published
from heartbeat_tail import trace_figures

WAIT = 30.0
TOKEN = "ytct-0000-" + "7a11" * 8
SECRET = "ptns-test-node-secret-" + "cd" * 16
HELD = 2 * SLOW_SECONDS
"""How long the test's stall lasts past the heartbeat's arrival (seconds, by the clock, not a sleep's promise)."""


def _spin_until(moment: float) -> None:
    """Return once ``time.perf_counter()`` has passed ``moment`` (a stall of a known least length)."""
    while time.perf_counter() < moment:
        time.sleep(0.001)


def test_the_tail_counts_every_heartbeat_and_keeps_the_slow_ones_whole() -> None:
    tail = HeartbeatTail()
    fast = (0.001, 0.0001, 0.0, 0.0004, 0.002, 0.0001, 0.00005)
    slow = (0.002, 0.0001, 0.060, 0.0005, 0.010, 0.0002, 0.00005)
    tail.record("n1", fast)
    tail.record("n2", slow, gc_seconds=0.004)
    ring = StallRing()
    ring.note(STALL_SECONDS / 2, "too short to keep")
    ring.note(0.06, "held")
    report = tail.report({"lock_holds": ring.stalls})
    assert report["heartbeats"] == 2 and report["slow_heartbeats"] == 1
    assert report["phase_seconds"]["lock_wait"] == pytest.approx(0.060)
    assert report["slow_phase_seconds"]["commit"] == pytest.approx(0.010)
    assert report["slow_phase_seconds"]["queued"] == pytest.approx(0.002)  # only the slow one's
    assert report["slow_gc_seconds"] == pytest.approx(0.004)
    [kept] = report["slow"]
    assert kept["address"] == "n2" and kept["phases_ms"]["lock_wait"] == pytest.approx(60.0)
    assert [stall["what"] for stall in report["stalls"]["lock_holds"]] == ["held"]
    later = tail.report({"lock_holds": ring.stalls}, since=time.time() + 60)
    assert later["slow"] == [] and later["stalls"]["lock_holds"] == [] and later["slow_heartbeats"] == 1


def test_a_phase_clock_splits_the_wait_for_a_batch_from_the_loop_s_wake_up() -> None:
    clock = PhaseClock(queued=0.003)
    clock.mark_decoded()
    clock.mark_try()
    clock.mark_processed()
    ended = time.perf_counter()
    _spin_until(ended + 0.005)  # the loop resumes the heartbeat 5 ms after its batch ended
    clock.mark_committed(ended)
    phases = dict(zip(PHASES, clock.phases(), strict=True))
    assert phases["queued"] == 0.003
    assert phases["wake"] >= 0.005 and phases["commit"] < 0.005
    assert all(value >= 0 for value in phases.values())
    stored_before = PhaseClock(queued=-1.0)  # a negative backlog (clock skew) counts as none
    stored_before.mark_decoded()
    stored_before.mark_processed()
    stored_before.mark_committed(None)  # stored before the wait: no wake-up of a batch
    assert stored_before.phases()[PHASES.index("wake")] == 0.0 and stored_before.phases()[0] == 0.0


def test_a_long_hold_of_the_lock_is_kept_with_the_function_that_held_it() -> None:
    lock = SchedulingLock()

    def the_fair_share_part() -> None:
        with lock:
            _spin_until(time.perf_counter() + STALL_SECONDS)

    the_fair_share_part()
    with lock:
        pass  # short: not kept
    [(_, seconds, holder)] = list(lock.long_holds.stalls)
    assert seconds >= STALL_SECONDS and holder.endswith("the_fair_share_part")


def test_the_collector_hook_sums_every_pause() -> None:
    tuning = GcTuning()
    tuning.install()
    try:
        before = tuning.paused_seconds
        gc.collect()
        assert tuning.paused_seconds > before
        assert tuning.pauses[2][0] >= 1
    finally:
        tuning.uninstall()


async def _hold_the_lock(service: SchedulerService, in_flight: Callable[[], bool]) -> dict[str, Any]:
    """A stall for ``_slow_heartbeat``: the scheduling lock held on another thread, as a fair-share update's part,
    until the returned ``release`` is set."""
    held, release = threading.Event(), threading.Event()

    def a_long_update_part() -> None:
        with service.scheduler.lock:
            held.set()
            release.wait(WAIT)

    holder = threading.Thread(target=a_long_update_part)
    holder.start()
    assert await asyncio.to_thread(held.wait, WAIT)
    return {"holder": holder, "release": release}


@pytest.mark.anyio
async def test_a_heartbeat_behind_a_held_lock_shows_its_wait_and_the_holder(tmp_path: Path) -> None:
    report, metrics = await _slow_heartbeat(tmp_path, _hold_the_lock)
    [slow] = report["slow"]
    assert slow["phases_ms"]["lock_wait"] >= 1000 * HELD
    assert max(slow["phases_ms"], key=slow["phases_ms"].get) == "lock_wait"
    holders = [stall["what"] for stall in report["stalls"]["lock_holds"]]
    assert any(holder.endswith("a_long_update_part") for holder in holders)
    assert "pooltree_scheduler_slow_heartbeats_total 1.0" in metrics
    assert 'pooltree_scheduler_slow_heartbeat_phase_seconds_total{phase="lock_wait"}' in metrics


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> HeartbeatTrace:
    """The process's trace on (``POOLTREE_HEARTBEAT_TRACE=0.05``) for the test, with empty rings."""
    fresh = HeartbeatTrace(SLOW_SECONDS)
    for name in ("seconds", "enabled", "heartbeats", "holds", "collections", "batches"):
        monkeypatch.setattr(TRACE, name, getattr(fresh, name))
    return TRACE


def test_the_trace_is_off_unless_its_variable_names_seconds() -> None:
    assert trace_seconds({}) == 0.0 and trace_seconds({"POOLTREE_HEARTBEAT_TRACE": " "}) == 0.0
    assert trace_seconds({"POOLTREE_HEARTBEAT_TRACE": "0.1"}) == 0.1
    assert not HeartbeatTrace(0.0).enabled and HeartbeatTrace(0.1).enabled
    for bad in ("soon", "-1", "nan", "inf"):
        with pytest.raises(ConfigError, match="POOLTREE_HEARTBEAT_TRACE"):
            trace_seconds({"POOLTREE_HEARTBEAT_TRACE": bad})


def _collect_with_the_service_hook() -> None:
    """A full collection with the service's collector hook (``GcTuning``) installed, as the scheduler runs."""
    tuning = GcTuning()
    tuning.install()
    try:
        gc.collect()
    finally:
        tuning.uninstall()


def test_an_untraced_process_keeps_no_holds_or_collections() -> None:
    assert not TRACE.enabled  # the test run's environment has no trace
    lock, held = SchedulingLock(), len(TRACE.holds)
    with lock:
        _spin_until(time.perf_counter() + 2 * HOLD_SECONDS)
    _collect_with_the_service_hook()
    assert len(TRACE.holds) == held == 0 and not TRACE.collections


def test_the_trace_keeps_holds_from_a_millisecond_with_their_cpu_and_every_collection(
    traced: HeartbeatTrace,
) -> None:
    lock = SchedulingLock()

    def a_short_update_part() -> (
        None
    ):  # under STALL_SECONDS: the tail's ring keeps nothing, the trace keeps it
        with lock:
            _spin_until(time.perf_counter() + 2 * HOLD_SECONDS)

    a_short_update_part()
    with lock:
        pass  # under HOLD_SECONDS: not kept
    [(began, seconds, holder, cpu)] = list(traced.holds)
    assert holder.endswith("a_short_update_part") and 2 * HOLD_SECONDS <= seconds < STALL_SECONDS * 50
    assert 0 < cpu <= seconds + 0.01 and began <= time.time() - seconds
    assert not lock.long_holds.stalls
    _collect_with_the_service_hook()
    [(_, paused, generation, gc_cpu)] = list(traced.collections)
    assert generation == 2 and paused > 0 and gc_cpu >= 0
    report = traced.report(0.0)
    assert [hold["what"] for hold in report["holds"]] == [holder]
    assert report["collections"][0]["generation"] == 2 and traced.report(time.time() + 60)["holds"] == []


@pytest.mark.anyio
async def test_a_traced_heartbeat_behind_a_held_lock_is_attributed_to_the_holder(
    tmp_path: Path, traced: HeartbeatTrace
) -> None:
    """With the trace on, the slow heartbeat is kept with its span's CPU, the holder's hold with its own, and
    the bench's attribution puts the heartbeat's lock wait on that holder."""

    began = time.time()
    report, _ = await _slow_heartbeat(tmp_path, _hold_the_lock)
    trace = report["trace"]
    assert trace["seconds"] == SLOW_SECONDS
    [beat] = [h for h in trace["heartbeats"] if h["address"] == "n1"]
    assert beat["phases_ms"][PHASES.index("lock_wait")] >= 1000 * HELD
    assert 0 <= beat["loop_cpu_ms"] <= beat["process_cpu_ms"] + 1
    [hold] = [h for h in trace["holds"] if h["what"].endswith("a_long_update_part")]
    assert hold["ms"] >= 1000 * HELD and hold["cpu_ms"] < hold["ms"]  # it waited, it did not work
    figures = trace_figures(report, (began, time.time() + 1))
    assert figures["heartbeats"] >= 1
    waited = figures["lock_wait_by_holder_ms"]
    assert max(waited, key=waited.get).endswith("a_long_update_part")


def test_the_attribution_splits_a_slow_heartbeat_by_holder_collection_and_cpu() -> None:
    """``bench/heartbeat_tail.trace_figures`` on a made-up trace: a 200 ms heartbeat that waited 100 ms for
    the lock (60 of them inside a hold, 40 in none), with a 10 ms collection in its span."""
    answered = 1000.2
    report = {
        "trace": {
            "seconds": 0.1,
            "heartbeats": [
                {
                    "answered": answered,
                    "address": "n1",
                    "ms": 200.0,
                    "phases_ms": [20.0, 0.0, 100.0, 1.0, 50.0, 29.0, 0.0],
                    "gc_ms": 10.0,
                    "loop_cpu_ms": 80.0,
                    "process_cpu_ms": 120.0,
                }
            ],
            "holds": [
                {"began": 1000.02, "ms": 60.0, "what": "FairShareUpdates.finish_in_parts", "cpu_ms": 5.0},
                {"began": 1000.5, "ms": 30.0, "what": "later", "cpu_ms": 30.0},
            ],
            "collections": [{"began": 1000.15, "ms": 10.0, "generation": 1, "cpu_ms": 9.0}],
        }
    }
    figures = trace_figures(report, (999.0, 1001.0))
    assert figures["heartbeats"] == 1 and figures["mean_ms"] == 200.0
    assert figures["lock_wait_by_holder_ms"] == {"FairShareUpdates.finish_in_parts": 60.0}
    assert figures["lock_wait_unheld_ms"] == 40.0
    assert figures["gc_overlap_ms"] == 10.0
    assert figures["span_ms"] == {"loop_cpu": 80.0, "other_threads_cpu": 40.0, "off_cpu": 80.0}
    assert figures["holds"]["FairShareUpdates.finish_in_parts"]["cpu_ms"] == 5.0
    assert figures["collections"]["1"] == {"count": 1, "total_ms": 10.0, "cpu_ms": 9.0, "max_ms": 10.0}
    assert trace_figures({}, (0.0, 1.0)) == {} and trace_figures(None, (0.0, 1.0)) == {}


def test_the_trace_keeps_every_group_commit_transaction_with_its_records_and_cpu(
    traced: HeartbeatTrace,
) -> None:
    """Each transaction of the group commit, however short, is kept with its records and the committing thread's
    CPU and the process's; ``trace_figures`` sums them, the long ones (20 ms or more) apart."""
    written: list[int] = []

    def write(records: Sequence[JobRecord]) -> None:
        if len(records) == 3:  # a long one: 25 ms of the thread's own CPU
            worked = time.thread_time() + 0.025
            while time.thread_time() < worked:
                pass
        written.append(len(records))

    commits = GroupCommit(write)
    began = time.time()
    for count in (1, 3):
        commits.wait(commits.submit([JobRecord("op", f"j{count}-{i}", "running") for i in range(count)]))
    assert written == [1, 3]
    short, long = traced.report(0.0)["batches"]
    assert short["records"] == 1 and long["records"] == 3 and long["ms"] >= 25.0
    assert 0 <= short["cpu_ms"] <= short["process_cpu_ms"] + 1 and long["cpu_ms"] >= 20.0
    figures = trace_figures({"trace": traced.report(0.0)}, (began - 1, time.time() + 1))
    assert figures["commit_batches"]["count"] == 2 and figures["commit_batches"]["records_mean"] == 2.0
    assert (
        figures["commit_batches_long"]["count"] == 1 and figures["commit_batches_long"]["records_mean"] == 3.0
    )
    assert figures["commit_batches_long"]["thread_cpu_ms_mean"] >= 20.0


def test_an_untraced_group_commit_keeps_no_transactions() -> None:
    assert not TRACE.enabled
    commits = GroupCommit(lambda records: None)
    commits.wait(commits.submit([JobRecord("op", "j", "running")]))
    assert not TRACE.batches


@pytest.mark.anyio
async def test_a_heartbeat_behind_a_slow_transaction_shows_its_commit(tmp_path: Path) -> None:
    async def stall(service: SchedulerService, in_flight: Callable[[], bool]) -> dict[str, Any]:
        commits = service.scheduler.commits
        write, release = commits._write, threading.Event()

        def slow_write(records: Sequence[JobRecord]) -> None:  # the store's transaction, stalled
            release.wait(WAIT)
            write(records)

        commits._write = slow_write  # type: ignore[method-assign]
        # taken as the heartbeat waits, so held all of HELD (the interval's gathering made it 98 ms against 100)
        commits.interval = 0.0
        return {"release": release}

    report, _ = await _slow_heartbeat(tmp_path, stall)
    [slow] = report["slow"]
    assert slow["phases_ms"]["commit"] >= 1000 * HELD
    assert max(slow["phases_ms"], key=slow["phases_ms"].get) == "commit"
    # the heartbeat's batch (its two started jobs); under load other transactions (the start's) pass 10 ms too
    [batch] = [batch for batch in report["stalls"]["commit_batches"] if batch["what"].startswith("2 records")]
    assert batch["ms"] >= 1000 * HELD


@pytest.mark.anyio
async def test_a_heartbeat_that_publishes_first_counts_its_thread_s_work_as_processing(
    tmp_path: Path,
) -> None:
    """A heartbeat that meets a stale tree is answered on a heartbeat thread (the publish, its work and its
    commit there): that time is its ``processing``, and no phase is negative."""
    async with _served(tmp_path) as (service, client):
        service.scheduler.updates.stale_trees.add("default")  # a tree that waits to be published
        assert service.scheduler.publishing
        body = wire.encode(node_heartbeat("n1", limits={"cpu": 4, "user_slots": 4, "memory": 8 << 30}))
        answer = await client.post(
            wire.HEARTBEAT_PATH, content=body, headers={"X-Pooltree-Node-Secret": SECRET}
        )
        assert answer.status_code == 200, answer.text
        tail = service.tail
        phases = dict(zip(PHASES, tail.seconds, strict=True))
        assert tail.timed == 1 and min(phases.values()) >= 0, phases
        assert phases["processing"] > 0 and phases["commit"] == 0 and phases["wake"] == 0


@asynccontextmanager
async def _served(tmp_path: Path) -> AsyncIterator[tuple[SchedulerService, httpx.AsyncClient]]:
    """A started service with the default tree on a SQLite file, and a root client of its ASGI app (in process);
    stopped and closed after the block."""
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        create_default_tree=True,
        token=TOKEN,
        node_secret=SECRET,
    )
    await service.start()
    transport = httpx.ASGITransport(app=service.asgi, client=("127.0.0.1", 1234))
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", headers={"Authorization": f"OAuth {TOKEN}"}
        ) as client:
            yield service, client
    finally:
        await service.stop()
        service.store.close()


async def _slow_heartbeat(tmp_path: Path, stall: Any) -> tuple[dict[str, Any], str]:
    """A service with one operation of 2 jobs; ``stall(service, in_flight)`` sets up what holds the heartbeat
    (returns its ``release`` event, and its ``holder`` thread if any); the heartbeat that starts the jobs is
    sent, held at least ``HELD`` past its arrival, answered; then the tail report and ``/metrics``."""
    async with _served(tmp_path) as (service, client):
        throttle = service.scheduler.heartbeat_throttle
        parts: dict[str, Any] = {}
        try:
            started = await client.post(
                "/api/v4/start_operation",
                json={
                    "operation_type": "vanilla",
                    "spec": {"tasks": {"main": {"command": "true", "job_count": 2}}},
                },
            )
            assert started.status_code == 200, started.text
            assert await asyncio.to_thread(published, service.scheduler, started.json()["operation_id"], WAIT)
            parts = await stall(service, lambda: throttle.in_flight == 1)
            body = wire.encode(node_heartbeat("n1", limits={"cpu": 4, "user_slots": 4, "memory": 8 << 30}))
            beat = asyncio.ensure_future(
                client.post(wire.HEARTBEAT_PATH, content=body, headers={"X-Pooltree-Node-Secret": SECRET})
            )
            deadline = time.monotonic() + WAIT
            while throttle.in_flight != 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            assert throttle.in_flight == 1
            await asyncio.to_thread(_spin_until, time.perf_counter() + HELD)
            parts["release"].set()
            answer = await asyncio.wait_for(beat, WAIT)
            assert answer.status_code == 200, answer.text
            assert len(wire.decode(answer.content)[wire.START]) == 2
            tail = await client.get("/internal/heartbeat_tail", params={"since": "0"})
            assert tail.status_code == 200, tail.text
            metrics = await client.get("/metrics")
            refused = await client.get("/internal/heartbeat_tail", params={"since": "soon"})
            assert refused.status_code == 400
            return tail.json(), metrics.text
        finally:
            if "release" in parts:
                parts["release"].set()
            if "holder" in parts:
                parts["holder"].join(WAIT)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_a_full_ring_says_from_when_it_is_whole_and_the_figures_name_it() -> None:
    """The rings keep the latest ``KEPT`` entries: once one has dropped entries, the report says from when it is
    whole, and ``trace_figures`` names it for a window that begins earlier (its figures cover only the end)."""
    trace = HeartbeatTrace(0.1)
    now = time.time()
    for index in range(KEPT + 10):
        trace.holds.append((now - 100 + index / 1000, 0.002, "update", 0.001))
    trace.collections.append((now - 50, 0.001, 0, 0.001))
    report = trace.report(0.0)
    assert report["kept_from"] == {
        "heartbeats": None,
        "holds": round(now - 100 + 0.01, 5),
        "collections": None,
        "batches": None,
    }
    assert len(report["holds"]) == KEPT
    assert trace_figures({"trace": report}, (now - 100, now))["rings_cut"] == ["holds"]
    assert "rings_cut" not in trace_figures({"trace": report}, (now - 50, now))
