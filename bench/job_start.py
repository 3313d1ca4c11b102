"""Benchmark job start throughput of one exec-node ``JobExecutor``; prints one JSON object.

One executor in one asyncio loop starts ``--jobs`` jobs of ``--command`` (default ``true``) with at most
``--slots`` running at a time (as an exec node with that many user slots would), waits for every result and
forgets it (as the agent does once the scheduler acknowledges it). Per job it records:

* ``start``: how long ``await executor.start(spec)`` took (what a node's heartbeat handler waits for);
* ``start_to_running``: from the start call until the job's process exists (``wait_running`` returned its pid:
  sandbox, output files and the fork are done);
* ``start_to_finished``: from the start call until the finish listener got the job's result (the moment the
  agent would ask for an extra heartbeat).

Rates are jobs per second of wall-clock time; the run is repeated ``--repeat`` times and the median run (by
jobs/s) is reported along with every run's summary.

``cpu_ms_per_job`` is the node's own CPU per job; ``cpu_ms_per_job_with_children`` adds every process of the jobs
(keepers, bubblewrap, the job's shell: all reaped below the node). ``--isolation`` picks the mode
(``node/isolation.py``); to measure without the system's bubblewrap, run it with ``/usr/bin/bwrap`` masked (as
``.ci/run`` does: ``unshare --mount sh -c 'mount --bind /dev/null /usr/bin/bwrap && exec ...'``).
``--no-slots`` starts every sandboxed job in a bubblewrap of its own instead of the node's slots (``slots.py``).

Usage: .venv/bin/python bench/job_start.py [--jobs 300] [--slots 8] [--repeat 3] [--meter auto] [--isolation auto]
       [--no-slots]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pooltree.node import JobExecutor, JobSpec, JobState
from pooltree.node.job import JobResult


def _quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values`` in milliseconds, rounded for printing."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return round(ordered[index] * 1000, 3)


def _summary(values: list[float]) -> dict[str, float]:
    return {"p50_ms": _quantile(values, 0.5), "p99_ms": _quantile(values, 0.99)}


async def _run_once(
    root: Path, jobs: int, slots: int, command: str, meter: str, isolation: str, sandbox_slots: bool
) -> dict:
    """Start ``jobs`` jobs with ``slots`` concurrency in a fresh executor; the timings of this run."""
    finished_at: dict[str, float] = {}

    def on_finish(result: JobResult) -> None:
        finished_at[result.job_id] = time.perf_counter()

    options = {} if sandbox_slots else {"sandbox_slots": False}
    executor = JobExecutor(root, memory_meter=meter, on_finish=on_finish, isolation=isolation, **options)
    slots_free = asyncio.Semaphore(slots)
    start_durations: list[float] = []
    to_running: list[float] = []
    to_finished: list[float] = []
    states: dict[str, int] = {}

    async def one(index: int) -> None:
        job_id = f"bench-{index}"
        spec = JobSpec(job_id=job_id, operation_id="op-bench", command=command, job_index=index)
        async with slots_free:
            began = time.perf_counter()
            await executor.start(spec)
            started = time.perf_counter()
            if hasattr(executor, "wait_running"):
                await executor.wait_running(job_id, 60)
            # (executors before wait_running launched the process inside start())
            running = time.perf_counter()
            result = await executor.wait(job_id, 60)
            start_durations.append(started - began)
            to_running.append(running - began)
            to_finished.append(finished_at[job_id] - began)
            states[result.state.value] = states.get(result.state.value, 0) + 1
            if result.state is not JobState.COMPLETED:
                raise RuntimeError(f"job {job_id} ended {result.state.value}: {result.error}")
        executor.forget(job_id)

    wall_start = time.perf_counter()
    cpu_start = time.process_time()
    before = os.times()
    try:
        await asyncio.gather(*(one(index) for index in range(jobs)))
    finally:
        await executor.shutdown()
    wall = time.perf_counter() - wall_start
    cpu = time.process_time() - cpu_start
    after = os.times()
    children = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    return {
        "jobs_per_second": round(jobs / wall, 1),
        "jobs_per_cpu_second": round(jobs / cpu, 1) if cpu > 0 else None,
        "cpu_ms_per_job": round(cpu / jobs * 1000, 3),
        "cpu_ms_per_job_with_children": round((cpu + children) / jobs * 1000, 3),
        "isolation": executor.isolation.summary(),
        "sandbox_slots": executor.sandbox_slots,
        "wall_seconds": round(wall, 3),
        "start": _summary(start_durations),
        "start_to_running": _summary(to_running),
        "start_to_finished": _summary(to_finished),
        "states": states,
        "memory_meter": executor.meter.name,
        "memory_meter_reason": executor.meter_reason,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--command", default="true")
    parser.add_argument("--meter", default="auto", choices=("auto", "cgroup", "psutil"))
    parser.add_argument("--isolation", default="auto", help="auto, sandbox, slot-uid or none")
    parser.add_argument(
        "--no-slots", action="store_true", help="a bubblewrap per sandboxed job instead of the node's slots"
    )
    args = parser.parse_args()
    if args.jobs <= 0 or args.slots <= 0 or args.repeat <= 0:
        parser.error("--jobs, --slots and --repeat must be positive")
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="pooltree-job-start-") as tmp:
            runs.append(
                asyncio.run(
                    _run_once(
                        Path(tmp),
                        args.jobs,
                        args.slots,
                        args.command,
                        args.meter,
                        args.isolation,
                        not args.no_slots,
                    )
                )
            )
    median = sorted(runs, key=lambda run: run["jobs_per_second"])[len(runs) // 2]
    print(
        json.dumps(
            {
                "benchmark": "job_start",
                "jobs": args.jobs,
                "slots": args.slots,
                "command": args.command,
                "repeat": args.repeat,
                "median_jobs_per_second": statistics.median(run["jobs_per_second"] for run in runs),
                "median_run": median,
                "runs_jobs_per_second": [run["jobs_per_second"] for run in runs],
                "cpus": os.cpu_count(),
                "load_average": [round(value, 2) for value in os.getloadavg()],
                "python": platform.python_version(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
