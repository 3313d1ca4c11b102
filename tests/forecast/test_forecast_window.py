"""The run times the duration model learns from are a window by start time, not the newest completions: an
operation's jobs start together and end in order of their run times, so its last completions are its longest
jobs, and a pool's newest completions said its jobs ran twice as long as they do."""

from __future__ import annotations

import contextlib
import math

from pooltree.forecast.durations import DurationSettings
from pooltree.forecast.fork import duration_fits
from pooltree.forecast.live import DurationHistory
from pooltree.forecast.replay import KEPT_DURATIONS, SimulationRecorder, state_of
from pooltree.forecast.window import StartWindow, in_window, start_window
from pooltree.sim import Simulation
from pooltree.sim.scenario import parse_scenario

TRUE_MEDIAN, TRUE_SIGMA = 30.0, 0.6


def test_the_window_keeps_every_completed_job_started_since_its_start() -> None:
    window = StartWindow(3)
    for start, run_time in ((0.0, 50.0), (10.0, 5.0), (20.0, 7.0), (30.0, 1.0)):
        window.add(start, run_time)
    assert window.since == 10.0 and window.run_times() == (5.0, 7.0, 1.0)
    window.add(5.0, 400.0)  # a job that started before the window: its siblings of that time are gone
    assert window.run_times() == (5.0, 7.0, 1.0)
    assert start_window([(30.0, 1.0), (0.0, 50.0), (20.0, 7.0), (10.0, 5.0)], 3) == ((5.0, 7.0, 1.0), 10.0)
    assert start_window([(1.0, 2.0)], 3) == ((2.0,), -math.inf)
    assert in_window([(5.0, 100.0), (10.0, 90.0), (25.0, 75.0)], 10.0) == [90.0, 75.0]


def test_the_live_history_keeps_a_window_by_start_and_counts_a_job_once() -> None:
    history = DurationHistory(kept=2)
    history.add("p", "j1", 0.0, 900.0)
    history.add("p", "j2", 100.0, 10.0)
    history.add("p", "j3", 200.0, 20.0)
    history.add("p", "j3", 200.0, 20.0)
    history.add("p", "j4", 50.0, 3000.0)  # started before the window: not kept
    assert history.snapshot() == {"p": (10.0, 20.0)} and history.since() == {"p": 100.0}


def batches() -> dict:
    """One pool running one operation at a time; each of 6 operations starts 400 jobs of LN(30 s, 0.6) at once
    on a cluster with room for all of them."""
    return {
        "seed": 7,
        "until": "20000s",
        "scheduler": {"fair_share_update_period": "1s", "node_heartbeat_period": "1s"},
        "report": {"event_log": False, "timeline_operations": False},
        "cluster": {
            "nodes": [
                {
                    "address": "n",
                    "count": 30,
                    "resource_limits": {"cpu": 16, "memory": "64Gi", "user_slots": 16},
                }
            ]
        },
        "pool_trees": {"physical": {"pools": {"batch": {"max_running_operation_count": 1}}}},
        "operations": [
            {
                "id": f"op-{index}",
                "submit_time": float(index),
                "user": "u",
                "spec": {"pool": "batch"},
                "tasks": [
                    {
                        "job_count": 400,
                        "resources": {"cpu": 1, "memory": "1Gi", "user_slots": 1},
                        "duration": {
                            "distribution": "lognormal",
                            "median": f"{TRUE_MEDIAN}s",
                            "sigma": TRUE_SIGMA,
                        },
                    }
                ],
            }
            for index in range(6)
        ],
    }


class _Taken(Exception):
    pass


def test_a_pool_of_batches_is_fitted_to_its_true_run_times() -> None:
    """After two operations of 400 jobs, the pool's newest 256 completions are the longest of the second: their
    median is far above the true one. The window by start keeps a fair sample."""
    assert KEPT_DURATIONS < 400
    recorder = SimulationRecorder()
    taken = []

    def take(*_: object) -> None:
        if sum(op.state == "completed" for op in simulation.ops) >= 2:
            taken.append(state_of(simulation, recorder))
            raise _Taken

    simulation = Simulation(
        parse_scenario(batches(), source="batches"),
        until=20000.0,
        event_sink=recorder,
        progress=take,
        progress_interval=10.0,
    )
    recorder.simulation = simulation
    with contextlib.suppress(_Taken):
        simulation.run()
    state = taken[0]
    queued = next(op for op in state.operations if op.first_job_time is None)
    found = duration_fits(state, DurationSettings())[(queued.id, queued.tasks[0].name)]
    assert found.source == "pool"
    assert abs(math.log(found.median / TRUE_MEDIAN)) < 0.15, found
    assert abs(found.sigma - TRUE_SIGMA) < 0.12, found


def test_jobs_that_started_together_leave_the_window_together() -> None:
    """A node's slots start their jobs at one moment and the short ones complete first: dropping only some of
    that moment's jobs would drop the short ones and keep (or censor) the long ones."""
    window = StartWindow(4)
    for run_time in (1.0, 2.0, 3.0):
        window.add(0.0, run_time)  # three siblings of one start completed, their long sibling still runs
    window.add(10.0, 5.0)
    window.add(20.0, 6.0)  # one too many: the whole start at 0 goes, not only its shortest job
    assert window.run_times() == (5.0, 6.0) and window.since == 10.0
    window.add(0.0, 900.0)  # the long sibling completes later: its short siblings are gone, so it is too
    assert window.run_times() == (5.0, 6.0)
    assert in_window([(0.0, 950.0), (10.0, 1.0)], window.since) == [1.0]
    assert start_window([(0.0, 1.0), (0.0, 2.0), (5.0, 3.0)], 2) == ((3.0,), 5.0)
