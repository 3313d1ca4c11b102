"""A node shard process's CPU per forwarded heartbeat, against a stand-in leader; prints one JSON object.

Runs one real shard process (``pooltree/shards/process.py``'s ``run_shard``, started as ``python -c`` from
``--code``, a pooltree checkout with its ``.venv``: the A/B of two builds' shard processes under one bench) at the
end of a socket pair, and plays the leader in this process: every forwarded heartbeat is answered at once, with
no proof (so the shard answers none itself), acknowledging the node's finished jobs and starting jobs on its free
cpus with job specs shaped as the live scheduler's (a one-cpu vanilla job: ``START_SPEC``); a thread pushes a new
state generation every ``--generation-poll`` seconds (0.01, ``host.GENERATION_POLL``: the leader's state moves
that often under load); with ``--proof-share S`` that share of its answers carries a proof of the node's next
heartbeat at the current generation (live, loaded: ~0.4 per forwarded heartbeat), which the next push voids (as
under load for nodes that can start more), in the form the build under test takes; with ``--full-proofs`` the
proofs are full nodes', which the pushes leave holding (as live under load for full nodes, whose next heartbeats
mostly report a finished job). ``--nodes`` simulated nodes (``sim_node.SimNode``, 16 cpus, jobs "running"
``--job-seconds`` x U[0.5, 1.5]) heartbeat every ``--period`` from ``--drivers`` driver processes over keep-alive
connections, as in ``live_nodes.py`` (a loaded heartbeat: ~16 running reports, ~1.6 finished jobs, ~1.6 starts).

After ``--warmup-seconds`` the shard process's CPU (``/proc/PID/task/*/schedstat``: nanoseconds on a CPU) is
measured over ``--seconds``: per forwarded heartbeat, split by thread (``main``: the event loop; ``other``: the
rest, e.g. a pipe reader); with ``--rounds N`` the whole run is repeated and each figure's median reported beside
the runs. ``--callgrind PREFIX``: the shard under callgrind, instructions per forwarded heartbeat (user space,
independent of the machine's load; use few ``--nodes`` and a ``--generation-poll`` that keeps the live ratio of
pushes to heartbeats, e.g. 20 nodes and 0.075 s for ~0.67 pushes per heartbeat). ``--py-spy BINARY`` records the window's samples (``--py-spy-flags=--gil``; py-spy stops the process
per sample, so that run's CPU figures are not the code's), ``--attach CMD`` runs another tool over it. What the real
leader costs is not here (``live_nodes.py --shards 2`` measures the whole).

Usage: .venv/bin/python bench/shard_forward.py [--code /work/wt/s32base] [--nodes 150] [--seconds 10]
       [--warmup-seconds 4] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_common import join_processes, machine, start_drivers
from live_nodes import _driver

from pooltree.node import wire
from pooltree.shards.messages import answer_reply, unpack
from pooltree.shards.verdicts import StartEntryResources, expected_next

NODE_CPU = 16
START_SPEC: dict[str, Any] = {
    "job_id": "",
    "operation_id": "a5cb6b2e-fe9aceb6-d2af2b8b-c56d0f68",
    "task_name": "main",
    "job_index": 0,
    "command": "true",
    "environment": {
        "YT_OPERATION_ID": "a5cb6b2e-fe9aceb6-d2af2b8b-c56d0f68",
        "YT_JOB_ID": "",
        "YT_JOB_INDEX": "0",
        "YT_TASK_NAME": "main",
    },
    "memory_limit": 536870912.0,
    "resources": {"user_slots": 1, "cpu": 1.0, "gpu": 0, "memory": 352321536, "network": 0},
    "memory_reserve": 268435456.0,
    "job_proxy_memory_reserve": 67108864.0,
    "job_proxy_estimated_memory": 67108864.0,
}
"""A start entry as the live scheduler sends it (captured from ``LiveScheduler``; ids and index per job)."""

CHILD = """
import sys
from multiprocessing.connection import Connection
from pooltree.shards.process import ShardSettings, run_shard
run_shard(Connection(int(sys.argv[1])), 0, ShardSettings("127.0.0.1", False, None, None, "shard-forward"))
"""


class StandInLeader:
    """The leader's end of the shard's pipe: forwarded heartbeats answered at once, generations pushed; with
    ``proof_share`` that share of the answers carries a proof of the node's next heartbeat at the current
    generation (in the form the shard's build takes: ``form``), which the next push voids, as the live leader's
    proofs of nodes that can start more are voided under load."""

    def __init__(
        self,
        conn: Connection,
        generation_poll: float,
        encoded: bool,
        proof_share: float,
        form: str,
        full_proofs: bool = False,
    ) -> None:
        self.conn = conn
        self.generation_poll = generation_poll
        self.encoded = encoded
        """Answers go as the node's JSON body (``messages.answer_body``), else as maps (builds before)."""
        self.proof_share = proof_share
        self.form = form
        """``kept``: the proof as the shard keeps it (``messages.answer_reply``); ``plain``: (generation, bounds,
        full), the shard decoding body and answer (builds before)."""
        self.lock = threading.Lock()
        self.forwarded = 0
        self.full_proofs = full_proofs
        """Proofs are a full node's (``verdicts.FullStamp``): the pushes move the generation, not the ``coarse``
        counter or the node's stamp, so a proof holds until the node's next heartbeat, as live for full nodes."""
        self.proofs = 0
        self.jobs = 0
        self.generation = 0
        self.stopping = threading.Event()
        self.random = random.Random(7)
        self.entries = StartEntryResources()

    def start(self) -> int:
        kind, port = self.conn.recv()
        if kind != "ready":
            raise RuntimeError(f"the shard sent {kind!r} instead of its port")
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._push, daemon=True).start()
        return int(port)

    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                return
            if message[0] in ("skips", "synced"):
                continue
            request_id, packed = message[0], message[1]
            self.forwarded += 1
            answer = self._answer(packed)
            if self.proof_share and self.random.random() < self.proof_share:
                self.proofs += 1
                self._send(self._proven(request_id, packed, answer))
                continue
            self._send((request_id, 200, wire.encode(answer) if self.encoded else answer, None, time.time()))

    def _proven(self, request_id: int, packed: bytes, answer: dict[str, Any]) -> tuple[Any, ...]:
        """A reply with a proof at the current generation (no memory bounds; a full node's with
        ``full_proofs``)."""
        full = (0, 0) if self.full_proofs else None
        if self.form == "kept":
            expected = expected_next(unpack(packed), answer, self.entries)
            assert expected is not None
            return answer_reply(request_id, answer, (self.generation, {}, full, expected), time.time())
        return (request_id, 200, wire.encode(answer), (self.generation, {}, full), time.time())

    def _answer(self, packed: Any) -> dict[str, Any]:
        if isinstance(packed, bytes):  # the node's body (``shards/messages.py``)
            data = json.loads(packed)
            running, finished = data["running_jobs"], [entry["job_id"] for entry in data["finished_jobs"]]
        else:  # builds before: the decoded request as tuples
            running, finished = packed[3], [entry[0] for entry in packed[4]]
        start = []
        for _ in range(max(0, NODE_CPU - len(running))):
            self.jobs += 1
            job_id = f"{self.jobs:08x}-5c39031f-19b9de8f-77665247"
            spec = dict(START_SPEC)
            spec["job_id"] = job_id
            spec["job_index"] = self.jobs
            spec["environment"] = {
                **START_SPEC["environment"],
                "YT_JOB_ID": job_id,
                "YT_JOB_INDEX": str(self.jobs),
            }
            spec["resources"] = dict(START_SPEC["resources"])
            start.append(spec)
        return {
            "start": start,
            "preempt": [],
            "abort": [],
            "acknowledge": finished,
            "heartbeat_period": 1.0,
        }

    def _push(self) -> None:
        while not self.stopping.wait(self.generation_poll):
            self.generation += 1
            value = self.generation
            self._send(("generation", value, time.time(), 0 if self.full_proofs else value, ()))

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            with self.lock:
                self.conn.send(message)
        except (OSError, ValueError):
            pass


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each live thread of ``pid`` by thread id (``/proc/.../schedstat``: nanoseconds on a CPU,
    finer than ``stat``'s clock ticks)."""
    figures = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as stat:
                figures[int(tid)] = int(stat.read().split()[0]) / 1e9
        except OSError:
            continue
    return figures


def callgrind_instructions(prefix: str) -> int | None:
    """The instructions of the window: the ``summary`` of callgrind's dump taken at its end (``PREFIX.1``)."""
    try:
        with open(f"{prefix}.1") as dump:
            for line in dump:
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def watch(args: argparse.Namespace, pid: int) -> None:
    """The measured window: a sleep, or a tool over it (``--py-spy``, ``--attach``)."""
    if args.py_spy:  # py-spy stops the process per sample: that run's CPU figures are not the code's
        flags = ["-d", str(int(args.seconds)), "-r", "500", "-f", "raw", "-o", args.py_spy_out]
        command = [args.py_spy, "record", "-p", str(pid), *flags, *args.py_spy_flags.split()]
        subprocess.run(command, check=False, stdout=subprocess.DEVNULL)
    elif args.callgrind:  # instructions counted from here (the process's start-up left out)
        subprocess.run(["callgrind_control", "-z", str(pid)], check=True, stdout=subprocess.DEVNULL)
        time.sleep(args.seconds)
        subprocess.run(["callgrind_control", "-d", str(pid)], check=True, stdout=subprocess.DEVNULL)
    elif args.attach:
        command = args.attach.replace("{pid}", str(pid)).replace("{seconds}", str(args.seconds)).split()
        subprocess.run(command, check=False, timeout=args.seconds + 30)
    else:
        time.sleep(args.seconds)


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    leader_end, shard_end = socket.socketpair()
    own = Path(args.code) / ".venv" / "bin" / "python"
    python = (
        own if own.exists() else Path(sys.executable)
    )  # ``-c`` imports pooltree from ``--code`` (the cwd)
    tool = (
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={args.callgrind}.%p"]
        if args.callgrind
        else []
    )
    child = subprocess.Popen(
        [*tool, str(python), "-c", CHILD, str(shard_end.fileno())],
        pass_fds=(shard_end.fileno(),),
        cwd=args.code,
        stdin=subprocess.DEVNULL,
    )
    shard_end.close()
    messages = (Path(args.code) / "pooltree" / "shards" / "messages.py").read_text()
    encoded = "def answer_body(" in messages
    if args.proof_share and not encoded:
        raise SystemExit("--proof-share needs a build whose leader answers with the node's JSON body")
    form = "kept" if "def answer_reply(" in messages else "plain"
    leader = StandInLeader(
        Connection(leader_end.detach()),
        args.generation_poll,
        encoded,
        args.proof_share,
        form,
        args.full_proofs,
    )
    context = mp.get_context("spawn")
    drivers: list[Any] = []
    try:
        port = leader.start()
        end = context.Value("d", time.time() + 3600.0)
        out = context.Queue()
        options = {
            "node_cpu": NODE_CPU,
            "node_memory": 64 * 2**30,
            "job_seconds": args.job_seconds,
            "job_jitter": 0.5,
            "period": args.period,
        }
        addresses = [f"n{i:05d}" for i in range(args.nodes)]
        start_drivers(
            context,
            _driver,
            f"http://127.0.0.1:{port}",
            "",
            addresses,
            args.drivers,
            options,
            end,
            out,
            60.0,
            drivers,
        )
        time.sleep(args.warmup_seconds)
        before, threads_before = time.time(), thread_cpu(child.pid)
        forwarded_before, proofs_before = leader.forwarded, leader.proofs
        watch(args, child.pid)
        after, threads_after, forwarded, proofs = (
            time.time(),
            thread_cpu(child.pid),
            leader.forwarded - forwarded_before,
            leader.proofs - proofs_before,
        )
        end.value = time.time()
        records = []
        for _ in drivers:
            got, _cpu = out.get(timeout=60.0)
            records.extend(got)
    finally:
        leader.stopping.set()
        join_processes(drivers, 30.0)
        child.kill()
        child.wait(10)
    instructions = callgrind_instructions(f"{args.callgrind}.{child.pid}") if args.callgrind else None
    spent = {tid: threads_after[tid] - threads_before.get(tid, 0.0) for tid in threads_after}
    main = spent.get(child.pid, 0.0)
    other = sum(value for tid, value in spent.items() if tid != child.pid)
    failed = sum(1 for record in records if record[2] != 200)
    return {
        "forwarded_per_second": round(forwarded / (after - before), 1),
        "proofs_per_forwarded": round(proofs / max(forwarded, 1), 3),
        "shard_cpu_ms_per_forwarded": round((main + other) * 1000 / max(forwarded, 1), 4),
        "main_thread_ms_per_forwarded": round(main * 1000 / max(forwarded, 1), 4),
        "other_threads_ms_per_forwarded": round(other * 1000 / max(forwarded, 1), 4),
        "shard_cpu_share": round((main + other) / (after - before), 3),
        "threads": len(spent),
        **(
            {"instructions_per_forwarded": round(instructions / max(forwarded, 1))}
            if instructions is not None
            else {}
        ),
        "failed_heartbeats": failed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--nodes", type=int, default=150)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--drivers", type=int, default=2)
    parser.add_argument("--job-seconds", type=float, default=10.0)
    parser.add_argument("--generation-poll", type=float, default=0.01)
    parser.add_argument(
        "--proof-share",
        type=float,
        default=0.0,
        help="share of the answers that carry a proof of the node's next heartbeat (live, loaded: ~0.4)",
    )
    parser.add_argument(
        "--full-proofs",
        action="store_true",
        help="the proofs are full nodes' (held across the pushes until the node's next heartbeat, as live under "
        "load: most of those heartbeats report a finished job)",
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup-seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--callgrind",
        default="",
        help="run the shard under valgrind's callgrind (dumps at PREFIX.PID.N) and report the instructions per "
        "forwarded heartbeat over the window (a load-independent figure; ~50x slower: few nodes, a longer poll)",
    )
    parser.add_argument("--py-spy", default="", help="a py-spy binary: record the shard over the window")
    parser.add_argument("--py-spy-out", default="shard_forward.txt")
    parser.add_argument(
        "--attach",
        default="",
        help="a command run over the window instead of a sleep, {pid} and {seconds} filled in, e.g. "
        "'perf stat -p {pid} -- sleep {seconds}'",
    )
    parser.add_argument("--py-spy-flags", default="", help="more py-spy flags, e.g. '--gil' or '--native'")
    args = parser.parse_args()
    runs = [one_run(args) for _ in range(args.rounds)]
    figures = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    print(
        json.dumps(
            {"code": args.code, "nodes": args.nodes, "median": figures, "runs": runs, "machine": machine()},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
