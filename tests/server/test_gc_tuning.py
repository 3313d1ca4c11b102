"""The scheduler process's gc tuning: frozen after start-up, survivors of each full collection frozen, undone on
stop, pauses exported in /metrics (``pooltree/server/gc_tuning.py``)."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pooltree.errors import ConfigError
from pooltree.gc_policy import tuning_mode
from pooltree.server.gc_tuning import FROZEN_RECOUNT_SECONDS, GC, THRESHOLDS, GcTuning, tuning_enabled
from pooltree.server.metrics import render
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store


def _service(tmp_path: Path, tune_gc: bool) -> SchedulerService:
    return SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        create_default_tree=True,
        authentication=False,
        tune_gc=tune_gc,
    )


def test_start_freezes_and_full_collections_freeze_their_survivors(tmp_path: Path) -> None:
    thresholds = gc.get_threshold()
    service = _service(tmp_path, tune_gc=True)

    async def scenario() -> None:
        await service.start()
        try:
            assert gc.get_freeze_count() > 0
            assert gc.get_threshold() == THRESHOLDS
            frozen = gc.get_freeze_count()
            kept = [[index] for index in range(5_000)]  # tracked objects that survive the next collection
            collections = GC.snapshot()["pauses"][2][0]
            gc.collect()
            assert GC.snapshot()["pauses"][2][0] == collections + 1
            # the service's loop freezes the survivors on its next tick
            for _ in range(200):
                if gc.get_freeze_count() >= frozen + len(kept):
                    break
                await asyncio.sleep(0.01)
            assert gc.get_freeze_count() >= frozen + len(kept)
            text = render(service.metrics).decode()
            assert 'pooltree_gc_pause_seconds_count{generation="2"}' in text
            assert "pooltree_gc_frozen_objects" in text
        finally:
            await service.stop()

    asyncio.run(scenario())
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds
    assert GC._callback not in gc.callbacks


def test_untuned_service_leaves_the_collector_alone(tmp_path: Path) -> None:
    thresholds = gc.get_threshold()
    service = _service(tmp_path, tune_gc=False)

    async def scenario() -> None:
        await service.start()
        try:
            assert gc.get_freeze_count() == 0
            assert gc.get_threshold() == thresholds
            gc.collect()
            await asyncio.sleep(0.2)  # several loop ticks: nothing is frozen all the same
            assert gc.get_freeze_count() == 0
        finally:
            await service.stop()

    asyncio.run(scenario())


def test_environment_switch_is_checked() -> None:
    assert tuning_enabled({}) is True
    assert tuning_enabled({"POOLTREE_GC_TUNING": "0"}) is False
    with pytest.raises(ConfigError, match="POOLTREE_GC_TUNING"):
        tuning_enabled({"POOLTREE_GC_TUNING": "yes"})


def test_frozen_objects_are_counted_at_most_once_per_period(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counting the permanent generation walks it with the GIL held: scrapes within FROZEN_RECOUNT_SECONDS of the
    last count are answered from it (every scrape walked it before)."""
    now = [100.0]
    tuning = GcTuning(clock=lambda: now[0])
    counts: list[int] = []
    sizes = iter([7, 9])

    def counted() -> int:
        counts.append(1)
        return next(sizes)

    monkeypatch.setattr(gc, "get_freeze_count", counted)
    assert tuning.snapshot()["frozen"] == 7
    now[0] += FROZEN_RECOUNT_SECONDS - 1
    assert tuning.snapshot()["frozen"] == 7
    assert len(counts) == 1
    now[0] += 1
    assert tuning.snapshot()["frozen"] == 9
    assert len(counts) == 2


def test_young_collections_freeze_their_survivors_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POOLTREE_GC_TUNING=1 (the default): a young collection's survivors are frozen at its end, so no middle
    collection walks them again (``middle``, the default of sessions 31-37, left them to the next middle one)."""
    monkeypatch.delenv("POOLTREE_GC_TUNING", raising=False)
    service = _service(tmp_path, tune_gc=True)

    async def scenario() -> None:
        await service.start()
        try:
            assert gc.get_threshold() == THRESHOLDS
            frozen = gc.get_freeze_count()
            kept = [[index] for index in range(5_000)]
            gc.collect(0)
            assert gc.get_freeze_count() >= frozen + len(kept)
            assert gc.get_objects(generation=1) == [] and gc.get_objects(generation=2) == []
        finally:
            await service.stop()

    asyncio.run(scenario())
    assert gc.get_freeze_count() == 0


def test_middle_collections_freeze_their_survivors_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POOLTREE_GC_TUNING=middle: a middle collection's survivors are frozen at its end (no full collection walks
    them); the old policy (``full``) left them to the next full collection."""
    monkeypatch.setenv("POOLTREE_GC_TUNING", "middle")
    thresholds = gc.get_threshold()
    service = _service(tmp_path, tune_gc=True)

    async def scenario() -> None:
        await service.start()
        try:
            frozen = gc.get_freeze_count()
            kept = [[index] for index in range(5_000)]
            gc.collect(0)
            assert gc.get_freeze_count() < frozen + len(kept)  # a young collection's survivors are not
            gc.collect(1)
            assert gc.get_freeze_count() >= frozen + len(kept)
            # the old generation is empty: a full walk is a short one
            assert gc.get_objects(generation=2) == []
        finally:
            await service.stop()

    asyncio.run(scenario())
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds


def test_full_mode_freezes_only_full_collections_survivors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POOLTREE_GC_TUNING=full: the policy before session 31, kept for comparisons: a middle collection freezes
    nothing, a full one's survivors are frozen at the service loop's next tick."""
    monkeypatch.setenv("POOLTREE_GC_TUNING", "full")
    service = _service(tmp_path, tune_gc=True)

    async def scenario() -> None:
        await service.start()
        try:
            frozen = gc.get_freeze_count()
            kept = [[index] for index in range(5_000)]
            gc.collect(1)
            assert gc.get_freeze_count() < frozen + len(kept)
            gc.collect()
            for _ in range(200):
                if gc.get_freeze_count() >= frozen + len(kept):
                    break
                await asyncio.sleep(0.01)
            assert gc.get_freeze_count() >= frozen + len(kept)
        finally:
            await service.stop()

    asyncio.run(scenario())
    assert gc.get_freeze_count() == 0


def test_environment_modes_are_checked() -> None:
    assert tuning_mode({}) == "1"
    assert tuning_mode({"POOLTREE_GC_TUNING": "full"}) == "full"
    assert tuning_enabled({"POOLTREE_GC_TUNING": "full"}) is True
    assert tuning_mode({"POOLTREE_GC_TUNING": "middle"}) == "middle"
    with pytest.raises(ConfigError, match="0, 1, full or middle"):
        tuning_mode({"POOLTREE_GC_TUNING": "young"})


def test_the_live_paths_leave_no_cycles_for_the_policy_to_freeze(tmp_path: Path) -> None:
    """The price of freezing survivors is that a reference cycle alive at a freezing collection is never collected
    once it becomes garbage. Heartbeats, starts, fair-share updates, read snapshots' publications and the reads
    over real HTTP (``LIVE_READS``) make no cycle at all: with everything alive frozen and the collector off for
    the rounds, one collection after them finds nothing unreachable. (With the collector on, a cycle is frozen
    only when a collection lands while it lives, which depends on what ran before: the earlier form of this test
    passed alone and found the Scheduling page's rows' closure, 147 objects, in the full suite.) The rounds run in a
    process of their own (``live_cycles.py``): no other test's thread makes garbage while the collector is off."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("live_cycles.py")), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["found"] == 0, answer["kinds"]


class _Cyclic:
    """An object in a reference cycle with itself."""

    def __init__(self) -> None:
        self.me = self


def test_the_valve_vents_when_the_frozen_generation_grew_and_alerts_on_frozen_garbage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frozen generation's growth is bounded: once per FROZEN_RECOUNT_SECONDS the service loop's tick counts it,
    and when it grew past the valve's bound since the settling (or the last vent) the valve vents. A vent that found
    cycles the policy had frozen raises ``collector_frozen_garbage`` (their types named) for VALVE_ALERT_HOLD
    seconds; the vents' pauses and the garbage are in /metrics."""
    from pooltree.server import gc_tuning

    monkeypatch.setattr(gc_tuning, "VALVE_MIN_GROWTH", 1_000)
    now = [100.0]
    tuning = GcTuning(clock=lambda: now[0])
    service = _service(tmp_path, tune_gc=False)
    service.scheduler.alert_center.collector_alert = tuning.alert
    tuning.install()
    tuning.settle()
    try:
        baseline = tuning.valve_baseline
        assert baseline is not None and baseline > 0
        growth = max(1_000, int(gc_tuning.VALVE_GROWTH * baseline)) + 10
        cycles = [_Cyclic() for _ in range(30)]
        kept = [[index] for index in range(growth)]
        gc.freeze()  # as the policy freezes survivors
        del cycles
        now[0] += FROZEN_RECOUNT_SECONDS - 1
        tuning.tick()
        assert tuning.vents[0] == 0  # not counted yet
        now[0] += 1
        tuning.tick()
        assert tuning.vents[0] == 1
        record = tuning.last_vent
        assert record is not None and record.vent.found >= 30
        assert dict(record.vent.kinds)["_Cyclic"] == 30
        assert record.frozen_before >= baseline + growth
        assert tuning.valve_baseline == record.frozen_after
        alerts = [
            a
            for a in service.scheduler.alert_center.scheduler_alerts()
            if a["attributes"]["alert_type"] == "collector_frozen_garbage"
        ]
        assert len(alerts) == 1
        assert alerts[0]["attributes"]["found_kinds"]["_Cyclic"] == 30
        now[0] += FROZEN_RECOUNT_SECONDS
        tuning.tick()  # no growth since: no vent
        assert tuning.vents[0] == 1
        now[0] += gc_tuning.VALVE_ALERT_HOLD
        assert tuning.alert() is None
        monkeypatch.setattr(gc_tuning, "GC", tuning)
        text = render(service.metrics).decode()
        assert "pooltree_gc_valve_seconds_count 1.0" in text
        assert f"pooltree_gc_frozen_garbage_objects_total {float(record.vent.found)}" in text
        assert len(kept) == growth
    finally:
        tuning.uninstall()
        service.store.close()
    assert gc.get_freeze_count() == 0
