"""Each thread's CPU of a process over a window, by name: where a live scheduler's CPU goes beyond one thread.

``thread_times(pid)``: every thread's (user, system) CPU seconds so far, from ``/proc/PID/task/*/stat`` (Linux; an
empty map elsewhere or when the process is gone). ``thread_names(pid)``: the Python threads' names by native id,
from ``py-spy dump --json`` when py-spy is found (``PY_SPY=PATH``, beside the interpreter or on the ``PATH``; the
project does not depend on it; it stops the process for a moment: call it outside a measured window), else an empty
map (threads are then named by id). ``thread_figures``: a window's CPU by
thread and, with the quiet phase's, each thread's marginal microseconds per started allocation (its loaded CPU less
its quiet CPU per heartbeat times the loaded heartbeats, over the starts: what ``marginal_ms_per_started_allocation``
is for the whole process). Threads of one name (the AnyIO worker threads) are summed. Used by ``bench/live_nodes.py
--threads`` (``bench/RESULTS.md``, session 36: the live start's gap to the in-process one).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

NAME_TIMEOUT = 20.0
"""Seconds ``py-spy dump`` may take."""


def thread_times(pid: int) -> dict[int, tuple[float, float]]:
    """Native thread id -> (user, system) CPU seconds of every thread of ``pid`` (empty when unreadable)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    times: dict[int, tuple[float, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return times
    for tid in tids:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        fields = text[text.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
        times[int(tid)] = (int(fields[11]) / tick, int(fields[12]) / tick)
    return times


def _py_spy() -> str | None:
    """``PY_SPY`` from the environment, else py-spy beside the interpreter, else on the ``PATH``."""
    given = os.environ.get("PY_SPY")
    if given:
        return given
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def thread_names(pid: int) -> dict[int, str]:
    """Native thread id -> the Python thread's name (``py-spy dump``); empty without py-spy or when it fails."""
    spy = _py_spy()
    if spy is None:
        return {}
    try:
        done = subprocess.run(
            [spy, "dump", "--json", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=NAME_TIMEOUT,
            check=False,
        )
        threads = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    return {
        int(thread["os_thread_id"]): str(thread.get("thread_name") or "?")
        for thread in threads
        if isinstance(thread, dict) and thread.get("os_thread_id") is not None
    }


def _by_name(
    before: dict[int, tuple[float, float]], after: dict[int, tuple[float, float]], names: dict[int, str]
) -> dict[str, list[float]]:
    """[user, system] CPU seconds between the two readings, summed by thread name (a thread not named: its id)."""
    spent: dict[str, list[float]] = {}
    for tid, (user, system) in after.items():
        was_user, was_system = before.get(tid, (0.0, 0.0))
        row = spent.setdefault(names.get(tid, f"thread {tid}"), [0.0, 0.0])
        row[0] += user - was_user
        row[1] += system - was_system
    return spent


def thread_figures(
    window: tuple[dict[int, tuple[float, float]], dict[int, tuple[float, float]]],
    names: dict[int, str],
    quiet: tuple[dict[str, list[float]], int] | None = None,
    heartbeats: int = 0,
    started: int = 0,
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """(a phase's figures, its CPU by name): ``thread_cpu_seconds`` {name: {user, system}} of the threads that took
    5 ms or more, and with ``quiet`` (the quiet phase's CPU by name and its heartbeats) and starts,
    ``thread_marginal_us_per_start`` {name: {user, system}} (maps: ``--repeat``'s medians are taken per key)."""
    spent = _by_name(*window, names)
    figures: dict[str, Any] = {
        "thread_cpu_seconds": {
            name: {"user": round(user, 3), "system": round(system, 3)}
            for name, (user, system) in sorted(spent.items(), key=lambda item: -sum(item[1]))
            if user + system >= 0.005
        }
    }
    if quiet is not None and started and quiet[1]:
        quiet_spent, quiet_heartbeats = quiet
        scale = heartbeats / quiet_heartbeats
        marginal = {}
        for name in figures["thread_cpu_seconds"]:
            user, system = spent[name]
            quiet_user, quiet_system = quiet_spent.get(name, [0.0, 0.0])
            marginal[name] = {
                "user": round(1e6 * (user - quiet_user * scale) / started, 1),
                "system": round(1e6 * (system - quiet_system * scale) / started, 1),
            }
        figures["thread_marginal_us_per_start"] = marginal
    return figures, spent
