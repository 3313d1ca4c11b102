"""The process's gc policy (``pooltree/gc_policy.py``): survivors of each full collection frozen, at the collection
for the batch shells (the simulator's run loop, ``pooltree fair-share``) or at the next tick for the live service;
``POOLTREE_GC_TUNING`` switches it off everywhere; collections never change a result."""

from __future__ import annotations

import contextlib
import filecmp
import gc
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from pooltree.cli import app
from pooltree.errors import ConfigError
from pooltree.gc_policy import ENVIRONMENT, POLICY, THRESHOLDS, survivors_frozen, tuning_enabled
from pooltree.sim import parse_scenario
from pooltree.sim.engine import Simulation
from tests.sim.simkit import project_document, run

ROOT = Path(__file__).resolve().parents[1]


def run_fair_share(*args: str) -> Result:
    with contextlib.chdir(ROOT):
        return CliRunner().invoke(app, ["fair-share", *args], catch_exceptions=False)


@pytest.fixture(autouse=True)
def _collector_left_as_found() -> Any:
    thresholds = gc.get_threshold()
    assert gc.get_freeze_count() == 0 and not POLICY.held
    yield
    assert not POLICY.held
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds
    assert POLICY._callback not in gc.callbacks


def _frozen(objects: list[Any]) -> int:
    """How many of ``objects`` are frozen (in the permanent generation, which ``gc.get_objects`` leaves out)."""
    tracked = {id(item) for item in gc.get_objects()}
    return sum(id(item) not in tracked for item in objects)


def test_survivors_of_a_full_collection_are_frozen_at_the_collection() -> None:
    with survivors_frozen({}) as tuned:
        assert tuned is True
        assert gc.get_threshold() == THRESHOLDS
        # only this test's own collections (another thread's allocations could set one off at these thresholds),
        # and the kept objects themselves asked for: the frozen count also falls when frozen objects are freed
        gc.disable()
        try:
            gc.collect()
            assert gc.get_freeze_count() > 0  # whatever the process held is frozen by the collection itself
            kept = [[index] for index in range(5_000)]  # tracked, surviving the next full collection
            assert _frozen(kept) == 0  # allocating freezes nothing
            gc.collect(1)  # a middle-generation collection freezes nothing either
            assert _frozen(kept) == 0
            gc.collect()
            assert _frozen(kept) == len(kept)  # no tick needed
            garbage = [[]]
            garbage[0].append(garbage)  # a cycle made garbage before a full collection is collected
            del garbage
            assert gc.collect() >= 2
        finally:
            gc.enable()
    assert gc.get_freeze_count() == 0  # released: everything unfrozen


def _collections_while_keeping(objects: int) -> tuple[list[Any], dict[int, int]]:
    """Collections by generation the collector runs on its own while ``objects`` tracked objects are made and kept
    (the thresholds' young collections, and what they set off)."""
    ran = {0: 0, 1: 0, 2: 0}

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            ran[info["generation"]] += 1

    gc.callbacks.append(count)
    try:
        kept = [[index] for index in range(objects)]
    finally:
        gc.callbacks.remove(count)
    return kept, ran


def test_young_survivors_frozen_walk_each_object_once() -> None:
    """``young``: each young collection's survivors are frozen at its end, so they are walked once and no middle
    collection runs (a freeze resets the older generations' counts); ``middle`` freezes only at the middle
    collections, which walk again what five young ones walked."""
    POLICY.acquire(at_collection=False, young=True)
    try:
        POLICY.settle()
        frozen = gc.get_freeze_count()
        kept, ran = _collections_while_keeping(30_000)
        assert ran[0] >= 25 and ran[1] == ran[2] == 0
        assert gc.get_freeze_count() >= frozen + len(kept) - THRESHOLDS[0]  # all but the last young ones'
        assert POLICY.young_freezes >= ran[0]
        del kept
    finally:
        POLICY.release(at_collection=False, young=True)
    POLICY.acquire(at_collection=False, middle=True)
    try:
        POLICY.settle()
        kept, ran = _collections_while_keeping(30_000)
        assert ran[0] >= 20 and ran[1] >= 4 and ran[2] == 0
        del kept
    finally:
        POLICY.release(at_collection=False, middle=True)


def test_the_environment_switches_it_off() -> None:
    thresholds = gc.get_threshold()
    with survivors_frozen({ENVIRONMENT: "0"}) as tuned:
        assert tuned is False
        assert gc.get_threshold() == thresholds
        gc.collect()
        assert gc.get_freeze_count() == 0
    assert tuning_enabled({}) is True
    assert tuning_enabled({ENVIRONMENT: " 1 "}) is True


def test_a_bad_environment_value_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with (
        pytest.raises(ConfigError, match=f"{ENVIRONMENT}: must be 0, 1, full or middle, got 'yes'"),
        survivors_frozen({ENVIRONMENT: "yes"}),
    ):
        pass
    monkeypatch.setenv(ENVIRONMENT, "on")
    with pytest.raises(ConfigError, match=ENVIRONMENT):
        Simulation(parse_project()).run()
    done = run_fair_share("examples/project-root.yaml")
    assert done.exit_code != 0
    assert f"{ENVIRONMENT}: must be 0, 1, full or middle, got 'on'" in done.output


def parse_project() -> Any:
    return parse_scenario(project_document(until="2m"))


def test_a_shell_inside_the_live_service_keeps_the_service_tuning() -> None:
    """The service holds the policy (frozen at its ticks); a simulator run in the same process freezes at the
    collection while it runs and, released, leaves the service's frozen objects and thresholds alone."""
    POLICY.acquire(at_collection=False)
    try:
        POLICY.settle()
        frozen = gc.get_freeze_count()
        assert frozen > 0 and gc.get_threshold() == THRESHOLDS
        kept = [[index] for index in range(5_000)]
        gc.collect()
        assert gc.get_freeze_count() == frozen  # the service freezes at its tick, not in the collector
        assert POLICY.tick() is True
        assert gc.get_freeze_count() >= frozen + len(kept)
        assert POLICY.tick() is False  # nothing due until the next full collection
        with survivors_frozen({}):
            more = [[index] for index in range(5_000)]
            before = gc.get_freeze_count()
            gc.collect()
            assert gc.get_freeze_count() >= before + len(more)
        assert gc.get_freeze_count() > 0  # the shell's release does not undo the service's hold
        assert gc.get_threshold() == THRESHOLDS
        del kept, more
    finally:
        POLICY.release(at_collection=False)


def test_the_simulator_runs_under_the_policy_with_the_same_results(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[tuple[bool, int]] = []
    update = Simulation._fair_share_update

    def observed(self: Simulation, tree: str) -> Any:
        if len(seen) == 3:
            gc.collect()  # a full collection in the middle of the run: its survivors are frozen at once
        seen.append((POLICY.held, gc.get_freeze_count()))
        return update(self, tree)

    monkeypatch.setattr(Simulation, "_fair_share_update", observed)
    document = project_document(until="10m")
    monkeypatch.setenv(ENVIRONMENT, "1")
    tuned = run(document, tmp_path / "tuned")
    assert all(held for held, _ in seen) and seen[3][1] > 0
    seen.clear()
    monkeypatch.setenv(ENVIRONMENT, "0")
    plain = run(document, tmp_path / "plain")
    assert seen and not any(held or frozen for held, frozen in seen)
    for name in ("events.jsonl", "timeline.csv", "operations.csv"):
        assert filecmp.cmp(tmp_path / "tuned" / name, tmp_path / "plain" / name, shallow=False), name
    tuned["global"].pop("wall_time")
    plain["global"].pop("wall_time")
    tuned.pop("engine")
    plain.pop("engine")
    assert tuned == plain


def test_fair_share_cli_runs_its_steps_under_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    from pooltree.cli.fair_share import _TreeStep

    held: list[bool] = []
    step = _TreeStep.run

    def observed(self: _TreeStep) -> Any:
        held.append(POLICY.held)
        return step(self)

    monkeypatch.setattr(_TreeStep, "run", observed)
    outputs = {}
    for value in ("1", "0"):
        monkeypatch.setenv(ENVIRONMENT, value)
        done = run_fair_share("examples/project-root.yaml", "--repeat", "3")
        assert done.exit_code == 0, done.output
        outputs[value] = done.stdout
    assert held == [True] * 3 + [False] * 3
    assert outputs["1"] == outputs["0"]


class _Cyclic:
    """An object in a reference cycle with itself (a cycle the policy can freeze)."""

    def __init__(self) -> None:
        self.me = self


def test_a_vent_reclaims_the_cycles_the_policy_froze_and_names_them() -> None:
    """A reference cycle alive at a freeze and garbage after it is never collected while frozen; a vent unfreezes,
    collects the whole heap, names what it found and freezes what lives again. Nothing found: nothing named."""
    import weakref

    vents = POLICY.vents
    POLICY.acquire(at_collection=True)
    try:
        kept = [[index] for index in range(1_000)]
        cycles = [_Cyclic() for _ in range(50)]
        gone = [weakref.ref(cycle) for cycle in cycles]
        POLICY.settle()
        del cycles
        gc.collect()  # frozen: a collection does not see them
        assert all(ref() is not None for ref in gone)
        frozen = gc.get_freeze_count()
        vent = POLICY.vent()
        assert vent.found >= len(gone)
        assert dict(vent.kinds)["_Cyclic"] == len(gone)
        assert vent.seconds > 0
        assert all(ref() is None for ref in gone)
        assert not any(isinstance(garbage, _Cyclic) for garbage in gc.garbage)  # let go after naming
        assert frozen - vent.found - 100 <= gc.get_freeze_count() <= frozen  # the living frozen again
        again = POLICY.vent()
        assert (again.found, again.kinds) == (0, ())
        assert POLICY.vents == vents + 2
        assert len(kept) == 1_000
    finally:
        POLICY.release(at_collection=True)
    assert POLICY.vent().found == 0  # not held: nothing to vent, nothing unfrozen


def _cycles_made_and_dropped(count: int) -> list[Any]:
    """Weak references to ``count`` reference cycles made here and dropped on return (many allocations between)."""
    import weakref

    cycles = [_Cyclic() for _ in range(count)]
    filler = [[index] for index in range(5_000)]  # collections run while the cycles live
    del filler
    return [weakref.ref(cycle) for cycle in cycles]


def test_no_freeze_inside_unfrozen_blocks_and_their_cycles_are_collected_after() -> None:
    """Every collection freezing its survivors (``young``): cycles alive at a collection are frozen, and only a
    vent gets them back. Made inside ``unfrozen`` they are not; when the block ends, the generations its objects
    were promoted to are collected, which frees them, and what lives is frozen as usual."""
    POLICY.acquire(at_collection=False, young=True)
    try:
        POLICY.settle()
        frozen = _cycles_made_and_dropped(20)
        assert all(ref() is not None for ref in frozen)  # frozen alive: no collection reclaims them
        with POLICY.unfrozen():
            freezes = POLICY.freezes
            kept = [[index] for index in range(3_000)]
            spared = _cycles_made_and_dropped(20)
            assert POLICY.freezes == freezes
        assert all(ref() is None for ref in spared)
        assert POLICY.freezes > freezes  # the collection at the block's end froze what lives
        assert _frozen(kept) == len(kept)
        assert POLICY.vent().found >= 20  # the cycles frozen before, alive at a young collection
        assert all(ref() is None for ref in frozen)
    finally:
        POLICY.release(at_collection=False, young=True)
