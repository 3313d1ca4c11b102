"""The scheduler process's gc tuning: frozen after start-up, survivors of each full collection frozen, undone on
stop, pauses exported in /metrics (``pooltree/server/gc_tuning.py``)."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

from pooltree.errors import ConfigError
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
