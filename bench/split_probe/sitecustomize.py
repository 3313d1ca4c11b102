"""A probe loaded into the scheduler process by ``bench/live_queue.py --split FILE`` (``PYTHONPATH`` names this
folder, ``POOLTREE_REQUEST_SPLIT`` the file): each API command's wall time in the scheduler split into its parts.

Per command (``YtApi._command``, from its call on the API's event loop to its answer made), in ``time.monotonic``
seconds (comparable with the bench's own clock):

* ``before``: from the request's headers being whole (``http_protocol.ARRIVED``, the loop's clock) to the call:
  how far behind the API's event loop was;
* ``fast``: answered on the event loop (``get_operation``'s and ``list_operations``'s fast paths): its wall and
  CPU there;
* else ``queued``: from the call to a worker thread starting it (the command-thread limiter's queue, the hop);
* ``wall`` / ``cpu`` / ``nvcsw`` / ``nivcsw``: on the worker thread, from ``_run``'s start to its end, with that
  thread's CPU (``time.thread_time``) and its voluntary / involuntary context switches (``RUSAGE_THREAD``): a
  thread that waits for the GIL, a lock or I/O sleeps (one voluntary switch each); the kernel preempting it for
  another process is an involuntary one;
* ``lock``: seconds in ``SchedulingLock.acquire`` (the scheduling lock, waits included);
* ``store``: seconds, CPU and voluntary switches inside the store's reads (``SqlStore._rows``: its read lock, the
  query, one ``sqlite3_step`` per row, each of which lets the GIL go);
* ``read_lock``: seconds waiting for the SQLite store's read lock (one reader connection, one read at a time);
* ``back``: from the worker's end to the event loop resuming the command (the hop back).
* ``sent``: when the load generator sent it (its ``x-bench-sent`` header, ``live_queue --split``'s gets), so the
  bench joins the client's time with these parts (``request_split.client_path``); and for such a request when its
  answer's held write was flushed to the socket and when that write returned (``written``: the coalesced write
  waits for its turn on the loop).

And every ``LAG_PERIOD`` on the API's event loop: how late a callback due then ran, with the loop thread's CPU and
voluntary switches since the last one (a loop late with its thread off the CPU waited for the GIL or the kernel).
And the pauses of every thread at once: garbage collections and forecast picklings of ``PAUSE`` or longer.
And every second each thread's CPU seconds so far (``/proc/self/task/TID/stat``) and the seconds it waited runnable
for a CPU (``schedstat``), by its Python name (``threads``): which threads the API loop shares the interpreter with,
and how much of their time the machine's other processes took.

Nothing else changes: the probe wraps methods and records; it is written out every second as JSON lines. Except
on request: ``POOLTREE_SPLIT_NODE_SHARDS=N`` runs the scheduler with N node shard processes (``--node-shards``,
which ``pooltree local`` does not take), to compare the API with the heartbeats in processes of their own.
"""

from __future__ import annotations

import os
import sys

_OUT = os.environ.get("POOLTREE_REQUEST_SPLIT")
LAG_PERIOD = 0.01
PAUSE = 0.002
"""Seconds from which a garbage collection or a forecast refresh's pickling (each one C call: no other thread runs
Python meanwhile) is recorded as a pause."""
"""Seconds between two samples of the API loop's lag (a callback's lateness, the loop thread's CPU between)."""


def _install(out: str) -> None:
    import asyncio
    import atexit
    import contextvars
    import gc
    import json
    import pickle
    import resource
    import threading
    import time

    from pooltree.forecast import process as forecast_process
    from pooltree.server import app as app_module
    from pooltree.server import http_protocol, operation_listing
    from pooltree.server.http_protocol import ARRIVED
    from pooltree.server.live import lock as lock_module
    from pooltree.server.operations import OperationCommands
    from pooltree.server.store.sql import SqlStore
    from pooltree.server.store.sqlite import SqliteStore

    local = threading.local()
    split: dict[str, dict[str, float]] = {}
    records: list[dict[str, object]] = []
    records_lock = threading.Lock()
    monotonic, thread_time = time.monotonic, time.thread_time

    def switches() -> tuple[int, int]:
        usage = resource.getrusage(resource.RUSAGE_THREAD)
        return usage.ru_nvcsw, usage.ru_nivcsw

    def counters() -> dict[str, float]:
        found = getattr(local, "counters", None)
        if found is None:
            found = local.counters = {
                "lock": 0.0,
                "store": 0.0,
                "store_cpu": 0.0,
                "store_nvcsw": 0.0,
                "read_lock": 0.0,
            }
        return found

    api = app_module.YtApi
    plain_command, plain_run = api._command, api._run

    lags: list[tuple[float, float, float, int]] = []
    sampling: list[bool] = []

    def sample_loop(loop, due, cpu, vol):  # type: ignore[no-untyped-def]
        now, cpu_now, vol_now = monotonic(), thread_time(), switches()[0]
        lags.append((now, now - due, cpu_now - cpu, vol_now - vol))
        loop.call_at(now + LAG_PERIOD, sample_loop, loop, now + LAG_PERIOD, cpu_now, vol_now)

    traced = contextvars.ContextVar("split_sent", default=None)
    """A traced request's ``sent``, in its task's context: its answer's write (``CoalescedWrites.flush``, a callback
    the task's write scheduled with a copy of that context) finds it."""
    written: list[tuple[float, float, float]] = []

    plain_flush = http_protocol.CoalescedWrites.flush

    def flush(self):  # type: ignore[no-untyped-def]
        sent = traced.get()
        if sent is None or not self.held:
            return plain_flush(self)
        began = monotonic()
        try:
            return plain_flush(self)
        finally:
            written.append((sent, began, monotonic()))

    http_protocol.CoalescedWrites.flush = flush

    async def _command(self, request, request_id):  # type: ignore[no-untyped-def]
        began = monotonic()
        sent = request.headers.get("x-bench-sent")  # a traced request: when its client sent it
        if sent is not None:
            traced.set(float(sent))
        if not sampling:  # the API's event loop: how late a callback due every LAG_PERIOD runs there
            sampling.append(True)
            loop = asyncio.get_running_loop()
            loop.call_at(
                began + LAG_PERIOD, sample_loop, loop, began + LAG_PERIOD, thread_time(), switches()[0]
            )
        try:
            return await plain_command(self, request, request_id)
        finally:
            ended = monotonic()
            parts = split.pop(request_id, {})
            arrived = request.scope.get(ARRIVED)
            record: dict[str, object] = {
                "command": request.path_params.get("command"),
                "t0": began,
                "total": ended - began,
                "before": None if arrived is None else began - arrived,
                **parts,
            }
            if sent is not None:
                record["sent"] = float(sent)
            if "started" in parts:
                record["queued"] = parts["started"] - began
                record["back"] = ended - parts["stopped"]
            with records_lock:
                records.append(record)

    def _run(self, descriptor, handler, ctx, request_id):  # type: ignore[no-untyped-def]
        mine = counters()
        for key in mine:
            mine[key] = 0.0
        started, cpu, (vol, invol) = monotonic(), thread_time(), switches()
        try:
            return plain_run(self, descriptor, handler, ctx, request_id)
        finally:
            stopped, cpu_after, (vol_after, invol_after) = monotonic(), thread_time(), switches()
            split.setdefault(request_id, {}).update(
                {
                    "started": started,
                    "stopped": stopped,
                    "wall": stopped - started,
                    "cpu": cpu_after - cpu,
                    "nvcsw": vol_after - vol,
                    "nivcsw": invol_after - invol,
                    **mine,
                }
            )

    api._command, api._run = _command, _run

    def timed_fast(plain):  # type: ignore[no-untyped-def]
        def fast(self, ctx):  # type: ignore[no-untyped-def]
            began, cpu, (vol, invol) = monotonic(), thread_time(), switches()
            try:
                return plain(self, ctx)
            finally:
                ended, cpu_after, (vol_after, invol_after) = monotonic(), thread_time(), switches()
                split[ctx.request_id] = {
                    "fast": ended - began,
                    "fast_cpu": cpu_after - cpu,
                    "fast_nvcsw": vol_after - vol,
                    "fast_nivcsw": invol_after - invol,
                }

        return fast

    commands_class = OperationCommands
    commands_class.get_operation_fast = timed_fast(commands_class.get_operation_fast)  # type: ignore[method-assign]
    listing_class = operation_listing.OperationListing
    if hasattr(listing_class, "list_operations_fast"):  # a listing answered on the loop (not in older trees)
        listing_class.list_operations_fast = timed_fast(listing_class.list_operations_fast)

    lock_class = lock_module.SchedulingLock
    plain_acquire = lock_class.acquire

    def acquire(self, blocking=True, timeout=-1):  # type: ignore[no-untyped-def]
        began = monotonic()
        try:
            return plain_acquire(self, blocking, timeout)
        finally:
            counters()["lock"] += monotonic() - began

    lock_class.acquire = acquire  # type: ignore[method-assign]

    plain_rows = SqlStore._rows

    def _rows(self, sql, args=()):  # type: ignore[no-untyped-def]
        began, cpu, (vol, _) = monotonic(), thread_time(), switches()
        try:
            return plain_rows(self, sql, args)
        finally:
            mine = counters()
            mine["store"] += monotonic() - began
            mine["store_cpu"] += thread_time() - cpu
            mine["store_nvcsw"] += switches()[0] - vol

    SqlStore._rows = _rows  # type: ignore[method-assign]

    class TimedLock:
        """A store's read lock, timing its waits (``read_lock``)."""

        def __init__(self, lock):  # type: ignore[no-untyped-def]
            self.lock = lock

        def __enter__(self):  # type: ignore[no-untyped-def]
            began = monotonic()
            self.lock.__enter__()
            counters()["read_lock"] += monotonic() - began
            return self

        def __exit__(self, *exc):  # type: ignore[no-untyped-def]
            return self.lock.__exit__(*exc)

    plain_init = SqliteStore.__init__

    def init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        plain_init(self, *args, **kwargs)
        if hasattr(self, "_read_lock"):
            self._read_lock = TimedLock(self._read_lock)

    SqliteStore.__init__ = init  # type: ignore[method-assign]

    pauses: list[tuple[str, float, float]] = []
    collecting: list[float] = []

    def on_collection(phase: str, info: dict) -> None:  # type: ignore[type-arg]
        if phase == "start":
            collecting[:] = [monotonic()]
        elif collecting:
            took = monotonic() - collecting[0]
            if took >= PAUSE:
                pauses.append((f"gc{info.get('generation')}", collecting[0], took))

    gc.callbacks.append(on_collection)

    plain_pickled = forecast_process._pickled

    def pickled(item):  # type: ignore[no-untyped-def]
        began = monotonic()
        try:
            return plain_pickled(item)
        finally:
            took = monotonic() - began
            if took >= PAUSE:
                pauses.append(("forecast_pickle", began, took))

    forecast_process._pickled = pickled

    class TimedPickle:
        """``pickle`` as the forecast's module sees it, timing ``loads`` (a forecast's answer opened)."""

        HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL
        dumps = staticmethod(pickle.dumps)

        @staticmethod
        def loads(data):  # type: ignore[no-untyped-def]
            began = monotonic()
            try:
                return pickle.loads(data)
            finally:
                took = monotonic() - began
                if took >= PAUSE:
                    pauses.append(("forecast_unpickle", began, took))

    forecast_process.pickle = TimedPickle

    shards = os.environ.get("POOLTREE_SPLIT_NODE_SHARDS")
    if shards:  # a comparison: the scheduler with node shard processes taking the heartbeats
        from pooltree.server import service

        plain_serve = service.serve

        async def serve(*args, **kwargs):  # type: ignore[no-untyped-def]
            kwargs["node_shards"] = int(shards)
            return await plain_serve(*args, **kwargs)

        service.serve = serve

    handle = open(out, "a", buffering=1 << 16)  # noqa: SIM115
    first = {"switch_interval": sys.getswitchinterval(), "pid": os.getpid(), "code": app_module.__file__}
    handle.write(json.dumps(first) + "\n")

    ticks = os.sysconf("SC_CLK_TCK")

    def thread_cpu() -> list[tuple[str, float, float, float]]:
        """(name, CPU seconds so far, seconds run and seconds waited for a CPU by the kernel's schedstat) of every
        thread of the process (Python's name, else the kernel's)."""
        names = {thread.native_id: thread.name for thread in threading.enumerate()}
        found = []
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as stat:
                    text = stat.read()
            except OSError:
                continue
            try:
                with open(f"/proc/self/task/{tid}/schedstat") as stat:
                    ran, waited = (int(v) / 1e9 for v in stat.read().split()[:2])
            except (OSError, ValueError):
                ran = waited = 0.0
            fields = text[text.rindex(")") + 2 :].split()
            name = names.get(int(tid)) or text[text.index("(") + 1 : text.rindex(")")]
            found.append((f"{name}#{tid}", (int(fields[11]) + int(fields[12])) / ticks, ran, waited))
        return found

    def flush() -> None:
        handle.write(json.dumps({"threads": [monotonic(), thread_cpu()]}) + "\n")
        with records_lock:
            taken = records[:]
            del records[:]
            taken_lags = lags[:]
            del lags[:]
            taken_pauses = pauses[:]
            del pauses[:]
            taken_written = written[:]
            del written[:]
        if taken_written:
            handle.write(json.dumps({"written": taken_written}) + "\n")
        if taken_pauses:
            handle.write(json.dumps({"pauses": taken_pauses}) + "\n")
        if taken_lags:
            handle.write(json.dumps({"lags": taken_lags}) + "\n")
        if taken:
            handle.write(json.dumps({"switch_interval": sys.getswitchinterval()}) + "\n")
        for begin in range(0, len(taken), 100):  # short C calls: the encoder holds the GIL while it runs
            handle.write("\n".join(map(json.dumps, taken[begin : begin + 100])) + "\n")
        handle.flush()

    def flusher() -> None:
        while True:
            time.sleep(1.0)
            flush()

    threading.Thread(target=flusher, name="request-split", daemon=True).start()
    atexit.register(flush)


if _OUT and "scheduler" in sys.argv[:3]:
    _install(_OUT)
