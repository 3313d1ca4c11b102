"""Where an API command's time in the scheduler goes: the records of ``split_probe/sitecustomize.py`` summarized.

``live_queue.py --split FILE`` loads the probe into the scheduler and adds ``split`` to its report: for each
command of the 50-client mixed run, how many were answered on the event loop (``fast``) and, for those run on a
worker thread, the medians and p99 of each part (``split_probe``'s docstring says what each is) and the mean of each
part over the slowest 1% (by the scheduler's own time): what a tail is made of. ``wait`` is a worker's wall time
not spent on its CPU (``wall - cpu``); ``store_wait`` the same inside the store's reads. Standalone:
``python bench/request_split.py FILE [BEGIN END]`` (monotonic seconds) prints the same JSON. ``api_loop``: how late
a callback due every 10 ms ran on the API's event loop, and its thread's share of a CPU and voluntary switches (one
per sleep: in epoll with nothing to do, or waiting for the GIL) per second. ``pauses``: per kind (a garbage
collection's generation, a forecast refresh's pickling), those of 2 ms or more: one C call each, during which no
other thread of the scheduler runs Python. ``threads``: each kind of thread's share of a CPU over the window (its
name with the pool's numbering dropped: ``heartbeat``, ``AnyIO worker thread``, ...), from the probe's samples of
every thread's CPU each second, and the share of a second each waited runnable for a CPU (the machine's other work).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

PROBE = Path(__file__).resolve().parent / "split_probe"
PARTS = (
    "before",
    "total",
    "queued",
    "wall",
    "cpu",
    "wait",
    "lock",
    "store",
    "store_wait",
    "read_lock",
    "back",
    "nvcsw",
    "nivcsw",
)
FAST_PARTS = ("before", "total", "fast", "fast_cpu", "fast_nvcsw", "fast_nivcsw")
SENT_HEADER = b"x-bench-sent"
"""The header a traced request carries: when the load generator sent it (``time.monotonic``, ``repr``); the probe
keeps it as the command's ``sent``."""


def probe_environment(out: Path) -> dict[str, str]:
    """The environment variables that load the probe into processes started with them, writing to ``out``."""
    path = os.environ.get("PYTHONPATH", "")
    return {
        "PYTHONPATH": f"{PROBE}{os.pathsep}{path}" if path else str(PROBE),
        "POOLTREE_REQUEST_SPLIT": str(out),
    }


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 3)


def read(
    path: Path, begin: float = float("-inf"), end: float = float("inf")
) -> tuple[list[dict], list[list[float]], list[list[Any]], float | None]:
    """The probe's records of commands that began in [begin, end), its loop-lag samples and the pauses (kind,
    began, seconds) of then, and the switch interval it saw last."""
    records, lags, interval = [], [], None
    pauses: list[list[Any]] = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if "pauses" in record:
            pauses.extend(pause for pause in record["pauses"] if begin <= pause[1] < end)
            continue
        if "lags" in record:
            lags.extend(lag for lag in record["lags"] if begin <= lag[0] < end)
            continue
        if "command" not in record:
            interval = record.get("switch_interval", interval)
            continue
        if begin <= record["t0"] < end:
            if "wall" in record:
                record["wait"] = record["wall"] - record["cpu"]
                record["store_wait"] = record.get("store", 0.0) - record.get("store_cpu", 0.0)
            records.append(record)
    return records, lags, pauses, interval


def thread_shares(path: Path, begin: float, end: float) -> dict[str, dict[str, float]]:
    """Per kind of thread, between the probe's first and last samples in [begin, end): its CPU seconds per second
    (``cpu``) and the seconds per second it waited runnable for a CPU (``runqueue``, the kernel's schedstat)."""
    samples = []
    for line in path.read_text().splitlines():
        if line.startswith('{"threads"'):
            at, threads = json.loads(line)["threads"]
            if begin <= at < end:
                samples.append((at, {entry[0]: entry[1:] for entry in threads}))
    if len(samples) < 2:
        return {}
    (first_at, first), (last_at, last) = samples[0], samples[-1]
    sums: dict[str, list[float]] = {}
    for name, values in last.items():
        kind = re.sub(r"[-_ ]?\d+$", "", name.rsplit("#", 1)[0])
        before = first.get(name, [0.0] * len(values))
        mine = sums.setdefault(kind, [0.0, 0.0])
        mine[0] += values[0] - before[0]
        if len(values) > 2:
            mine[1] += values[2] - before[2]
    seconds = max(last_at - first_at, 1e-9)
    return {
        kind: {"cpu": round(cpu / seconds, 3), "runqueue": round(waited / seconds, 3)}
        for kind, (cpu, waited) in sorted(sums.items(), key=lambda kv: -kv[1][0])
        if cpu or waited
    }


def client_path(path: Path, traced: list[tuple[float, float]]) -> dict[str, Any]:
    """Where a traced request's time went, from the client's send to its reading the answer (ms): ``to_handler``
    (sent to the handler's call on the API loop: the socket, the loop reading it, the loop's backlog), ``handler``
    (the probe's ``total``), ``to_client`` (the answer made to the client having read it), split in ``to_write``
    (to the held write's flush on the loop: the answer's way out through the HTTP layer, then the loop's backlog),
    ``write`` (the flush, the socket's ``send``) and ``to_read`` (the write's end to the load generator having read
    the answer: its process waking, its event loop). Per part p50 / p99 over the traced requests, and the mean of each over those whose
    client time was in the slowest 1%."""
    seen, written = {}, {}
    for line in path.read_text().splitlines():
        if line.startswith('{"written"'):
            written.update((entry[0], entry[1:]) for entry in json.loads(line)["written"])
        elif '"sent"' in line:
            record = json.loads(line)
            seen[record["sent"]] = record
    rows = []
    for sent, done in traced:
        record = seen.get(sent)
        if record is not None:
            t0, total = record["t0"], record["total"]
            flushed, wrote = written.get(sent, (done, done))
            row = (
                done - sent,
                t0 - sent,
                total,
                done - t0 - total,
                flushed - t0 - total,
                wrote - flushed,
                done - wrote,
            )
            rows.append(row)
    if not rows:
        return {"matched": 0}
    slowest = sorted(rows)[-max(1, len(rows) // 100) :]
    report: dict[str, Any] = {"matched": len(rows), "traced": len(traced), "written": len(written)}
    names = ("client", "to_handler", "handler", "to_client", "to_write", "write", "to_read")
    for index, name in enumerate(names):
        values = [row[index] for row in rows]
        report[name] = {
            "p50": _ms(_quantile(values, 0.5)),
            "p99": _ms(_quantile(values, 0.99)),
            "mean_of_slowest_1pct": _ms(sum(row[index] for row in slowest) / len(slowest)),
        }
    return report


def _parts(records: list[dict], names: tuple[str, ...]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    slowest = sorted(records, key=lambda r: r["total"])[-max(1, len(records) // 100) :]
    for name in names:
        values = [float(r.get(name) or 0.0) for r in records]
        scale = (lambda v: v) if name.endswith(("nvcsw", "nivcsw")) else _ms
        figures[name] = {
            "p50": scale(_quantile(values, 0.5)),
            "p99": scale(_quantile(values, 0.99)),
            "mean": scale(sum(values) / len(values)) if values else None,
            "mean_of_slowest_1pct": scale(sum(float(r.get(name) or 0.0) for r in slowest) / len(slowest)),
        }
        if name.endswith(("nvcsw", "nivcsw")):
            for key, value in figures[name].items():
                figures[name][key] = None if value is None else round(value, 2)
    return figures


def summary(path: Path, begin: float = float("-inf"), end: float = float("inf")) -> dict[str, Any]:
    """Per command: counts, and the parts (ms; switches as counts) of those on worker threads and on the loop."""
    records, lags, pauses, interval = read(path, begin, end)
    report: dict[str, Any] = {"switch_interval_ms": None if interval is None else interval * 1000}
    seconds = max(end - begin, 1e-9) if end != float("inf") and begin != float("-inf") else None
    report["pauses"] = {}
    for kind in sorted({pause[0] for pause in pauses}):
        took = sorted(pause[2] for pause in pauses if pause[0] == kind)
        report["pauses"][kind] = {
            "count": len(took),
            "total_ms": _ms(sum(took)),
            "p50_ms": _ms(_quantile(took, 0.5)),
            "max_ms": _ms(took[-1]),
            "share_of_time": None if seconds is None else round(sum(took) / seconds, 4),
        }
    if lags:
        late = [lag[1] for lag in lags]
        seconds = lags[-1][0] - lags[0][0]
        report["api_loop"] = {
            "late_p50_ms": _ms(_quantile(late, 0.5)),
            "late_p99_ms": _ms(_quantile(late, 0.99)),
            "late_max_ms": _ms(max(late)),
            "thread_cpu_share": round(sum(lag[2] for lag in lags[1:]) / max(seconds, 1e-9), 3),
            "voluntary_switches_per_second": round(sum(lag[3] for lag in lags[1:]) / max(seconds, 1e-9), 1),
        }
    report["threads"] = thread_shares(path, begin, end)
    for command in sorted({r["command"] for r in records}):
        mine = [r for r in records if r["command"] == command]
        threaded = [r for r in mine if "wall" in r]
        fast = [r for r in mine if "fast" in r and "wall" not in r]
        entry: dict[str, Any] = {"requests": len(mine), "on_the_loop": len(fast), "on_threads": len(threaded)}
        if threaded:
            entry["threaded"] = _parts(threaded, PARTS)
        if fast:
            entry["loop"] = _parts(fast, FAST_PARTS)
        report[command] = entry
    return report


if __name__ == "__main__":
    window = [float(v) for v in sys.argv[2:4]] or [float("-inf"), float("inf")]
    print(json.dumps(summary(Path(sys.argv[1]), *window), indent=2))
