"""The CPU of reviving a store at scheduler start (issue 25's restart side): one JSON object.

A store (``--store DIR``: its ``db.sqlite`` and ``db.sqlite.key``, copied to a temporary directory first, so the
kept store never changes) is revived by a fresh ``LiveScheduler`` in this process, as ``service.start`` does
before it listens: ``revive``, one fair-share update per tree, then one full collection (the service's
``GC.settle``, which collects and freezes). Each step's CPU seconds (``time.process_time``) and wall seconds are
printed; ``listen_cpu`` is their sum. Without ``--store`` a store is built first (``heartbeat_profile``'s cluster in
process: ``--nodes`` nodes of 4 CPUs, ``--operations`` operations of ``--jobs`` jobs, ``--build-seconds``
simulated seconds of 60 s jobs: at the defaults 200 operations, ~60,000 job records of which 40,000 running, built
in ~20 CPU seconds) and kept in ``--keep`` when given.
``--root`` imports ``pooltree`` from another source tree (A/B in one sitting). One revival per process: run the
script once per figure.

    python bench/revive_cost.py --store /work/scratch/revstore --root /work/wt/base
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", default=None, help="a directory with db.sqlite (and db.sqlite.key)")
    parser.add_argument("--keep", default=None, help="keep the store built (no --store) in this directory")
    parser.add_argument("--root", default=str(HERE.parent), help="the source tree pooltree is imported from")
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--build-seconds", type=float, default=75.0)
    parser.add_argument("--profile", action="store_true", help="print revive's cProfile to stderr")
    return parser.parse_args()


def _build(args: argparse.Namespace, hp: Any, into: Path) -> dict[str, Any]:
    """A store under ``args.nodes`` simulated nodes: operations started after 6 s, jobs of 60 s, ``build_seconds``
    simulated (the jobs of the first minute completed, the rest running)."""
    sys.argv = [
        "heartbeat_profile",
        *("--nodes", str(args.nodes), "--node-cpu", "4", "--period", "5", "--job-seconds", "60"),
        *(
            "--operations",
            str(args.operations),
            "--jobs",
            str(args.jobs),
            "--seconds",
            str(args.build_seconds),
        ),
        *("--warmup-seconds", str(args.build_seconds - 5), "--quiet-seconds", "0", "--commit-batch", "10"),
        *("--gc", "plain"),
    ]
    options = hp._arguments()
    tmp = tempfile.mkdtemp()
    began = time.process_time()
    cluster = hp.ProfiledCluster(options, tmp, multiprocessing.get_context("spawn"))
    cluster.run(6.0, None)
    for _ in range(options.operations):
        cluster.start_operation()
    cluster.run(args.build_seconds, None)
    cluster.settle(None)
    jobs = len(cluster.live.jobs)
    cluster.live.commits.close()
    cluster.live.store.close()
    into.mkdir(parents=True, exist_ok=True)
    for path in Path(tmp).iterdir():
        shutil.copy(path, into / path.name)
    shutil.rmtree(tmp, ignore_errors=True)
    return {"build_cpu": round(time.process_time() - began, 3), "built_running_jobs": jobs}


def _timed(step: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    value = step()
    return value, time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    args = _arguments()
    root = Path(args.root).resolve()
    sys.path[:0] = [str(root), str(root / "bench")]
    import heartbeat_profile as hp

    from pooltree.server.live.scheduler import LiveScheduler
    from pooltree.server.store import open_store

    result: dict[str, Any] = {"root": str(root)}
    if args.store is None:
        kept = Path(args.keep) if args.keep else Path(tempfile.mkdtemp())
        result.update(_build(args, hp, kept))
        store = kept
    else:
        store = Path(args.store)
    work = Path(tempfile.mkdtemp())
    try:
        for path in store.iterdir():
            if path.name.startswith("db.sqlite"):
                shutil.copy(path, work / path.name)
        gc.collect()
        live = LiveScheduler(open_store(f"sqlite:///{work / 'db.sqlite'}"))
        pools = {"bench": {"max_operation_count": 100_000, "max_running_operation_count": 100_000}}
        live.apply_pool_trees(
            hp.parse_pool_trees({"default": {"config": {}, "pools": pools}}), "default", 0.0
        )
        profile = None
        if args.profile:
            import cProfile

            profile = cProfile.Profile(time.process_time)
            profile.enable()
        revived, revive_cpu, revive_wall = _timed(lambda: live.revive(1000.0))
        if profile is not None:
            import pstats

            profile.disable()
            pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
        _, update_cpu, update_wall = _timed(
            lambda: [live.update_fair_share(t, 1000.0) for t in list(live.cores)]
        )
        _, collect_cpu, collect_wall = _timed(gc.collect)
        result.update(
            revived=len(revived),
            running_jobs=len(live.jobs),
            revive_cpu=round(revive_cpu, 3),
            revive_wall=round(revive_wall, 3),
            update_cpu=round(update_cpu, 3),
            update_wall=round(update_wall, 3),
            collect_cpu=round(collect_cpu, 3),
            collect_wall=round(collect_wall, 3),
            listen_cpu=round(revive_cpu + update_cpu + collect_cpu, 3),
        )
        live.store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if args.store is None and not args.keep:
            shutil.rmtree(store, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
