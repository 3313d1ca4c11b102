"""Benchmark the cost of a job's keeper (``pooltree/node/keeper.py``); prints one JSON object.

Starts ``--jobs`` trivial jobs (``env --default-signal /bin/sh -c true``, what the executor runs without a
sandbox) one after the other, each waited for before the next, three ways: with no keeper (``Popen``, the floor),
behind a keeper forked by the node's zygote (``KeeperZygote.spawn``, what the executor does), and behind a
keeper started as a program (``keeper_argv``). Per way: the median and p99 wall time from the start request to
the job's reaped exit, and the CPU used per job by the children (keepers and jobs) and, for the zygote's way,
by the zygote too. Then, with ``--resident`` jobs of ``sleep`` running
behind each kind of keeper, the median resident / proportional / private memory of one keeper (``smaps_rollup``).
The ways are interleaved round by round (``--rounds``) so a noisy host weighs on all of them alike.

Usage: .venv/bin/python bench/keeper_start.py [--jobs 40] [--rounds 3] [--resident 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pooltree.node.keeper import KeeperZygote, keeper_argv

JOB = ["/usr/bin/env", "--default-signal", "/bin/sh", "-c"]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    """CPU seconds ``pid`` used so far (``/proc/PID/stat``: the zygote is not this process's child)."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _memory_kib(pid: int) -> dict[str, int]:
    found: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as handle:
        for line in handle:
            parts = line.split()
            if parts[0] in ("Rss:", "Pss:", "Private_Dirty:", "Private_Clean:"):
                found[parts[0].rstrip(":")] = int(parts[1])
    return {
        "rss_kib": found["Rss"],
        "pss_kib": found["Pss"],
        "private_kib": found["Private_Dirty"] + found["Private_Clean"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--resident", type=int, default=4)
    args = parser.parse_args()
    read, write = os.pipe()
    zygote = KeeperZygote(read)
    out = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    env = {"PATH": os.environ.get("PATH", os.defpath)}

    held: list[subprocess.Popen] = []  # reaped here by pid: a collected Popen would reap its child itself

    def hold(process: subprocess.Popen) -> int:
        held.append(process)
        return process.pid

    def bare(command: str) -> int:
        return hold(
            subprocess.Popen(
                [*JOB, command], stdout=out, stderr=out, env=env, cwd="/", start_new_session=True
            )
        )

    def forked(command: str) -> int:
        return zygote.spawn([*JOB, command], env=env, cwd="/", stdout=out, stderr=out).pid

    def alone(command: str) -> int:
        return hold(
            subprocess.Popen(
                keeper_argv(read, [*JOB, command]),
                stdout=out,
                stderr=out,
                env=env,
                cwd="/",
                start_new_session=True,
                pass_fds=(read,),
            )
        )

    ways: dict[str, Callable[[str], int]] = {
        "no_keeper": bare,
        "zygote_keeper": forked,
        "keeper_program": alone,
    }
    walls: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, float] = dict.fromkeys(ways, 0.0)
    forked("true")  # the zygote starts with the first job, as in the executor: not part of the figures
    os.waitpid(-1, 0)
    assert zygote._process is not None
    for _ in range(args.rounds):
        for name, start in ways.items():
            before = _children_cpu() + (_process_cpu(zygote._process.pid) if name == "zygote_keeper" else 0.0)
            for _ in range(args.jobs):
                began = time.perf_counter()
                pid = start("true")
                _, status = os.waitpid(pid, 0)
                walls[name].append(time.perf_counter() - began)
                if os.waitstatus_to_exitcode(status) != 0:
                    raise RuntimeError(f"{name}: the job failed with {os.waitstatus_to_exitcode(status)}")
            after = _children_cpu() + (_process_cpu(zygote._process.pid) if name == "zygote_keeper" else 0.0)
            cpu[name] += after - before
    memory: dict[str, dict[str, float]] = {}
    for name in ("zygote_keeper", "keeper_program"):
        pids = [ways[name]("sleep 30") for _ in range(args.resident)]
        time.sleep(0.5)  # the keepers are past their start (a measure, not a test's wait)
        samples = [_memory_kib(pid) for pid in pids]
        memory[name] = {key: statistics.median(sample[key] for sample in samples) for key in samples[0]}
        for pid in pids:
            os.killpg(pid, 9)
            os.waitpid(pid, 0)
    assert zygote._process is not None
    memory["zygote"] = {key: float(value) for key, value in _memory_kib(zygote._process.pid).items()}
    zygote.close()
    for process in held:
        process.returncode = 0
    os.close(write)
    os.close(read)
    total = args.jobs * args.rounds
    result = {
        "benchmark": "keeper_start",
        "jobs": args.jobs,
        "rounds": args.rounds,
        "job": " ".join([*JOB, "true"]),
        "start_to_exit": {
            name: {
                "p50_ms": round(statistics.median(values) * 1000, 3),
                "p99_ms": round(
                    sorted(values)[min(len(values) - 1, round(0.99 * (len(values) - 1)))] * 1000, 3
                ),
            }
            for name, values in walls.items()
        },
        "children_cpu_ms_per_job": {name: round(value / total * 1000, 3) for name, value in cpu.items()},
        "memory_per_keeper": memory,
        "cpus": os.cpu_count(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "python": platform.python_version(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
