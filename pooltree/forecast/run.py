"""Run a cluster state forward over several seeds and sum the runs up as ranges per operation.

Each seed is one simulator run of the fork (`pooltree.forecast.fork`) with the same scheduling core the live
service runs. From every run the forecast keeps, per operation, when its first job started (a job placed at the
fork counts as started at its real start), when it finished (None: not within the horizon), and whose jobs were
preempted for it. Over the seeds: start and finish as p10 / p50 / p90 (linear interpolation between the sorted
runs; a run where it did not happen within the horizon counts as later than any time, so a percentile that
reaches such a run is None: "after the horizon"; p10 and p90 are moved out by one heartbeat plus one fair-share
period, the fork's timing resolution against the cluster's own phases), and the operations whose jobs were preempted for it in how
many runs. Everything is a pure function of the state and the settings, except where ``cpu_budget`` is set: then
each run stops when its share of the budget is spent, and how far the runs got depends on the machine.

**Budget.** With ``cpu_budget`` the runs share that many CPU seconds: each stops once it used its share (the budget
left over the runs left). A stopped run is carried on to the horizon by the capacity hand-over
(`pooltree.forecast.tail`, a coarser model; ``Forecast.simulated`` says how far the simulator itself got). Without
the hand-over the forecast covers as far as the shortest run got (``Forecast.horizon``; later starts and finishes
count as "after the horizon" in every run, so runs that got further do not bias the range).

**More runs** (``max_seeds``). The ranges are a statement about one more run from a handful of them (`ranges`); with
4 runs the waits' spread is known poorly and the prediction interval is wide, with 16-32 it is close to the
model's own quantiles. Under a budget left over after the ``seeds`` runs, more seeds run, up to ``max_seeds``,
while the budget left pays one more as dear as the dearest `MORE_RUN_MARGIN` times over (each further run leaves
`MORE_RUN_SHARE` of the budget for its summing up). Hand-overs of one stopped simulation share what it simulated
(every start within its simulated part is the same in all of them): a dozen hand-overs of a simulation that got
30 s in put every operation starting in those 30 s at one time, and the range there collapsed (200-node
back-test, 4 runs + up to 28 such hand-overs: 77.3% inside against 78.0% with 4 runs). So a simulation under a budget gives up as soon as it cannot reach the horizon within its share (`_GiveUp`: at its
first check when its setup alone took the share, as at 1,000 nodes), and every further run, the ``seeds`` ones
too, is a hand-over of it: they share one fair-share period or a few, and are nearly independent (before, whether
the next seed was simulated anew was decided on the clock, and one that was got 20-30 s in and took the budget of
the hand-overs after it: at 1,000 nodes 2 of 6 refreshes of the live default covered only 1,900-2,200 s). A simulation that got further before the
budget stopped it (one that looked as if it would reach the horizon) is replaced for the further runs by one more
simulation stopped at its first check. A further run that covers less than the others is left out.

**Finishes past the simulated part.** An operation whose every remaining job is running when a run stops (no job
pending, no gang) finishes in that run when its last running job ends: the end each job drew when it started. This
assumes those jobs are neither preempted nor failed afterwards (the same assumption the simulated part makes about
failures); it lets a finish be known past the simulated horizon.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pooltree.config import OperationSpec
from pooltree.errors import ConfigError
from pooltree.forecast.arrivals import Arrivals, ArrivalSettings, is_arrival
from pooltree.forecast.durations import DurationFit, DurationSettings
from pooltree.forecast.fork import carry_integral, duration_fits, fork, seed_distributions
from pooltree.forecast.ranges import QUANTILES, prediction_range, quantile
from pooltree.forecast.state import ClusterState
from pooltree.forecast.stopped import StoppedRun
from pooltree.forecast.tail import hand_over
from pooltree.gc_policy import survivors_frozen
from pooltree.sim.engine import Simulation
from pooltree.sim.scenario import SimOperation


@dataclass(frozen=True)
class ForecastSettings:
    """How far and how many times the forecast runs the cluster forward."""

    seeds: int = 8
    horizon: float = 6 * 3600.0
    """Simulated seconds each run covers; later starts and finishes are reported as "after the horizon"."""
    durations: DurationSettings = field(default_factory=DurationSettings)
    first_seed: int = 0
    """Runs use seeds ``first_seed .. first_seed + seeds - 1`` (a back-test keeps them apart from the seed of the
    recorded run: the simulator derives node heartbeat phases from the seed)."""
    fair_share_update_period: float | None = None
    """The fork's fair-share period (None: the cluster's). A longer one costs less per simulated hour; starts
    move by up to one period."""
    cpu_budget: float | None = None
    """CPU seconds all runs together may take (None: every run covers ``horizon``); see the module docstring."""
    simulation_share: float = 0.6
    """Share of ``cpu_budget`` the simulator's runs may use; the hand-overs use the rest."""
    hand_over: bool = True
    """A run stopped by the budget is carried to the horizon by the capacity hand-over (`pooltree.forecast.tail`);
    False: what it did not simulate is "after the horizon"."""
    arrivals: ArrivalSettings = field(default_factory=ArrivalSettings)
    """Submissions to come, drawn per seed from the state's submission history (`pooltree.forecast.arrivals`)."""
    max_seeds: int | None = None
    """Runs at most under ``cpu_budget``: after the ``seeds`` runs, more seeds while the budget left pays them
    (None: ``seeds``). See "More runs" in the module docstring."""

    def __post_init__(self) -> None:
        period = self.fair_share_update_period
        if period is not None and not 0.01 <= period <= 600:
            raise ConfigError(
                "forecast.fair_share_update_period", f"must be seconds in [0.01, 600], got {period!r}"
            )
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or not 1 <= self.seeds <= 64:
            raise ConfigError("forecast.seeds", f"must be an integer in [1, 64], got {self.seeds!r}")
        if not math.isfinite(self.horizon) or not 0 < self.horizon <= 30 * 86400:
            raise ConfigError("forecast.horizon", f"must be seconds in (0, 30 days], got {self.horizon!r}")
        if not 0 < self.simulation_share <= 1:
            raise ConfigError(
                "forecast.simulation_share", f"must be in (0, 1], got {self.simulation_share!r}"
            )
        budget = self.cpu_budget
        if budget is not None and (not math.isfinite(budget) or not 0 < budget <= 3600):
            raise ConfigError("forecast.cpu_budget", f"must be CPU seconds in (0, 3600], got {budget!r}")
        most = self.max_seeds
        if most is not None and (
            isinstance(most, bool) or not isinstance(most, int) or not self.seeds <= most <= 256
        ):
            raise ConfigError(
                "forecast.max_seeds", f"must be an integer in [seeds ({self.seeds}), 256], got {most!r}"
            )

    @property
    def most_seeds(self) -> int:
        """Runs at most (``max_seeds``; without a CPU budget, exactly ``seeds``)."""
        if self.cpu_budget is None or self.max_seeds is None:
            return self.seeds
        return self.max_seeds


@dataclass
class SeedRun:
    """What one run saw (simulated seconds from the fork)."""

    first_start: dict[str, float] = field(default_factory=dict)
    finish: dict[str, float] = field(default_factory=dict)
    preempted_for: dict[str, Counter[str]] = field(default_factory=dict)
    """Preemptor operation → victim operation → jobs preempted for it."""
    events: int = 0
    reached: float = math.inf
    """Simulated seconds the run covered (less than the horizon when its CPU budget ran out)."""
    finished_after: set[str] = field(default_factory=set)
    """Operations whose finish comes from their running jobs' drawn ends, past where the run stopped."""
    handed_over: bool = False
    """The run was carried from ``reached`` to the horizon by the capacity hand-over."""
    tail_jobs: int = 0
    tail_reached: float = math.inf
    """Where the hand-over stopped when its CPU deadline passed (inf: at the horizon)."""
    simulation: Simulation | None = None
    """The stopped simulation, kept while hand-overs continue it."""
    gave_up: bool = False
    """The simulator stopped it as soon as it could not reach the horizon within its share (`_GiveUp`): its
    hand-overs share only what it simulated by then."""
    stopped: StoppedRun | None = None
    """The stopped simulation read once for its hand-overs, with its pool trees pickled when it stopped (each
    hand-over unregisters operations in its own copy)."""

    def covered(self) -> float:
        """Simulated seconds this run answers for."""
        return self.tail_reached if self.handed_over else self.reached


SUMMARY_SHARE = 0.12
"""Share of ``cpu_budget`` kept for what comes after the runs: summing them up per operation (~0.1 s at 2,200
operations and 4 runs) and the one garbage collection of what the forecast made (`_collected_once`, ~0.4 s
there). The runs' deadlines used to reach the budget's end, and a refresh took that much more than its budget."""


@dataclass
class _GiveUp:
    """Whether a simulation can still reach ``horizon`` within its deadline, asked at each of its checks: not when
    its first check comes after the deadline (its setup alone took the share: 0.7-0.9 s at 1,000 nodes and 2,200
    operations), nor when it has spent half its share and its cost per simulated second since its first check,
    carried to the horizon, is more than `GIVE_UP_OVER` times the CPU left. The first seconds, with every queued
    job starting, cost more per second than later ones: judged on them alone, the seeds' project example's runs
    (0.02 s each, a share of 0.33 s) gave up after two seconds, and the hand-over's coarser preemption put 35% of
    its starts after p90 (100% inside when simulated whole). Where a run will not reach the horizon anyway, what
    it simulates further is shared by every hand-over of it, and they agree where the cluster need not (see
    "More runs"). So a simulation far out of reach, whose cost per simulated second since its first check,
    carried to the horizon, is more than `GIVE_UP_AT_ONCE` times the CPU left, gives up at once, without waiting
    for half its share: at 200 nodes such a run got 11-22 s in (its projection 90-240 times the CPU left from
    its second check on), and a job that ended in those seconds in the cluster but not in the one simulation
    ended late in every run (the head of a pool's queue: p10 16% later than the ideal forecast's,
    `bench/forecast_ideal.py`); the project example's runs, which reach the horizon, project at most 3 times."""

    horizon: float
    started: float
    """CPU clock when the run began (before its setup)."""
    first: tuple[float, float] | None = None
    """(simulated seconds, CPU clock) at the first check."""

    def cannot_reach(self, now: float, clock: float, deadline: float) -> bool:
        if self.first is None:
            self.first = (now, clock)
            return clock > deadline
        since, cpu = self.first
        if now <= since:
            return False
        needed = (clock - cpu) / (now - since) * (self.horizon - now)
        if needed > GIVE_UP_AT_ONCE * (deadline - clock):
            return True
        if clock - self.started < (deadline - self.started) / 2:
            return False
        return needed > GIVE_UP_OVER * (deadline - clock)


GIVE_UP_OVER = 2.0
GIVE_UP_AT_ONCE = 20.0


class _AllStarted(Exception):
    """Raised from the progress callback: every watched operation has started (the run may stop)."""


class _OutOfBudget(Exception):
    """Raised from the progress callback: the run used its share of the CPU budget."""


@dataclass(frozen=True)
class OperationForecast:
    """One operation's forecast: absolute times on the state's clock (None: after the horizon)."""

    operation_id: str
    started: bool
    """Its first job had started when the state was taken (``start`` is then that time, in every run)."""
    start: dict[str, float | None]
    finish: dict[str, float | None]
    preempts: tuple[dict[str, Any], ...]
    """Operations whose jobs are expected to be preempted for it: id, median jobs, share of runs."""
    durations: dict[str, dict[str, Any]]
    """Per task: the assumed median run time, spread, observations and where they came from."""


@dataclass(frozen=True)
class Forecast:
    """The forecast of a cluster state: per operation, and how it was made."""

    now: float
    horizon: float
    """Simulated seconds every run covered (the settings' horizon, or less when the CPU budget ran out first)."""
    seeds: int
    """Runs summed up (``settings.seeds``, or more up to ``max_seeds`` when the CPU budget paid them)."""
    operations: dict[str, OperationForecast]
    events: int
    """Simulator events processed over all seeds (the work done; -1 per run stopped early)."""
    resolution: float = 0.0
    """Seconds the p10 and p90 of starts (and finishes) were moved out by (see the module docstring)."""
    simulated: float | None = None
    """Simulated seconds every run covered with the simulator (below ``horizon``: the rest by the hand-over)."""
    tail_jobs: int = 0
    """Jobs the capacity hand-over started over all runs."""
    arrivals: dict[str, Any] = field(default_factory=dict)
    """What the runs assumed about submissions to come (`Arrivals.assumption`; empty: none drawn)."""


def run_seed(
    state: ClusterState,
    seed: int,
    settings: ForecastSettings,
    *,
    specs: MutableMapping[tuple[str, int], OperationSpec] | None = None,
    fits: dict[tuple[str, str], DurationFit] | None = None,
    starts_of: Iterable[str] | None = None,
    deadline: float | None = None,
    arrivals: Sequence[SimOperation] = (),
    give_up: bool = False,
) -> SeedRun:
    """One run of the fork with ``seed`` (and ``arrivals``, its draw of submissions to come); with ``starts_of`` it
    stops once each of those operations started (their finishes, and everything after, are then not known); with
    ``deadline`` (``time.process_time()``) it stops when that moment passed; with ``give_up`` also as soon as it
    cannot reach the horizon by then (`_GiveUp`; ``SeedRun.gave_up``)."""
    began = time.process_time()
    scenario = fork(
        state,
        seed,
        horizon=settings.horizon,
        durations=settings.durations,
        specs=specs,
        fits=fits,
        update_period=settings.fair_share_update_period,
        arrivals=arrivals,
    )
    run = SeedRun()
    first_start = run.first_start
    preempted_for = run.preempted_for

    def sink(event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "allocation_started":
            first_start.setdefault(event["operation_id"], event["time"])
        elif kind == "allocation_preempted":
            preemptor = event.get("preemptor_operation_id")
            if preemptor is not None:
                preempted_for.setdefault(preemptor, Counter())[event["operation_id"]] += 1

    if not scenario.operations or not state.nodes:
        return run
    watch = set(starts_of) if starts_of is not None else None
    checked = watch is not None or deadline is not None

    hopeless = _GiveUp(settings.horizon, began) if give_up and deadline is not None else None

    def check(now: float, _horizon: float, done: int, total: int) -> None:
        if watch is not None and watch.issubset(first_start):
            raise _AllStarted
        if deadline is not None:
            clock = time.process_time()
            if hopeless is not None and done < total and hopeless.cannot_reach(now, clock, deadline):
                run.gave_up = True
                raise _OutOfBudget
            if clock > deadline:
                raise _OutOfBudget

    simulation = Simulation(
        scenario,
        seed=seed,
        until=settings.horizon,
        event_sink=sink,
        progress=check if checked else None,
        progress_interval=scenario.scheduler.fair_share_update_period if checked else None,
    )
    carry_integral({name: tree.core for name, tree in simulation.trees.items()}, state)
    try:
        result = simulation.run()
        run.events = int(result.stats.get("events", 0))
    except _AllStarted:
        run.events = -1  # stopped early: the engine's counters are not summed up
    except _OutOfBudget:
        run.events = -1
        run.reached = simulation.now
    for op in simulation.ops:
        if op.finish_time is not None and op.state == "completed":
            run.finish[op.spec.id] = op.finish_time
    _finish_from_running_jobs(simulation, run)
    if run.reached < settings.horizon and settings.hand_over:
        run.simulation = simulation
    return run


@dataclass(frozen=True)
class _Inputs:
    """What every run of one forecast starts from (`_runs`, `_simulated`, `_more_runs`, `_tail`)."""

    state: ClusterState
    settings: ForecastSettings
    specs: MutableMapping[tuple[str, int], OperationSpec]
    """Parsed specs by (operation id, revision), kept by the worker across refreshes."""
    fits: dict[tuple[str, str], DurationFit]
    starts_of: Sequence[str] | None
    """``starts_only``: the operations whose starts are watched (a run stops once all started)."""
    arrivals: Arrivals


def _tail(inputs: _Inputs, base: SeedRun, seed: int, deadline: float | None, last_use: bool) -> SeedRun:
    """``base`` (a run the budget stopped) carried to the horizon by the capacity hand-over with ``seed``: its own
    seed continues its draws; another seed draws its own run-time distributions from ``fits`` and the running jobs'
    ends anew. ``last_use``: the hand-over may
    change the simulation's own pool trees (no other hand-over follows from it)."""
    state, settings = inputs.state, inputs.settings
    simulation = base.simulation
    stopped = base.stopped
    assert simulation is not None and stopped is not None
    redraw = seed != simulation.seed
    run = SeedRun(
        dict(base.first_start),
        {} if redraw else dict(base.finish),
        {preemptor: Counter(victims) for preemptor, victims in base.preempted_for.items()},
        base.events if not redraw else 0,
        base.reached,
        set() if redraw else set(base.finished_after),
        handed_over=True,
    )
    if redraw:  # what the simulated part finished stays finished; the drawn ends past it are drawn anew
        run.finish = {
            operation_id: when
            for operation_id, when in base.finish.items()
            if operation_id not in base.finished_after
        }
    # submissions still to come: the simulation's own (its seed), or the new seed's draw past where it stopped
    future = (
        [op for op in inputs.arrivals.draw(seed, settings.horizon) if op.submit_time > simulation.now]
        if redraw
        else [op.spec for op in simulation.ops if op.state == "submitted"]
    )
    found = hand_over(
        stopped,
        {name: tree.core.pool_tree for name, tree in simulation.trees.items()}
        if last_use
        else stopped.trees.load(),
        seed,
        settings.horizon,
        lambda operation_id, at: run.first_start.setdefault(operation_id, at),
        lambda operation_id, at: run.finish.setdefault(operation_id, at),
        redraw=redraw,
        deadline=deadline,
        arrivals=future,
        on_preempt=lambda preemptor, victim: _count(run.preempted_for, preemptor, victim),
        durations=seed_distributions(state, seed, inputs.fits) if redraw else None,
    )
    run.tail_jobs = found.jobs
    run.tail_reached = found.reached
    return run


def _stopped(inputs: _Inputs, run: SeedRun) -> StoppedRun:
    """``run``'s stopped simulation read once for all its hand-overs (`pooltree.forecast.stopped`)."""
    assert run.simulation is not None
    started = set(run.first_start) | {
        op.id for op in inputs.state.operations if op.first_job_time is not None
    }
    return StoppedRun(run.simulation, started, inputs.settings.horizon)


def _count(preempted_for: dict[str, Counter[str]], preemptor: str, victim: str) -> None:
    preempted_for.setdefault(preemptor, Counter())[victim] += 1


def _finish_from_running_jobs(simulation: Simulation, run: SeedRun) -> None:
    """Operations with no job left to start finish when their last running job ends (see the module docstring)."""
    last_end: dict[str, float] = {}
    endless: set[str] = set()
    for job in simulation.jobs.values():
        operation_id = job.op.spec.id
        if job.end is None:
            endless.add(operation_id)
        else:
            last_end[operation_id] = max(last_end.get(operation_id, -math.inf), job.end)
    for op in simulation.ops:
        operation_id = op.spec.id
        controller = op.controller
        if (
            operation_id in run.finish
            or operation_id in endless
            or operation_id not in last_end
            or controller is None
            or controller.pending_allocation_count > 0
            or any(task.gang_size is not None for task in op.spec.tasks)
        ):
            continue
        run.finish[operation_id] = last_end[operation_id]
        run.finished_after.add(operation_id)


def forecast(
    state: ClusterState,
    settings: ForecastSettings | None = None,
    *,
    specs: MutableMapping[tuple[str, int], OperationSpec] | None = None,
    only: Iterable[str] | None = None,
    starts_only: bool = False,
    fits: Mapping[tuple[str, str], DurationFit] | None = None,
) -> Forecast:
    """Run ``state`` forward ``settings.seeds`` times and sum up every operation (or those in ``only``);
    ``starts_only``: each run stops once the operations summed up have started (finishes are then unknown: the
    back-test's mode, it compares starts); ``fits``: (operation id, task) → the run times to assume instead of
    those learned from the state (the back-test's oracle: the workload's true distributions). The cyclic garbage
    collector waits until the runs are summed up (`_collected_once`)."""
    with _collected_once() as owned:
        return _forecast(state, settings, specs, only, starts_only, fits, owned)


@contextlib.contextmanager
def _collected_once() -> Iterator[bool]:
    """The cyclic garbage collector off while a forecast runs, then one collection of what the forecast made.

    A forecast of 1,000 nodes makes about a million objects (the fork's simulation, each hand-over's trees and
    queues), and the collector's automatic full collections walked them 13-18 times per refresh: 0.6-1.0 of its 5
    CPU seconds, at moments that fell anywhere (into a hand-over's share, or after the budget's end). Now the
    objects that existed before are frozen (`gc.freeze`: not walked), and one collection after the forecast walks
    only what it made (0.35-0.4 s at that size; `SUMMARY_SHARE` of the budget is kept for it). Nothing changes
    when the caller turned the collector off itself.

    The process's collector policy (`pooltree.gc_policy`) is held meanwhile: the simulator's run loop holds it
    too, and the last holder to let it go unfreezes every object. Without this hold the first simulated run
    unfroze what existed before the forecast, and the one collection walked the whole process: in the back-test,
    whose process keeps the recorded day, ~0.5 s more per forecast, past the budget."""
    if not gc.isenabled():
        yield False
        return
    gc.freeze()
    gc.disable()
    try:
        with survivors_frozen():
            try:
                yield True
            finally:
                gc.enable()
                gc.collect()
    finally:
        gc.enable()
        gc.unfreeze()


def _forecast(
    state: ClusterState,
    settings: ForecastSettings | None,
    specs: MutableMapping[tuple[str, int], OperationSpec] | None,
    only: Iterable[str] | None,
    starts_only: bool,
    known: Mapping[tuple[str, str], DurationFit] | None,
    collect: bool,
) -> Forecast:
    settings = settings or ForecastSettings()
    specs = {} if specs is None else specs
    began = time.process_time()  # the budget covers the duration fits and the arrival model too
    fits = duration_fits(state, settings.durations) if known is None else dict(known)
    wanted = set(only) if only is not None else None
    starts_of = None
    if starts_only:
        starts_of = [op.id for op in state.operations if op.first_job_time is None]
        if wanted is not None:
            starts_of = [operation_id for operation_id in starts_of if operation_id in wanted]
    arrivals = Arrivals(state, settings.arrivals, settings.durations)
    runs = _runs(_Inputs(state, settings, specs, fits, starts_of, arrivals), began, collect)
    simulated = min([settings.horizon, *(run.reached for run in runs)])
    covered = min([settings.horizon, *(run.covered() for run in runs)])
    if covered < settings.horizon:
        _clip(runs, covered)
    # the fork's heartbeat and update phases are its own, not the cluster's: a start or finish it places at t may
    # happen up to one heartbeat and one update period earlier or later there, so the range's ends move by that
    resolution = (
        settings.fair_share_update_period or state.fair_share_update_period
    ) + state.heartbeat_period
    preempted = _preempted_by_operation(runs)
    operations = {}
    for op in state.operations:
        if wanted is not None and op.id not in wanted:
            continue
        started = op.first_job_time is not None
        if started:
            assert op.first_job_time is not None
            starts = [op.first_job_time - state.now] * len(runs)
        else:
            starts = [run.first_start.get(op.id, math.inf) for run in runs]
        finishes = [run.finish.get(op.id, math.inf) for run in runs]
        margin = 0.0 if started else resolution
        operations[op.id] = OperationForecast(
            op.id,
            started,
            _range(starts, state.now, margin, covered),
            _range(finishes, state.now, resolution, covered),
            _preempts(preempted.get(op.id, {}), len(runs)),
            {
                task.name: {
                    "median": round(fits[(op.id, task.name)].median, 3),
                    "sigma": round(fits[(op.id, task.name)].sigma, 3),
                    "observed": fits[(op.id, task.name)].count,
                    "source": fits[(op.id, task.name)].source,
                }
                for task in op.tasks
            },
        )
    return Forecast(
        state.now,
        covered,
        len(runs),
        operations,
        sum(run.events for run in runs),
        resolution,
        simulated,
        sum(run.tail_jobs for run in runs),
        arrivals.assumption() if arrivals.model.observed > 0 else {},
    )


def _runs(inputs: _Inputs, began: float, collect: bool = False) -> list[SeedRun]:
    """One run per seed. Under a budget a new simulation is started while the last one did not give up
    (`_GiveUp`), the simulator's share of the budget left per seed left is at least what the last simulation cost
    and the budget left after it still pays every seed's hand-over (as dear as the dearest so far, one more to
    spare); otherwise the last stopped simulation is handed over once more with the next seed (its running jobs'
    ends drawn anew)."""
    settings = inputs.settings
    budget = None if settings.cpu_budget is None else settings.cpu_budget * (1.0 - SUMMARY_SHARE)
    runs: list[SeedRun] = []
    simulated = (
        time.process_time() - began
    )  # the fits and the arrival model came out of the simulator's share
    last: SeedRun | None = None
    last_cost = 0.0
    tail_cost = 0.0  # the dearest hand-over so far (0: none yet)
    reserved = 0.0 if budget is None else budget * (1.0 - settings.simulation_share) / settings.seeds
    for index, seed in enumerate(range(settings.first_seed, settings.first_seed + settings.seeds)):
        left = settings.seeds - index
        if budget is None:
            runs.append(_simulated(inputs, seed, None))
            continue
        share = (budget * settings.simulation_share - simulated) / left
        # a new simulation only if it fits the simulator's share and leaves every seed left its hand-over, as dear
        # as the dearest so far, with one more to spare (their costs vary by a third): a seed simulated anew whose
        # hand-over then runs out covers less of the horizon for every seed (the forecast's is the shortest run's)
        spent = time.process_time() - began
        hand_overs = (left + 1) * max(tail_cost, reserved)
        if (
            last is None
            or last.simulation is None
            or (not last.gave_up and share >= last_cost and budget - spent - last_cost >= hand_overs)
        ):
            if last is not None and last.simulation is not None:
                _let_go(last, collect)
            clock = time.process_time()
            last = _simulated(inputs, seed, clock + max(share, 0.0))
            last_cost = time.process_time() - clock
            simulated += last_cost
            if last.simulation is None:
                runs.append(last)
                continue
            last.stopped = _stopped(inputs, last)
        # the hand-overs' own share is kept for them even when a simulation ran over its share (its setup is
        # not interruptible): the budget is then exceeded by that overrun, never the hand-overs starved
        clock = time.process_time()
        deadline = clock + max((budget - (clock - began)) / left, reserved)
        last_use = index == settings.seeds - 1 and settings.most_seeds == settings.seeds
        runs.append(_tail(inputs, last, seed, deadline, last_use))
        tail_cost = max(tail_cost, time.process_time() - clock)
    if budget is not None and settings.most_seeds > settings.seeds:
        stopped = last is not None and last.simulation is not None
        spent = _Spent(
            began + budget,
            last,
            tail_cost if stopped else last_cost,
            last_cost,
            min(run.covered() for run in runs),
            collect,
        )
        runs.extend(_more_runs(inputs, spent))
    return runs


MORE_RUN_MARGIN = 1.5
"""A further run starts only while the budget left pays this many of the dearest run so far (a run the budget
then stops short is left out: its CPU would be spent for nothing)."""
MORE_RUN_SHARE = 0.004
"""Share of ``cpu_budget`` each further run leaves for what follows the runs: summing it up (each operation's
ranges over one more run) and collecting its garbage (at 1,000 nodes and 2,200 operations about 0.015 s per run;
`SUMMARY_SHARE` pays the ``seeds`` runs'). Without it, 23-32 runs took up to 5.13 s of a 5 s budget."""


def _simulated(inputs: _Inputs, seed: int, deadline: float | None) -> SeedRun:
    """`run_seed` with ``seed``'s own draw of submissions to come; with a ``deadline`` it gives up as soon as it
    cannot reach the horizon by then (`_GiveUp`)."""
    return run_seed(
        inputs.state,
        seed,
        inputs.settings,
        specs=inputs.specs,
        fits=inputs.fits,
        starts_of=inputs.starts_of,
        deadline=deadline,
        arrivals=inputs.arrivals.draw(seed, inputs.settings.horizon),
        give_up=True,
    )


def _more_runs(inputs: _Inputs, spent: _Spent) -> Iterator[SeedRun]:
    """Seeds after the ``seeds`` runs, up to ``max_seeds``, while the budget left pays one more as dear as the
    dearest so far `MORE_RUN_MARGIN` times over (`_Spent`). When the budget stopped the simulator, the further runs
    are hand-overs of the simulation that gave up early (`_GiveUp`), else of one more simulation stopped at its
    first check: the hand-overs of one stopped simulation share what it simulated (an operation it started has
    that start in every one of them), so a dozen hand-overs of a run that got 30 s in would agree on every start
    within those 30 s, and the range would be too narrow there. When no run stopped, each further run is simulated
    whole. A run that did not cover what every run before it covered is left out (it would shorten the forecast's
    horizon for all)."""
    settings = inputs.settings
    base: SeedRun | None = None
    for seed in range(settings.first_seed + settings.seeds, settings.first_seed + settings.most_seeds):
        clock = time.process_time()
        # each further run is summed up and collected after the runs too: the end moves back by its share
        spent.end -= settings.cpu_budget * MORE_RUN_SHARE if settings.cpu_budget is not None else 0.0
        if spent.end - clock < MORE_RUN_MARGIN * spent.run:
            return
        stopped = spent.last is not None and spent.last.simulation is not None
        if base is None and stopped and spent.last is not None and spent.last.gave_up:
            base = spent.last  # it gave up early: its hand-overs are nearly independent already
        if base is None and stopped:
            if spent.end - clock < spent.simulation + MORE_RUN_MARGIN * spent.run:
                return
            assert spent.last is not None
            _let_go(spent.last, spent.collect)
            # stopped at its first check (one fair-share period in)
            base = _simulated(inputs, seed, clock)
            spent.simulation = max(spent.simulation, time.process_time() - clock)
            if base.simulation is None:  # nothing left to simulate after its first period
                return
            base.stopped = _stopped(inputs, base)
            clock = time.process_time()
        if base is not None:
            run = _tail(inputs, base, seed, spent.end, False)
        else:
            run = _simulated(inputs, seed, spent.end)
            if run.simulation is not None:  # stopped by the budget: not a whole run
                run.simulation = None
                return
        if run.covered() < spent.covered:
            return
        spent.run = max(spent.run, time.process_time() - clock)
        yield run


@dataclass
class _Spent:
    """What the ``seeds`` runs spent, for the runs after them (`_more_runs`)."""

    end: float
    """``time.process_time()`` when the runs' budget ends."""
    last: SeedRun | None
    """The last run (its stopped simulation, if any, is let go when more runs need another)."""
    run: float
    """CPU seconds of the dearest run (a hand-over when the simulator was stopped, else a whole run)."""
    simulation: float
    """CPU seconds of the dearest simulation."""
    covered: float
    """Simulated seconds every run covered."""
    collect: bool


def _let_go(run: SeedRun, collect: bool) -> None:
    """A stopped simulation no hand-over needs any more (a new one is simulated): with ``collect`` (the forecast
    holds the collector off, `_collected_once`) its objects are collected now, while the runs are charged for it.
    The simulator's jobs, operations and controllers point at each other, so only a collection frees them; left
    to the one collection after the runs, they were walked where the budget keeps only `SUMMARY_SHARE` (in the
    1,000-node back-test that collection took 0.2-0.4 s beside the summary's 0.3 s, over the 0.6 s kept)."""
    run.simulation = None
    run.stopped = None
    if collect:
        gc.collect()


def _clip(runs: Sequence[SeedRun], covered: float) -> None:
    """Starts and simulated finishes after ``covered`` are not known in every run: drop them from all."""
    for run in runs:
        for operation_id, when in list(run.first_start.items()):
            if when > covered:
                del run.first_start[operation_id]
        for operation_id, when in list(run.finish.items()):
            if when > covered and operation_id not in run.finished_after:
                del run.finish[operation_id]


def _range(values: Sequence[float], now: float, margin: float, covered: float) -> dict[str, float | None]:
    """p10 / p50 / p90 as absolute times (`pooltree.forecast.ranges.prediction_range`, a run's inf a time after
    ``covered``; None: after the horizon)."""
    found: dict[str, float | None] = {}
    for q, value in zip(QUANTILES, prediction_range(values, margin, covered), strict=True):
        found[f"p{round(q * 100)}"] = None if math.isinf(value) else now + value
    return found


def _preempted_by_operation(runs: Sequence[SeedRun]) -> dict[str, dict[str, list[int]]]:
    """Preemptor → victim → jobs preempted for it in each run where any was (arrivals drawn by a run are left
    out: no operation a user can look up)."""
    found: dict[str, dict[str, list[int]]] = {}
    for run in runs:
        for preemptor, victims in run.preempted_for.items():
            for victim, count in victims.items():
                if not is_arrival(victim):
                    found.setdefault(preemptor, {}).setdefault(victim, []).append(count)
    return found


def _preempts(per_victim: Mapping[str, list[int]], runs: int) -> tuple[dict[str, Any], ...]:
    """One operation's victims (`_preempted_by_operation`) over ``runs`` runs: median jobs, share of runs."""
    found = []
    for victim, counts in per_victim.items():
        jobs = sorted(counts + [0] * (runs - len(counts)))
        found.append(
            {
                "operation_id": victim,
                "jobs_p50": quantile([float(j) for j in jobs], 0.5),
                "share_of_runs": round(len(counts) / runs, 3),
            }
        )
    found.sort(key=lambda item: (-item["share_of_runs"], -item["jobs_p50"], item["operation_id"]))
    return tuple(found)
