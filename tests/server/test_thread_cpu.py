"""``bench/thread_cpu.py`` (``live_nodes --threads``): each thread's CPU read from ``/proc``, and the per-thread
marginal cost of a start computed as the process's is."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))

from thread_cpu import thread_figures, thread_times


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
def test_a_threads_cpu_is_read_by_its_native_id() -> None:
    """A thread that spins shows up under its native id with more CPU than one that sleeps."""
    ids: dict[str, int] = {}
    stop = threading.Event()

    def spin() -> None:
        ids["spin"] = threading.get_native_id()
        end = time.thread_time() + 0.2
        while time.thread_time() < end:
            pass
        stop.wait(10.0)

    def sleep() -> None:
        ids["sleep"] = threading.get_native_id()
        stop.wait(10.0)

    threads = [threading.Thread(target=spin), threading.Thread(target=sleep)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10.0
    times = thread_times(os.getpid())
    while time.monotonic() < deadline:
        times = thread_times(os.getpid())
        if "spin" in ids and sum(times.get(ids["spin"], (0.0, 0.0))) >= 0.15:
            break
        time.sleep(0.02)
    stop.set()
    for thread in threads:
        thread.join(10.0)
    assert sum(times[ids["spin"]]) >= 0.15
    assert sum(times[ids["sleep"]]) < sum(times[ids["spin"]])
    assert thread_times(-1) == {}  # no such process: nothing, no error


def test_the_marginal_per_start_takes_off_the_quiet_cost_per_heartbeat() -> None:
    """A thread's loaded CPU less its quiet CPU per heartbeat times the loaded heartbeats, over the starts; threads
    of one name summed; a thread without a name keeps its id."""
    names = {1: "loop", 2: "worker", 3: "worker"}
    quiet, quiet_spent = thread_figures(({1: (0.0, 0.0)}, {1: (1.0, 0.2)}), names)
    assert quiet == {"thread_cpu_seconds": {"loop": {"user": 1.0, "system": 0.2}}}
    loaded, _ = thread_figures(
        ({1: (1.0, 0.2), 2: (0.0, 0.0)}, {1: (4.0, 0.7), 2: (0.3, 0.0), 3: (0.2, 0.1), 4: (0.01, 0.0)}),
        names,
        (quiet_spent, 100),
        heartbeats=200,
        started=100,
    )
    assert loaded["thread_cpu_seconds"] == {
        "loop": {"user": 3.0, "system": 0.5},
        "worker": {"user": 0.5, "system": 0.1},
        "thread 4": {"user": 0.01, "system": 0.0},
    }
    # loop: (3.0 - 1.0 x 200 / 100) / 100 starts = 10 ms a start; system (0.5 - 0.2 x 2) / 100 = 1 ms
    assert loaded["thread_marginal_us_per_start"]["loop"] == {"user": 10000.0, "system": 1000.0}
    assert loaded["thread_marginal_us_per_start"]["worker"] == {"user": 5000.0, "system": 1000.0}
