"""What clients see when the read process dies (``pooltree scheduler --read-process``); prints one JSON object.

Starts a real ``pooltree scheduler --read-process`` (SQLite under a temporary directory, no nodes: started
operations stay pending, in a pool without a count limit), then runs ``--yt-clients`` (2) threads of the official ``yt.wrapper`` client starting
vanilla operations back to back and ``--plain-clients`` (4) threads of httpx without retries reading
``//sys/pool_trees`` back to back, each over one keep-alive connection at a time. Every ``--period`` seconds (3) the
read process is killed with SIGKILL, ``--kills`` (5) times; the scheduler serves the port itself at once and starts
a new read process after its back-off (1 s, doubling per death in a row: kills closer than a minute apart are a
row, so later gaps grow; ``--period`` should exceed them).

Reported: per kill, the plain clients' failed requests (by exception type) and the seconds from the kill to the
scheduler's log line that it serves the port, and until a new read process serves it; over the run, the starts the
yt clients were answered, the retries ``yt.wrapper`` logged, the errors it raised, and whether the operations the
scheduler lists are exactly the answered starts (none lost, none doubled).

Usage: .venv/bin/python bench/read_process_death.py [--kills 5] [--period 3] [--yt-clients 2] [--plain-clients 4]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import yt.wrapper as ytw

sys.path.insert(0, str(Path(__file__).resolve().parent))
from live_common import read_process_of

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from polling import wait_for

READY = "listening on "
POOL = "death"
"""The pool the operations start in: no count limit to reach (no node runs them: they stay pending)."""


class RetryCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.retries = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "New retry" in record.getMessage():
            self.retries += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--period", type=float, default=3.0)
    parser.add_argument("--yt-clients", type=int, default=2)
    parser.add_argument("--plain-clients", type=int, default=4)
    args = parser.parse_args()
    retries = RetryCounter()
    logging.getLogger("Yt").addHandler(retries)
    with tempfile.TemporaryDirectory(prefix="pooltree-death-") as tmp:
        data = Path(tmp) / "data"
        log_path = Path(tmp) / "scheduler.log"
        with open(log_path, "wb") as log:
            scheduler = subprocess.Popen(
                [sys.executable, "-m", "pooltree.cli", "scheduler", "--data", str(data), "--create-default-tree",
                 "--read-process"],
                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        try:
            assert scheduler.stdout is not None
            url = ""
            while not url:
                line = scheduler.stdout.readline().decode()
                if not line:
                    raise RuntimeError("the scheduler exited before it listened")
                if line.startswith(READY):
                    url = line[len(READY) :].strip()
            report = run(args, url, (data / "token").read_text().strip(), scheduler.pid, log_path, retries)
        finally:  # (SIGINT this script, not SIGTERM: the scheduler is stopped here)
            scheduler.send_signal(signal.SIGTERM)
            try:
                scheduler.wait(30)
            except subprocess.TimeoutExpired:
                scheduler.kill()
    report["machine"] = {"loadavg": os.getloadavg(), "cpus": os.cpu_count()}
    print(json.dumps(report, indent=2))


def run(
    args: argparse.Namespace, url: str, token: str, pid: int, log_path: Path, retries: RetryCounter
) -> dict[str, Any]:
    config = {"proxy": {"enable_proxy_discovery": False}}
    stop = threading.Event()
    started: list[str] = []
    yt_errors: list[str] = []
    plain_errors: list[tuple[float, str]] = []
    plain_ok = Counter[int]()

    ytw.YtClient(proxy=url, token=token, config=config).create(
        "scheduler_pool",
        attributes={"name": POOL, "pool_tree": "default", "max_operation_count": 100_000},
    )

    def start_operations() -> None:
        client = ytw.YtClient(proxy=url, token=token, config=config)
        builder = ytw.VanillaSpecBuilder().begin_task("main").command("true").job_count(1).end_task()
        spec = builder.spec({"pool": POOL})
        while not stop.is_set():
            try:
                started.append(client.run_operation(spec, sync=False).id)
            except Exception as error:
                yt_errors.append(f"{type(error).__name__}: {error}"[:200])

    def read_plainly() -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"OAuth {token}"}, timeout=10) as http:
            while not stop.is_set():
                try:
                    plain_ok[http.get("/api/v4/get", params={"path": "//sys/pool_trees"}).status_code] += 1
                except httpx.TransportError as error:
                    plain_errors.append((time.monotonic(), type(error).__name__))

    threads = [threading.Thread(target=start_operations) for _ in range(args.yt_clients)]
    threads += [threading.Thread(target=read_plainly) for _ in range(args.plain_clients)]
    for thread in threads:
        thread.start()
    kills = []
    try:
        for _ in range(args.kills):
            time.sleep(args.period)
            victim = wait_for(lambda: read_process_of(pid), 120, period=0.01)
            killed_at, killed_wall = time.monotonic(), time.time()
            os.kill(victim, signal.SIGKILL)
            wait_for(
                lambda gone=victim: (read_process_of(pid) or gone) != gone, 120, period=0.01
            )  # a new one serves
            kills.append((killed_at, killed_wall, time.time()))
        time.sleep(1.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(120)
    text = log_path.read_text()
    taken = [stamp(line) for line in text.splitlines() if "the scheduler serves the API port" in line]
    per_kill = []
    for index, (killed_at, killed_wall, back_wall) in enumerate(kills):
        until = kills[index + 1][0] if index + 1 < len(kills) else float("inf")
        errors = Counter(name for at, name in plain_errors if killed_at <= at < until)
        later = [t for t in taken if t >= killed_wall - 0.01]
        per_kill.append(
            {
                "plain_client_errors": dict(errors),
                "seconds_until_the_scheduler_serves": round(later[0] - killed_wall, 3) if later else None,
                "seconds_until_a_new_read_process_serves": round(back_wall - killed_wall, 3),
            }
        )
    client = ytw.YtClient(proxy=url, token=token, config=config)
    held = sum(client.list_operations(pool=POOL, limit=0)["state_counts"].values())
    missing = sum(1 for op_id in set(started) if not exists(client, op_id))
    return {
        "name": "read_process_death",
        "parameters": vars(args),
        "kills": per_kill,
        "plain_client_answers": dict(plain_ok),
        "plain_client_errors_before_the_first_kill": sum(1 for at, _ in plain_errors if at < kills[0][0]),
        "yt_starts_answered": len(started),
        "yt_retries_logged": retries.retries,
        "yt_errors": yt_errors,
        # every answered start exists, and the pool holds as many operations as starts were answered: none lost,
        # none doubled (a retried start answered once, by its mutation id)
        "starts_answered_twice": len(started) - len(set(started)),
        "starts_missing": missing,
        "operations_held": held,
        "starts_exactly_once": missing == 0 and held == len(started) == len(set(started)),
    }


def exists(client: ytw.YtClient, op_id: str) -> bool:
    try:
        client.get_operation(op_id, attributes=["id"])
    except ytw.YtResponseError:
        return False
    return True


def stamp(line: str) -> float:
    """The wall-clock time of a log line (``2026-11-30 19:00:00,123 ...``)."""
    found = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})", line)
    if found is None:
        return 0.0
    return time.mktime(time.strptime(found.group(1), "%Y-%m-%d %H:%M:%S")) + int(found.group(2)) / 1000


if __name__ == "__main__":
    main()
