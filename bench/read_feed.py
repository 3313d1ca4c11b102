"""What the read process's feed costs the scheduler, and its replica's answer the read process; prints one JSON
object.

In process (a real ``SchedulerService``, SQLite under a temporary directory, a fixed clock): ``--operations``
(3,000) vanilla operations pending in pool ``queue`` (``max_running_operation_count`` 0, as ``live_queue.py``),
each read once through the scheduler's ``get_operation`` fast path (what a read process's miss does), then:

* ``templates``: the feed's tick that sends every operation's map for its template (``OperationCommands.
  read_map``), CPU per template, and the replica's ``apply`` of them (it makes each template at the first answer);
* ``starts``: ``--starts`` (1,000) starts into the queue, each followed by the stamp of its answer and the feed's
  tick (what ``live_queue``'s starts cost the scheduler beside the start itself): CPU per start of the ticks (the
  queue's append read and sent), of ``stamp``, and of the replica's ``apply``; the same starts' own CPU;
* ``updates``: fair-share updates of the tree, each followed by a tick (the feed voids nothing at an update);
* ``answers``: the replica's answer to ``yt.wrapper``'s ``get_operation`` request for random operations, CPU per
  answer (the read process's part of a get besides its HTTP);
* ``forecast``: a real forecast of the queue (``ForecastService.refresh``), then the feed's tick that sends it
  (``wire.FORECAST``: it voids no template), the tick's pickled frame (what ``ReadProcess.send`` writes), the
  replica's ``apply``, and the answers again: how many the replica still answers (every one) and their CPU now
  that each fills in a forecast map with the operation's estimates.

CPU is the thread's (``time.thread_time``); medians of ``--repeat`` (3) passes where it says so.

Usage: .venv/bin/python bench/read_feed.py [--operations 3000] [--starts 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pooltree.reads.feed import ReadFeed
from pooltree.reads.replica import Replica
from pooltree.reads.seam import ReadRequest
from pooltree.server.commands import CommandContext
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store
from pooltree.shards.pipe import frame

TOKEN = "ytct-0000-" + "9a9a" * 8
NOW = 1_700_000_000.0
SPEC = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}
PARAMETERS = {"suppress_transaction_coordinator_sync": False, "operation_id": "", "output_format": "json"}


def _request(operation_id: str) -> ReadRequest:
    """``yt.wrapper``'s ``get_operation`` request (``bench/live_common.py`` records it)."""
    parameters = (
        '{"suppress_transaction_coordinator_sync"=%false;"operation_id"="'
        + operation_id
        + '";"output_format"="json";}'
    )
    headers = (
        (b"host", b"127.0.0.1"),
        (b"user-agent", b"Python wrapper 0.13.55"),
        (b"accept-encoding", b"gzip, identity"),
        (b"accept", b"*/*"),
        (b"connection", b"keep-alive"),
        (b"x-yt-header-format", b"<format=text>yson"),
        (b"x-yt-parameters", parameters.encode()),
        (b"authorization", f"OAuth {TOKEN}".encode()),
    )
    return ReadRequest(b"GET", b"/api/v4/get_operation", headers, b"", ("127.0.0.1", 1), True)


def _cpu(work: Any) -> tuple[float, Any]:
    began = time.thread_time()
    result = work()
    return time.thread_time() - began, result


def run(operations: int, starts: int, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pooltree-read-feed-") as tmp:
        service = SchedulerService(
            open_store(f"sqlite:///{Path(tmp) / 'db.sqlite'}"),
            create_default_tree=True,
            token=TOKEN,
            clock=lambda: NOW,
        )
        asyncio.run(service.start())
        try:
            return _measure(service, operations, starts, repeat)
        finally:
            asyncio.run(service.stop())
            service.store.close()


def _measure(service: SchedulerService, operations: int, starts: int, repeat: int) -> dict[str, Any]:
    scheduler, commands = service.scheduler, service.commands
    service.cypress.create(
        "scheduler_pool",
        None,
        attributes={
            "name": "queue",
            "pool_tree": "default",
            "max_running_operation_count": 0,
            "max_operation_count": 100_000,
        },
    )
    feed = service.read_feed
    assert isinstance(feed, ReadFeed)
    batches: list[Any] = []
    feed.attach(batches.append, ticking=False)
    replica = Replica(clock=lambda: NOW)
    ids = [scheduler.start_operation("vanilla", SPEC, "root", NOW).id for _ in range(operations)]
    for operation_id in ids:  # a read process's misses: each read once through the scheduler
        commands.get_operation_fast(
            CommandContext("get_operation", {**PARAMETERS, "operation_id": operation_id})
        )
    template_cpu, batch = _cpu(feed.tick)
    apply_cpu, _ = _cpu(lambda: replica.apply(batch))
    report: dict[str, Any] = {
        "operations": operations,
        "templates": {
            "sent": feed.counts.templates,
            "bytes_per_template": round(len(json.dumps(batch)) / max(feed.counts.templates, 1)),
            "scheduler_ms_per_template": round(1000 * template_cpu / max(feed.counts.templates, 1), 4),
            "replica_ms_per_template": round(1000 * apply_cpu / max(feed.counts.templates, 1), 4),
        },
    }
    start_cpu: list[float] = []
    tick_cpu: list[float] = []
    stamp_cpu: list[float] = []
    replica_cpu: list[float] = []
    per_pass = max(starts // repeat, 1)
    for _ in range(repeat):
        started = ticked = stamped = applied = 0.0
        for _ in range(per_pass):
            spent, _op = _cpu(lambda: scheduler.start_operation("vanilla", SPEC, "root", NOW))
            started += spent
            spent, _stamp = _cpu(feed.stamp)
            stamped += spent
            spent, batch = _cpu(feed.tick)
            ticked += spent
            spent, _ = _cpu(lambda batch=batch: replica.apply(batch))
            applied += spent
        start_cpu.append(1000 * started / per_pass)
        tick_cpu.append(1000 * ticked / per_pass)
        stamp_cpu.append(1000 * stamped / per_pass)
        replica_cpu.append(1000 * applied / per_pass)
    report["starts"] = {
        "count": per_pass * repeat,
        "start_ms": round(statistics.median(start_cpu), 4),
        "feed_tick_ms_per_start": round(statistics.median(tick_cpu), 4),
        "stamp_ms": round(statistics.median(stamp_cpu), 5),
        "replica_apply_ms_per_start": round(statistics.median(replica_cpu), 4),
        "runs_tick_ms": [round(value, 4) for value in tick_cpu],
        "queue_appends_sent": feed.counts.queue_appends,
        "queues_sent_whole": feed.counts.queues_whole,
    }
    update_cpu: list[float] = []
    tick_after_update: list[float] = []
    for index in range(10):
        spent, _ = _cpu(lambda index=index: scheduler.updates.update_tree("default", NOW + index + 1))
        update_cpu.append(1000 * spent)
        spent, batch = _cpu(feed.tick)
        tick_after_update.append(1000 * spent)
        replica.apply(batch)
    report["updates"] = {
        "count": len(update_cpu),
        "update_ms": round(statistics.median(update_cpu), 3),
        "feed_tick_ms_after_update": round(statistics.median(tick_after_update), 4),
        "voids_sent": feed.counts.voids,
    }
    rng = random.Random(1)
    requests = [_request(rng.choice(ids)) for _ in range(2000)]
    answer_cpu: list[float] = []
    for _ in range(repeat):
        spent, answers = _cpu(lambda: [replica.answer(request, 0) for request in requests])
        assert all(answer is not None for answer in answers), replica.relays
        answer_cpu.append(1000 * spent / len(requests))
    report["answers"] = {
        "count": len(requests) * repeat,
        "replica_ms_per_answer": round(statistics.median(answer_cpu), 4),
        "runs": [round(value, 4) for value in answer_cpu],
    }
    report["forecast"] = _forecast(service, feed, replica, requests, repeat)
    return report


def _forecast(
    service: SchedulerService, feed: ReadFeed, replica: Replica, requests: list[ReadRequest], repeat: int
) -> dict[str, Any]:
    """A new forecast: its tick, frame and apply, then the replica's answers with it (module docstring)."""
    forecasts = service.forecasts
    refresh_began = time.monotonic()
    found = forecasts.refresh()
    refresh_seconds = time.monotonic() - refresh_began
    if found is None:
        return {"error": forecasts.last_error}
    voids = feed.counts.voids
    tick_cpu, batch = _cpu(feed.tick)
    frame_cpu, data = _cpu(lambda: frame(batch))
    apply_cpu, _ = _cpu(lambda: replica.apply(batch))
    answered = replica.answered
    answer_cpu: list[float] = []
    for _ in range(repeat):
        spent, answers = _cpu(lambda: [replica.answer(request, 0) for request in requests])
        answer_cpu.append(1000 * spent / len(requests))
    ready = sum(1 for answer in answers if answer is not None and b'"state": "ready"' in answer)
    return {
        "operations_forecast": len(found.operations),
        "refresh_seconds": round(refresh_seconds, 2),
        "feed_tick_ms": round(1000 * tick_cpu, 3),
        "frame_ms": round(1000 * frame_cpu, 3),
        "frame_bytes": len(data),
        "replica_apply_ms": round(1000 * apply_cpu, 3),
        "voids_sent": feed.counts.voids - voids,
        "answered_after": replica.answered - answered,
        "asked_after": len(requests) * repeat,
        "answers_showing_ready": ready,
        "replica_ms_per_answer": round(statistics.median(answer_cpu), 4),
        "runs": [round(value, 4) for value in answer_cpu],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--operations", type=int, default=3000)
    parser.add_argument("--starts", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import os

    report = {"load_before": os.getloadavg()}
    report.update(run(args.operations, args.starts, args.repeat))
    report["load_after"] = os.getloadavg()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
