"""A forecast under a CPU budget covers as far as its runs got, and an operation with no job left to start
finishes when its running jobs end (the same time a longer run simulates)."""

from __future__ import annotations

import gc
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from pooltree.config.pool_trees import parse_pool_trees
from pooltree.errors import ConfigError
from pooltree.forecast import run as run_module
from pooltree.forecast.durations import DurationSettings
from pooltree.forecast.run import ForecastSettings, forecast, run_seed
from pooltree.forecast.state import ClusterState, NodeState, OperationState, RunningJob, TaskState
from pooltree.forecast.stopped import TreesCopy
from pooltree.resources import vector
from tests.forecast.test_forecast_fork import project_state

JOB = vector(user_slots=1, cpu=1, memory=2 * 2**30)


def draining_state() -> ClusterState:
    """``tail-1``'s ten jobs all run (none pending); ``queued-1`` waits for the whole cluster."""
    project = project_state()
    nodes = (NodeState("node-0", np.array(vector(user_slots=10, cpu=10, memory=64 * 2**30))),)
    running = tuple(RunningJob("node-0", 100.0 + 10 * i) for i in range(10))
    tail = OperationState(
        "tail-1",
        "bob",
        "vanilla",
        {"pool": "project-batch"},
        "physical",
        "project-batch",
        0.0,
        (TaskState("main", JOB, 0, running, 40, durations=(900.0, 1000.0, 1100.0)),),
        first_job_time=100.0,
    )
    queued = OperationState(
        "queued-1",
        "bob",
        "vanilla",
        {"pool": "project-batch"},
        "physical",
        "project-batch",
        500.0,
        (TaskState("main", vector(user_slots=10, cpu=10, memory=2 * 2**30), 1),),
    )
    return ClusterState(620.0, project.pool_trees, "physical", nodes, (tail, queued))


def test_a_spent_budget_shortens_the_horizon_for_every_run():
    full = forecast(project_state(), ForecastSettings(seeds=2, horizon=900.0))
    assert full.horizon == 900.0 and full.operations["adhoc-1"].start["p50"] is not None
    short = forecast(
        project_state(), ForecastSettings(seeds=2, horizon=900.0, cpu_budget=1e-6, hand_over=False)
    )
    # each run stops at its first check (one fair-share period in): adhoc-1 starts after that in every run
    assert short.horizon < 5.0
    assert short.operations["adhoc-1"].start == {"p10": None, "p50": None, "p90": None}


def test_finish_from_running_jobs_equals_the_simulated_finish():
    """Past a short horizon, ``tail-1`` finishes when its last drawn job end comes: the finish a run of the
    whole horizon simulates with the same seed."""
    state = draining_state()
    short = forecast(state, ForecastSettings(seeds=3, horizon=10.0))
    full = forecast(state, ForecastSettings(seeds=3, horizon=20_000.0))
    tail = short.operations["tail-1"].finish
    assert tail["p50"] is not None and tail["p50"] > state.now + 10.0
    assert tail == full.operations["tail-1"].finish
    # queued-1 needs the whole node: it starts after tail-1, past the short horizon (unknown), within the long
    assert short.operations["queued-1"].start["p50"] is None
    assert full.operations["queued-1"].start["p50"] is not None


def queue_state() -> ClusterState:
    """Pool ``queue`` runs one operation at a time: ``first`` runs (4 of its 12 jobs pending), ``second`` waits
    in the queue behind it; a third operation ``other`` in another pool needs the node's two free slots."""
    trees = parse_pool_trees(
        {"physical": {"pools": {"queue": {"max_running_operation_count": 1}, "other": {}}}}
    )
    nodes = (NodeState("node-0", np.array(vector(user_slots=10, cpu=10, memory=64 * 2**30))),)
    running = tuple(RunningJob("node-0", 900.0 + 10 * i) for i in range(8))
    durations = (300.0,) * 5

    def op(name: str, pool: str, task: TaskState, **extra: object) -> OperationState:
        return OperationState(
            name, "bob", "vanilla", {"pool": pool}, "physical", pool, 800.0, (task,), **extra
        )

    return ClusterState(
        1000.0,
        trees,
        "physical",
        nodes,
        (
            op(
                "first",
                "queue",
                TaskState("main", JOB, 4, running, 5, durations=durations),
                first_job_time=900.0,
            ),
            op("second", "queue", TaskState("main", JOB, 6, durations=durations), state="pending"),
        ),
    )


def test_the_hand_over_lets_the_queue_run_as_the_simulator_does():
    """Stopped by the budget at once, the run is carried on by the hand-over (the same seed keeps its draws):
    ``second`` leaves the pool's queue when ``first`` finishes, through the tree runtime's own unregistration,
    close to when the simulator itself starts it."""
    state = queue_state()
    exact = DurationSettings(min_sigma=0.0)  # equal run times: both draw the same
    simulated = forecast(state, ForecastSettings(seeds=1, horizon=5000.0, durations=exact)).operations
    at_once = ForecastSettings(
        seeds=1, horizon=5000.0, durations=exact, cpu_budget=60.0, simulation_share=1e-7
    )
    handed = forecast(state, at_once)
    assert handed.simulated is not None and handed.simulated < 5.0 and handed.horizon == 5000.0
    assert handed.tail_jobs > 0
    for name in ("first", "second"):
        assert simulated[name].finish["p50"] is not None
    first_finish = simulated["first"].finish["p50"]
    second_start = simulated["second"].start["p50"]
    assert second_start is not None and first_finish is not None and second_start >= first_finish - 2.5
    tail = handed.operations
    # the simulator starts jobs at heartbeats (1 s) after fair-share updates (1 s): the hand-over at once
    assert abs(tail["first"].finish["p50"] - first_finish) <= 2.5
    assert abs(tail["second"].start["p50"] - second_start) <= 2.5
    assert tail["second"].finish["p50"] is not None


def test_other_seeds_redraw_the_running_jobs_ends():
    """Several seeds from one stopped simulation: the hand-overs of other seeds draw the running jobs' ends anew
    (conditioned on the time they ran), so the range is not one point."""
    state = queue_state()
    handed = forecast(
        state, ForecastSettings(seeds=6, horizon=5000.0, cpu_budget=60.0, simulation_share=1e-7)
    )
    assert handed.simulated is not None and handed.simulated < 5.0
    start = handed.operations["second"].start
    assert start["p10"] is not None and start["p90"] is not None
    assert start["p90"] - start["p10"] > 2 * handed.resolution
    assert start["p10"] >= state.now


def test_integral_volumes_are_carried_into_the_fork():
    """A burst pool's accumulated volume continues in the fork from the cluster's last update; without it the
    fork's pool would start from nothing."""
    from pooltree.forecast.fork import carry_integral, fork, integral_of
    from pooltree.forecast.state import IntegralState
    from pooltree.resources import CPU
    from pooltree.sim import Simulation

    trees = parse_pool_trees(
        {
            "physical": {
                "pools": {
                    "burst": {
                        "integral_guarantees": {
                            "guarantee_type": "burst",
                            "burst_guarantee_resources": {"cpu": 5},
                            "resource_flow": {"cpu": 1},
                        }
                    },
                    "other": {},
                }
            }
        }
    )
    nodes = (NodeState("node-0", np.array(vector(user_slots=10, cpu=10, memory=64 * 2**30))),)
    waiting = OperationState(
        "bursty",
        "bob",
        "vanilla",
        {"pool": "burst"},
        "physical",
        "burst",
        990.0,
        (TaskState("main", JOB, 3),),
    )
    carried = IntegralState(995.0, {"burst": tuple(vector(cpu=100.0))}, {"burst": 0.0})
    volumes = []
    for integral in ({"physical": carried}, {}):
        state = ClusterState(1000.0, trees, "physical", nodes, (waiting,), integral=integral)
        simulation = Simulation(fork(state, 0, horizon=1.0, durations=DurationSettings()), until=0.0)
        carry_integral({name: tree.core for name, tree in simulation.trees.items()}, state)
        simulation.run()
        found = integral_of(simulation.trees["physical"].core)
        volumes.append(0.0 if found is None else found.volumes.get("burst", (0.0,) * 5)[CPU])
    with_volume, without = volumes
    assert with_volume >= 100.0  # the cluster's 100 cpu·s, plus 5 s of flow since its last update
    assert without < 10.0


def test_a_simulation_over_its_share_leaves_the_hand_overs_theirs():
    """The simulator's setup cannot be interrupted and may use more than its share; the hand-overs still get
    theirs, so the forecast reaches the horizon (adhoc-1 starts within it: at the first job end of batch-1, the
    hand-over having no preemption)."""
    tiny = ForecastSettings(seeds=4, horizon=1800.0, cpu_budget=0.5, simulation_share=0.005)
    found = forecast(project_state(), tiny)
    assert found.simulated is not None and found.simulated < 5.0
    assert found.horizon == 1800.0
    assert found.operations["adhoc-1"].start["p50"] is not None


def test_the_hand_over_preempts_for_a_starving_operation():
    """The project example stopped at once: adhoc-1's starvation timeout passes in the hand-over, which preempts
    batch-1's newest jobs for it as the simulator's core does (it used to wait for batch-1's jobs to end, ~340 s
    late)."""
    state = project_state()
    simulated = forecast(state, ForecastSettings(seeds=3, horizon=1800.0)).operations["adhoc-1"]
    handed = forecast(
        state, ForecastSettings(seeds=3, horizon=1800.0, cpu_budget=60.0, simulation_share=1e-7)
    )
    assert handed.simulated is not None and handed.simulated < 5.0
    adhoc = handed.operations["adhoc-1"]
    assert simulated.start["p50"] is not None and adhoc.start["p50"] is not None
    assert abs(adhoc.start["p50"] - simulated.start["p50"]) <= 5.0
    assert [item["operation_id"] for item in adhoc.preempts] == ["batch-1"]
    assert adhoc.preempts[0]["share_of_runs"] == 1.0 and adhoc.preempts[0]["jobs_p50"] > 0


def test_hand_over_seeds_draw_their_own_run_times_as_simulated_seeds_do():
    """Two completed jobs say little about a task's median: each simulated seed draws its own. Seeds handed over
    from one stopped simulation draw theirs too, so their finishes spread as the simulated seeds' do (drawing
    only the single jobs anew, they spread about half as much)."""
    trees = parse_pool_trees({"physical": {"pools": {"alone": {}}}})
    nodes = (NodeState("node-0", np.array(vector(user_slots=40, cpu=40, memory=256 * 2**30))),)
    solo = OperationState(
        "solo",
        "bob",
        "vanilla",
        {"pool": "alone"},
        "physical",
        "alone",
        0.0,
        (TaskState("main", JOB, 30, durations=(300.0, 600.0)),),
    )
    state = ClusterState(1000.0, trees, "physical", nodes, (solo,))

    def spread(settings: ForecastSettings) -> float:
        logs = []
        for first in range(0, 96, 12):
            found = forecast(state, replace(settings, first_seed=first, seeds=12)).operations["solo"]
            assert found.finish["p10"] is not None and found.finish["p90"] is not None
            logs.append(np.log(found.finish["p90"] - state.now) - np.log(found.finish["p10"] - state.now))
        return float(np.median(logs))

    simulated = spread(ForecastSettings(horizon=20_000.0))
    handed = spread(ForecastSettings(horizon=20_000.0, cpu_budget=60.0, simulation_share=1e-7))
    assert 0.75 * simulated < handed < 1.33 * simulated, (simulated, handed)


def test_each_hand_over_gets_its_own_trees_with_the_specs_shared():
    """The stopped run's pool trees are copied for each hand-over (it unregisters operations in its own copy);
    the operations' frozen specs are shared, not copied."""
    state = queue_state()
    run = run_seed(state, 0, ForecastSettings(seeds=1, horizon=5000.0), deadline=0.0)
    assert run.simulation is not None
    original = run.simulation.trees["physical"].core.pool_tree
    copies = TreesCopy({"physical": original})
    one, other = copies.load()["physical"], copies.load()["physical"]
    assert one is not original and one is not other
    assert set(one.operations) == set(original.operations) == {"first", "second"}
    one.unregister_operation("first")
    assert "first" not in one.operations and "first" in other.operations and "first" in original.operations
    spec = original.operation("second").spec
    assert (
        spec is not None and one.operation("second").spec is spec and other.operation("second").spec is spec
    )


def test_the_collector_waits_for_the_forecast_and_collects_once_after(monkeypatch: pytest.MonkeyPatch):
    """While a forecast runs the cyclic collector is off and what existed before is frozen; after it, the
    collector is on again, nothing stays frozen, and the forecast's cyclic garbage is gone. A caller that turned
    the collector off keeps it off."""
    state = queue_state()
    seen: list[tuple[bool, int]] = []
    original = run_module._runs

    def runs(*args: Any, **kwargs: Any) -> Any:
        seen.append((gc.isenabled(), gc.get_freeze_count()))
        return original(*args, **kwargs)

    monkeypatch.setattr(run_module, "_runs", runs)
    settings = ForecastSettings(seeds=2, horizon=5000.0, cpu_budget=60.0, simulation_share=1e-7)
    assert gc.isenabled()
    gc.collect()  # garbage made before the forecast stays frozen with what existed (collected after it)
    forecast(state, settings)
    assert not seen[0][0] and seen[0][1] > 0
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert gc.collect() == 0  # the forecast's cycles were collected already
    gc.disable()
    try:
        forecast(state, settings)
        assert not gc.isenabled() and seen[1] == (False, 0)
    finally:
        gc.enable()


def test_the_one_collection_walks_only_what_the_forecast_made():
    """The simulator's run loop holds the process's collector policy too, and its last holder unfreezes every
    object: the forecast holds the policy while it runs, so what existed before it stays frozen until the one
    collection after the runs is done (before, the first simulated run unfroze it, and that collection walked the
    whole process)."""
    state = queue_state()
    at_collection: list[int] = []

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info.get("generation") == 2:
            at_collection.append(gc.get_freeze_count())

    existing = len(gc.get_objects())
    gc.callbacks.append(callback)
    try:
        forecast(state, ForecastSettings(seeds=2, horizon=5000.0))
    finally:
        gc.callbacks.remove(callback)
    assert at_collection, "no full collection after the forecast"
    assert at_collection[0] >= 0.9 * existing, (at_collection, existing)
    assert gc.get_freeze_count() == 0


def test_a_budget_left_over_pays_more_runs_up_to_max_seeds():
    """Runs cost a few milliseconds here: a budget of seconds pays every seed up to ``max_seeds``; without a
    budget exactly ``seeds`` run."""
    more = forecast(project_state(), ForecastSettings(seeds=2, horizon=900.0, cpu_budget=30.0, max_seeds=6))
    assert more.seeds == 6 and more.horizon == 900.0
    assert more.simulated == 900.0  # a run that reaches the horizon within its share does not give up
    plain = forecast(project_state(), ForecastSettings(seeds=2, horizon=900.0, max_seeds=6))
    assert plain.seeds == 2
    with pytest.raises(ConfigError, match="max_seeds"):
        ForecastSettings(seeds=4, max_seeds=3)


@pytest.mark.parametrize("most", [None, 5])
def test_more_runs_are_hand_overs_of_the_stopped_simulation(
    monkeypatch: pytest.MonkeyPatch, most: int | None
):
    """The simulator's share is spent before its first check (a tiny share): it gives up there, and every run,
    the ``seeds`` ones and any further ones (``max_seeds``), is a hand-over of that one simulation (they share
    only its first fair-share period); the forecast still reaches the horizon."""
    simulations: list[int] = []
    real = run_module._simulated

    def counted(inputs: Any, seed: int, *rest: Any) -> Any:
        simulations.append(seed)
        return real(inputs, seed, *rest)

    monkeypatch.setattr(run_module, "_simulated", counted)
    settings = ForecastSettings(
        seeds=2, horizon=1800.0, cpu_budget=5.0, simulation_share=0.005, max_seeds=most
    )
    found = forecast(project_state(), settings)
    assert simulations == [0]
    assert found.simulated is not None and found.simulated <= 2.0
    assert found.seeds == (most or 2) and found.horizon == 1800.0


def test_a_simulation_gives_up_when_it_cannot_reach_the_horizon():
    """At its first check a simulation gives up only if its deadline passed (its setup took its share); later,
    once it has spent half its share, when its cost per simulated second since that check, carried to the
    horizon, is more than `GIVE_UP_OVER` times the CPU left, and at once when it is more than
    `GIVE_UP_AT_ONCE` times."""
    late = run_module._GiveUp(3600.0, 8.0)
    assert late.cannot_reach(1.0, 12.5, 12.0)
    slow = run_module._GiveUp(3600.0, 8.0)  # a share of 4 s
    assert not slow.cannot_reach(1.0, 9.0, 12.0)
    # 0.003 s per simulated second: 10.8 s to go with 2.99 s left (3.6 times), a quarter of the share spent
    assert not slow.cannot_reach(2.0, 9.003, 12.0)
    assert not slow.cannot_reach(1.0, 10.05, 12.0)  # no simulated time since the first check: no rate yet
    assert slow.cannot_reach(11.0, 10.05, 12.0)  # half spent: 0.105 s per second, 376 s to go, 1.95 s left
    cheap = run_module._GiveUp(3600.0, 8.0)
    assert not cheap.cannot_reach(1.0, 9.0, 12.0)
    # half spent at 0.00041 s per simulated second: 1.45 s to go with 1.9 s left (twice over: still simulating)
    assert not cheap.cannot_reach(2500.0, 10.1, 12.0)
    assert cheap.cannot_reach(2500.0, 11.8, 12.0)  # 0.0011 s per second: 1.2 s to go with 0.2 s left


def test_a_simulation_far_out_of_reach_gives_up_at_once():
    """A simulation whose projection is more than `GIVE_UP_AT_ONCE` times the CPU left gives up at its second
    check, before half its share is spent: what it would simulate until then is shared by every hand-over of
    it (at 200 nodes 11-22 s, where the runs then agreed on every job end; the project example's runs, which
    reach the horizon, project at most 3 times the CPU left)."""
    far = run_module._GiveUp(3600.0, 8.0)  # a share of 4 s
    assert not far.cannot_reach(1.0, 9.0, 12.0)
    assert far.cannot_reach(
        2.0, 9.1, 12.0
    )  # 0.1 s per simulated second: 360 s to go with 2.9 s left, 124 times


def test_a_cheap_simulation_does_not_give_up_on_its_first_seconds():
    """The seeds' project example until its operations started (the back-test's runs) costs a few hundredths of
    a second per run; its first seconds, with every job starting, cost more per simulated second than the rest.
    Under a budget whose share per run is several times that, every run is simulated until the starts (judged on
    its first two seconds alone, each gave up there, and the hand-over's coarser preemption put 35% of the
    back-test's starts after p90)."""
    found = forecast(
        project_state(),
        ForecastSettings(seeds=8, horizon=1800.0, cpu_budget=5.0, max_seeds=8),
        starts_only=True,
    )
    assert found.simulated == 1800.0 and found.seeds == 8


def test_a_further_run_that_falls_short_is_left_out(monkeypatch: pytest.MonkeyPatch):
    """A run after ``seeds`` whose hand-over did not reach what the others reached would shorten the forecast's
    horizon for every run: it is left out instead."""
    real = run_module._tail

    def short_after_two(inputs: Any, base: Any, seed: int, *rest: Any) -> Any:
        run = real(inputs, base, seed, *rest)
        if seed >= 2:
            run.tail_reached = 10.0
        return run

    monkeypatch.setattr(run_module, "_tail", short_after_two)
    settings = ForecastSettings(seeds=2, horizon=1800.0, cpu_budget=5.0, simulation_share=0.005, max_seeds=5)
    found = forecast(project_state(), settings)
    assert found.seeds == 2 and found.horizon == 1800.0
