"""The forecast worker process: a forecast past its CPU budget fails with a clear error and the process stays to
answer the next one; a failure inside the worker comes back as text."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from pooltree.errors import ConfigError, PooltreeError
from pooltree.forecast import ForecastSettings
from pooltree.forecast.health import ALERT_HOLD, WorkerHealth
from pooltree.forecast.process import _exit_reason, _reap
from pooltree.forecast.run import Forecast
from pooltree.forecast.worker import OFF, ForecastService, WorkerSettings, forecast_worker_settings
from tests.forecast.test_forecast_fork import project_state
from tests.polling import wait_for


def test_the_cpu_budget_ends_a_forecast_and_the_worker_stays() -> None:
    service = ForecastService(scheduler=None, clock=time.time, settings=WorkerSettings(timeout=0.3))  # type: ignore[arg-type]
    try:
        with pytest.raises(PooltreeError, match="CPU-time budget"):
            service._submit(project_state(), ForecastSettings(seeds=8, horizon=20_000.0))
        pid = service.worker.pid
        quick = service._submit(project_state(), ForecastSettings(seeds=1, horizon=5.0))
        assert set(quick.operations) == {"batch-1", "adhoc-1"}
        assert service.worker.pid == pid  # the same process answered
        gone = replace(project_state(), pool_trees={})
        found = service._submit(gone, ForecastSettings(seeds=1, horizon=5.0))
        assert found.operations["adhoc-1"].start["p50"] is None  # its tree is gone: it never starts
        state = project_state()
        bad = replace(state, operations=(replace(state.operations[1], spec={"weight": -1}, revision=1),))
        with pytest.raises(PooltreeError, match=r"the forecast failed: ConfigError.*weight"):
            service._submit(bad, ForecastSettings(seeds=1, horizon=5.0))
        assert service.worker.pid == pid
    finally:
        service.stop()


def test_a_worker_that_dies_says_how_and_is_replaced_after_a_back_off() -> None:
    """Killed during a forecast (as the kernel's OOM killer would), the worker's end is reported with its signal,
    counted and alerted on; no new process starts before the back-off, the next forecast after it runs in a new
    process. A worker killed while idle is seen too (its watcher), and a second death in a row doubles the
    back-off."""
    settings = WorkerSettings(restart_backoff=0.5)
    service = ForecastService(scheduler=None, clock=time.time, settings=settings)  # type: ignore[arg-type]
    try:
        service._submit(project_state(), ForecastSettings(seeds=1, horizon=5.0))
        pid = service.worker.pid
        assert pid is not None and service.health.alert(time.time()) is None
        future = service._send(project_state(), ForecastSettings(seeds=8, horizon=200_000.0))
        psutil.Process(pid).kill()
        with pytest.raises(PooltreeError, match="died \\(killed by SIGKILL\\)"):
            service.collect(future, 60)
        health = service.health
        assert (health.deaths, health.in_a_row) == (1, 1)
        alert = health.alert(time.time())
        assert alert is not None and alert["attributes"]["alert_type"] == "forecast_worker_died"
        assert alert["attributes"]["last_death_reason"] == "killed by SIGKILL"
        assert "not refreshed" in alert["message"]
        with pytest.raises(PooltreeError, match="restarts in"):  # within the back-off: no new process
            service._submit(project_state(), ForecastSettings(seeds=1, horizon=5.0))
        assert service.worker.pid is None
        wait_for(lambda: health.restart_wait() == 0, 10)
        found = service._submit(project_state(), ForecastSettings(seeds=1, horizon=5.0))
        assert set(found.operations) == {"batch-1", "adhoc-1"}
        second = service.worker.pid
        assert second is not None and second != pid
        assert (health.in_a_row, health.restarts) == (0, 1)
        assert "succeeded since" in service.health.alert(time.time())["message"]  # type: ignore[index]
        # killed while idle: the watcher sees it without a forecast in flight
        psutil.Process(second).kill()
        wait_for(lambda: health.deaths == 2, 30)
        assert service.worker.pid is None and health.in_a_row == 1
        assert 0 < health.restart_wait() <= 0.5
        wait_for(lambda: health.restart_wait() == 0, 10)
        service._submit(project_state(), ForecastSettings(seeds=1, horizon=5.0))
        third = service.worker.pid
        psutil.Process(third).kill()  # a death in a row (none succeeded since): twice the back-off
        wait_for(lambda: health.deaths == 3, 30)
        assert health.in_a_row == 1  # the forecast between the two deaths succeeded: a new row
    finally:
        service.stop()


def test_a_refresh_waiting_on_the_worker_ends_at_once_when_the_service_stops() -> None:
    """The refresher waiting on a forecast in flight learns at once that the worker was stopped; it waited 15 s
    for a death's reason no thread would note, so every scheduler stopped during a refresh took 15 s longer."""
    service = ForecastService(scheduler=None, clock=time.time)  # type: ignore[arg-type]
    ended: list[str] = []
    try:
        service._submit(project_state(), ForecastSettings(seeds=1, horizon=5.0))
        future = service._send(project_state(), ForecastSettings(seeds=8, horizon=200_000.0))

        def collect() -> None:
            with pytest.raises(PooltreeError) as raised:
                service.collect(future, 60)
            ended.append(str(raised.value))

        collector = threading.Thread(target=collect)
        collector.start()
        wait_for(future.running, 30)  # in the worker
    finally:
        service.stop()
    wait_for(lambda: ended != [], 5)  # the old code: 15 s
    collector.join(5)
    assert ended == ["the forecast worker process was stopped with the scheduler"]
    assert service.health.deaths == 0


def test_a_refresh_in_flight_when_the_service_stops_is_not_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Stopping the scheduler while a refresh waits on the worker ends that refresh, and is no failure: it was
    counted in ``pooltree_forecast_failures`` and logged as a WARNING "forecast failed: ... stopped with the
    scheduler" at every Ctrl-C of ``pooltree local`` during a refresh."""
    settings = WorkerSettings(forecast=ForecastSettings(seeds=8, horizon=200_000.0))
    service = ForecastService(scheduler=None, clock=time.time, settings=settings)  # type: ignore[arg-type]
    service._take_state = lambda cost=None: project_state()  # type: ignore[method-assign]
    sent: list[Any] = []
    send = service.worker.send

    def noted_send(*args: Any, **kwargs: Any) -> Any:
        future = send(*args, **kwargs)
        sent.append(future)
        return future

    service.worker.send = noted_send  # type: ignore[method-assign]
    results: list[Forecast | None] = []
    refresher = threading.Thread(target=lambda: results.append(service.refresh()))
    try:
        refresher.start()
        wait_for(lambda: bool(sent) and sent[0].running(), 60)  # the forecast is in the worker
    finally:
        service.stop()
    refresher.join(30)
    assert results == [None]
    assert service.health.failures == 0
    assert not [
        r for r in caplog.records if r.levelno >= logging.WARNING and "forecast failed" in r.getMessage()
    ]


def test_the_back_off_doubles_with_deaths_in_a_row() -> None:
    health = WorkerHealth(backoff=1.0, backoff_max=5.0)
    delays = [health.died("killed by SIGKILL", 100.0 + index) for index in range(5)]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    health.succeeded()
    assert health.died("exit status 1", 200.0) == 1.0
    assert health.alert(200.0 + ALERT_HOLD + 1) is not None  # still in a row: holds
    health.succeeded()
    assert health.alert(200.0 + ALERT_HOLD - 1) is not None
    assert health.alert(200.0 + ALERT_HOLD + 1) is None


def test_the_back_off_stays_at_its_cap_after_any_number_of_deaths() -> None:
    health = WorkerHealth(backoff=1.0, backoff_max=300.0)
    delays = [health.died("killed by SIGKILL", float(index)) for index in range(1100)]
    assert delays[-1] == 300.0 and health.in_a_row == 1100


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
print(service.worker._started().submit(os.getpid).result(60), flush=True)
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
        assert service._thread is None and service.worker.pid is None
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


def test_a_read_of_an_operation_newer_than_the_forecast_asks_for_one_at_once() -> None:
    """Refreshes come every ``refresh_periods`` while forecasts are read, and at once when the operation read is
    pending or running and was submitted after the latest forecast was made (that forecast cannot show it)."""
    scheduler = SimpleNamespace(update_period=1.0, operations={})
    service = ForecastService(scheduler=scheduler, clock=lambda: 105.0)  # type: ignore[arg-type]
    service.latest = Forecast(now=100.0, horizon=600.0, seeds=1, operations={}, events=0)

    def asks(op: object) -> bool:
        service._wanted.clear()
        service.read(op)
        return service._wanted.is_set()

    assert not asks(None)  # 5 s old, refreshed every 30 s
    assert asks(SimpleNamespace(state="pending", start_time=101.0))
    assert asks(SimpleNamespace(state="running", start_time=101.0))
    assert not asks(SimpleNamespace(state="pending", start_time=99.0))  # the forecast shows it
    assert not asks(SimpleNamespace(state="completed", start_time=101.0))  # no forecast shows it
