"""The forecast worker process: a forecast past its CPU budget fails with a clear error and the process stays to
answer the next one; a failure inside the worker comes back as text."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from pooltree.errors import ConfigError, PooltreeError
from pooltree.forecast import ForecastSettings
from pooltree.forecast.worker import (
    OFF,
    ForecastService,
    WorkerSettings,
    _exit_reason,
    _reap,
    forecast_worker_settings,
)
from tests.forecast.test_forecast_fork import project_state


def test_the_cpu_budget_ends_a_forecast_and_the_worker_stays() -> None:
    service = ForecastService(scheduler=None, clock=time.time, settings=WorkerSettings(timeout=0.3))  # type: ignore[arg-type]
    try:
        with pytest.raises(PooltreeError, match="CPU-time budget"):
            service._submit(project_state(), ForecastSettings(seeds=8, horizon=20_000.0))
        pid = next(iter(service._pool()._processes))
        quick = service._submit(project_state(), ForecastSettings(seeds=1, horizon=5.0))
        assert set(quick.operations) == {"batch-1", "adhoc-1"}
        assert next(iter(service._pool()._processes)) == pid  # the same process answered
        gone = replace(project_state(), pool_trees={})
        found = service._submit(gone, ForecastSettings(seeds=1, horizon=5.0))
        assert found.operations["adhoc-1"].start["p50"] is None  # its tree is gone: it never starts
        state = project_state()
        bad = replace(state, operations=(replace(state.operations[1], spec={"weight": -1}, revision=1),))
        with pytest.raises(PooltreeError, match=r"the forecast failed: ConfigError.*weight"):
            service._submit(bad, ForecastSettings(seeds=1, horizon=5.0))
        assert next(iter(service._pool()._processes)) == pid
    finally:
        service.stop()


def test_a_worker_that_dies_says_how_and_is_replaced() -> None:
    """Killed during a forecast (as the kernel's OOM killer would), the worker's end is reported with its signal
    and the next forecast runs in a new process."""
    service = ForecastService(scheduler=None, clock=time.time)  # type: ignore[arg-type]
    try:
        service._submit(project_state(), ForecastSettings(seeds=1, horizon=5.0))
        (pid,) = service._pool()._processes
        future = service._send(project_state(), ForecastSettings(seeds=8, horizon=200_000.0))
        psutil.Process(pid).kill()
        with pytest.raises(PooltreeError, match="died \\(killed by SIGKILL\\)"):
            service.collect(future, 60)
        found = service._submit(project_state(), ForecastSettings(seeds=1, horizon=5.0))
        assert set(found.operations) == {"batch-1", "adhoc-1"}
        assert next(iter(service._pool()._processes)) != pid
    finally:
        service.stop()


def test_the_exit_code_is_read_when_the_pool_reaps_the_worker_first() -> None:
    """A broken pool's manager thread joins the dead worker too: when its ``waitpid`` wins, this thread's ``join``
    finds no child (ECHILD) and must wait for the code the manager stores, not report the worker 'still running'."""
    process = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))
    process.start()
    try:
        os.kill(process.pid, signal.SIGKILL)
        _, status = os.waitpid(process.pid, 0)  # the manager thread's waitpid wins the race ...
        manager = threading.Timer(
            0.3, setattr, (process._popen, "returncode", os.waitstatus_to_exitcode(status))
        )
        manager.start()  # ... and stores the code a moment later
        _reap(process)
        assert _exit_reason(process.exitcode) == "killed by SIGKILL"
        manager.join()
    finally:
        if process.exitcode is None:
            process.kill()


_SCHEDULER = """
import os, sys, time
from pooltree.forecast.worker import ForecastService
service = ForecastService(scheduler=None, clock=time.time)
print(service._pool().submit(os.getpid).result(60), flush=True)
time.sleep(120)
"""


def test_the_worker_ends_with_a_killed_scheduler() -> None:
    """A scheduler killed with SIGKILL cannot shut its pool down: its worker must not simulate on under init."""
    scheduler = subprocess.Popen(
        [sys.executable, "-c", _SCHEDULER], stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parents[2]
    )
    try:
        assert scheduler.stdout is not None
        worker = psutil.Process(int(scheduler.stdout.readline()))
        assert worker.ppid() == scheduler.pid
        scheduler.kill()
        scheduler.wait(10)
        deadline = time.monotonic() + 15
        while worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the worker outlived its scheduler by 15 s"
            time.sleep(0.05)
    finally:
        if scheduler.poll() is None:
            scheduler.kill()
            scheduler.wait(10)


def test_forecasts_turned_off_make_none_and_say_so() -> None:
    """``pooltree scheduler --forecast-budget 0``: no worker, no refresher, reads and dry runs say why."""

    settings = forecast_worker_settings(0.0)
    assert not settings.enabled
    service = ForecastService(scheduler=None, clock=time.time, settings=settings)  # type: ignore[arg-type]
    service.start()
    try:
        assert service._thread is None and service._executor is None
        assert service.read() is None and service.last_error == OFF
        with pytest.raises(PooltreeError, match="makes no forecasts"):
            service.dry_run(project_state().operations[1])
    finally:
        service.stop()
    assert forecast_worker_settings(2.5).forecast.cpu_budget == 2.5
    assert not forecast_worker_settings(2.5).forecast.arrivals.enabled
    assert forecast_worker_settings(2.5, arrivals=True).forecast.arrivals.enabled  # --forecast-arrivals
    with pytest.raises(ConfigError, match="forecast-budget"):
        forecast_worker_settings(-1.0)
