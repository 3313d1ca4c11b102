"""Group commit of job records: many heartbeats' writes in one store transaction, outside the scheduling lock.

A heartbeat changes the scheduler's memory under its lock, ``submit``s the job records it wrote (in the lock, so
records enter the queue in the order memory changed) and gets a ticket; after releasing the lock it ``wait``s
for the ticket to be durable before it answers its node. The first waiter whose records are not yet stored
becomes the committer: it takes everything queued so far (from every heartbeat), writes it in one transaction
and wakes the others; waiters that arrive meanwhile queue behind it and go in the next batch. So a node is told
to start a job only after the job's record is stored, and finished jobs are acknowledged only once durable, as
before, but the store's sync no longer holds the lock every other heartbeat and command waits on, and under load
one sync serves many heartbeats.

An operation's first record (a start: ``submit(..., operations=[(record, mutation)])``) goes through the same queue,
so the start commits outside the lock too: it is written in its batch's one transaction with the batch's job records
(``write_operations``), and any job record of the operation is queued after it, so it is never stored before it.

Ordering with the scheduler's other writes: a write that must not overtake queued job records (an operation's
record, a job written outside a heartbeat) calls ``flush()`` first, under the scheduler lock, which commits the
queue itself if no committer is running. Records of one job in one batch collapse to the last one queued.
A failed write raises in every waiter of its batch (the heartbeat fails; the node retries it).

Waiters on an event loop (heartbeats processed on the service's loop) use ``wait_async``: they wait on a future
the batch's end resolves, and a committer among them writes its batch on the group commit's own thread, so a batch
costs one thread hop instead of one per heartbeat. That thread is the group commit's alone: a write must never
queue behind threads that wait for the scheduling lock, whose holder may be waiting for that write (``flush``).
A batch reaches it through a ``queue.SimpleQueue`` (one C call), not an executor: ``ThreadPoolExecutor.submit``
made a ``concurrent.futures.Future`` (with its ``Condition``), a work item and a semaphore round per batch that
nobody waited on, on the heartbeat loop's thread (``bench/RESULTS.md``, session 37).
After a batch written there has woken its waiters, that thread has ``after_batch`` run (the store's checkpoint of
its journal, ``Store.checkpoint_journal``) on a thread of its own, ``group-commit-after`` (made with the writer's
thread, ended with it): no waiter waits for it, and the next batch is written meanwhile (a checkpoint copies what
was committed when it began; the SQLite store's runs beside its writes). Requests made while it runs come to one
run after it. A committer on a waiter's own thread (``wait``, ``flush``: under the scheduling lock) never asks for
it.

The commit interval (``interval``; the service's ``COMMIT_INTERVAL``, ``POOLTREE_COMMIT_INTERVAL``): an event-loop
committer takes its batch at least ``interval`` seconds after the previous batch was taken, so a busy scheduler
writes at most one transaction an interval and each carries more heartbeats (PostgreSQL's ``commit_delay`` for the
same reason). A heartbeat that comes ``interval`` or more after the last take (a quiet scheduler) is taken at once,
so the interval delays answers only while transactions would otherwise follow each other closely, and by at most
the interval. Each transaction has a fixed cost (``BEGIN``, ``COMMIT``, the file check, the checkpoint's look at the
journal, the hand-off to this thread and the loop's wake-up, each a release of the interpreter that the busy
heartbeat loop makes dear to take back): live at 1,000 nodes, without the interval, transactions came every
~1.4 ms with 1.4-1.5 heartbeats each (``bench/RESULTS.md``, session 39). ``wait`` and ``flush`` (under the
scheduling lock) never wait for the interval: they take what is queued at once.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from pooltree.server.heartbeat_trace import TRACE
from pooltree.server.knobs import seconds_override
from pooltree.server.live.lock import resolve_all
from pooltree.server.stalls import StallRing
from pooltree.server.store import JobRecord, Mutation, OperationRecord

log = logging.getLogger(__name__)

FAILURES_KEPT = 64

COMMIT_INTERVAL = 0.008
"""Seconds an event-loop committer waits past the previous batch's take before it takes the next (the module's
doc): at most ~125 transactions a second however many heartbeats come; a heartbeat's answer waits at most this
much more. Measured at 1,000 nodes (``bench/RESULTS.md``, session 39). ``POOLTREE_COMMIT_INTERVAL`` (seconds in
[0, 1]; 0: every committer takes at once, as before) overrides it for comparisons."""


def commit_interval() -> float:
    """``POOLTREE_COMMIT_INTERVAL`` when it is seconds in [0, 1], else ``COMMIT_INTERVAL``."""
    return seconds_override("POOLTREE_COMMIT_INTERVAL", COMMIT_INTERVAL, lambda v: 0 <= v <= 1, "[0, 1]")


OperationWrite = tuple[OperationRecord, Mutation | None]
"""An operation's record and the mutation saved in its commit (a start's)."""


class GroupCommit:
    """Batches ``JobRecord`` writes of concurrent callers into single ``write(records)`` calls."""

    def __init__(
        self,
        write: Callable[[Sequence[JobRecord]], None],
        write_operations: Callable[[Sequence[OperationWrite], Sequence[JobRecord]], None] | None = None,
        after_batch: Callable[[], object] | None = None,
        interval: float = 0.0,
        after_due: Callable[[], bool] | None = None,
    ) -> None:
        if not 0 <= interval < float("inf"):
            raise ValueError(f"the group commit's interval must be non-negative seconds, not {interval!r}")
        self._write = write
        self._write_operations = write_operations
        """Writes a batch holding operation records (theirs and the job records in one transaction)."""
        self._after_batch = after_batch
        """Run on ``group-commit-after`` after a batch written on the group commit's thread woke its waiters (see
        the module)."""
        self._after_due = after_due
        """Asked on the group commit's thread after each batch: whether ``after_batch`` has work (its thread is
        woken only then; None: always)."""
        self._mutex = threading.RLock()
        """Guards the queue and the counters; taken directly (its C context manager) where nothing waits."""
        self._condition = threading.Condition(self._mutex)
        self._sleepers = 0
        """Synchronous waiters asleep on ``_condition`` (``wait``): a batch's end wakes them only when there are."""
        self._queue: dict[tuple[str, str], JobRecord] = {}
        self._operations: list[OperationWrite] = []
        """Operation records queued (``submit``'s ``operations``), in the order submitted."""
        self._submitted = 0
        """Tickets handed out so far (a ticket is the count at its submit)."""
        self._durable = 0
        """Every ticket up to this one is settled (stored, or its batch failed)."""
        self._committing = False
        self.interval = interval
        """Seconds past a batch's take before an event-loop committer takes the next (the module's doc)."""
        self._taken_at = -float("inf")
        """``time.monotonic()`` of the last batch's take."""
        self._gathering_until: float | None = None
        """While an event-loop committer waits out the interval: when (``time.monotonic()``) it takes its batch.
        Waiters that come meanwhile join that batch; one whose step finds it overdue (its loop stopped before
        its timer ran) takes the batch itself."""
        self.gathered = 0
        """Batches whose take waited for the interval (``pooltree_scheduler_group_commit_gathered_total``)."""
        self._failures: list[tuple[int, int, BaseException]] = []
        """(first ticket, last ticket, error) of failed batches, the latest ``FAILURES_KEPT``."""
        self._writer: _Writer | None = None
        """The thread ``wait_async``'s committers write on (made at the first, ended by ``close``)."""
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[float]]] = []
        """Event-loop waiters of the batch being committed (resolved when it ends)."""
        self.batches = 0
        """Transactions written (``pooltree_scheduler_group_commit_batches_total``)."""
        self.tickets = 0
        """Submissions (heartbeats with records) those transactions stored: per batch, how much a sync served."""
        self.records = 0
        self.long_batches = StallRing()
        """Transactions of at least ``STALL_SECONDS`` (every waiter of their batch waited that long)."""

    def submit(self, records: Iterable[JobRecord], operations: Sequence[OperationWrite] = ()) -> int:
        """Queue ``records`` (and ``operations``: needs ``write_operations``); returns the ticket to ``wait`` for
        (0 when there was nothing to write)."""
        if operations and self._write_operations is None:
            raise ValueError("this group commit writes no operation records")
        with self._mutex:
            added = bool(operations)
            self._operations.extend(operations)
            for record in records:
                self._queue[(record.operation_id, record.id)] = record
                added = True
            if not added:
                return 0
            self._submitted += 1
            return self._submitted

    def wait(self, ticket: int) -> None:
        """Return once ``ticket``'s records are stored; raises the store's error if their batch failed."""
        if ticket <= 0:
            return
        while True:
            with self._mutex:
                while ticket > self._durable and self._committing:
                    self._sleepers += 1
                    try:
                        self._condition.wait()
                    finally:
                        self._sleepers -= 1
                if ticket <= self._durable:
                    self._raise_if_failed(ticket)
                    return
                batch, last, first = self._take()
            error = self._commit(batch, first, last)
            if ticket <= last:  # its own batch (taken with everything queued up to ``last``): settled now
                if error is not None:
                    raise error
                return

    def settled(self, ticket: int) -> bool:
        """Whether ``wait(ticket)`` would return (or raise its batch's error) without waiting (read without the
        mutex: the settled tickets only grow)."""
        return ticket <= self._durable

    async def wait_async(self, ticket: int) -> float | None:
        """``wait`` for a caller on an event loop: the loop is never blocked; when this caller becomes the
        committer its batch is written on the group commit's thread. The committer waits on a future of its loop
        as every other waiter of its batch does, so the batch's end wakes each loop once (``_commit``): no second
        wake-up for the write's own completion. Returns when (``time.perf_counter``) the batch that stored the
        ticket ended, None when it was stored before the call (the caller's wait past that is its loop's)."""
        if ticket <= 0:
            return None
        loop = asyncio.get_running_loop()
        ended_at: float | None = None
        while (ended := self.wait_step(ticket, loop)) is not None:
            ended_at = await ended
        return ended_at

    def wait_step(self, ticket: int, loop: asyncio.AbstractEventLoop) -> asyncio.Future[float] | None:
        """One step of ``wait_async`` (on ``loop``'s thread), for callers that wait with callbacks instead of a
        coroutine (a heartbeat's flight, ``heartbeat_flight.py``): None when ``ticket`` is durable (its batch's
        error raised), else a future of ``loop`` resolved with when (``time.perf_counter``) the next batch ended,
        after which the caller steps again. A step that finds no batch being written takes everything queued as
        the next batch (this caller is its committer) and hands it to the group commit's thread; if the previous
        batch was taken less than ``interval`` ago, it gathers instead: a timer on ``loop`` takes the batch once the
        interval has passed, with whatever was queued meanwhile."""
        with self._mutex:
            if ticket <= self._durable:
                self._raise_if_failed(ticket)
                return None
            ended: asyncio.Future[float] = loop.create_future()
            self._async_waiters.append((loop, ended))
            if self._committing:
                return ended
            now = time.monotonic()
            until = self._gathering_until
            if until is None:
                until = self._taken_at + self.interval
                if until > now:  # the previous batch was taken less than an interval ago: gather until then
                    self._gathering_until = until
                    loop.call_later(until - now, self._gathered, until)
                    return ended
            elif until > now:
                # another waiter gathers: a timer on this loop too, in case that one's loop stops first
                if self._async_waiters[0][0] is not loop:
                    loop.call_later(until - now, self._gathered, until)
                return ended
            taken = self._take()
        self._hand_over(taken)
        return ended

    def _gathered(self, until: float) -> None:
        """The interval's timer (on a waiter's loop) for the gathering that ends at ``until``: the batch gathered
        meanwhile is taken and handed over, unless a committer took it already (``wait`` or an overdue step)."""
        with self._mutex:
            if self._gathering_until != until or self._committing:
                return
            taken = self._take()
        self._hand_over(taken)

    def _hand_over(self, taken: tuple[_Batch, int, int]) -> None:
        """A batch taken by an event-loop committer to the group commit's thread."""
        batch, last, first = taken
        writer = self._writer or self._start_writer()
        if writer is None:  # no thread can start (the interpreter is exiting): written here
            self._commit(batch, first, last)  # (its waiters resolved too)
        else:
            writer.put((batch, first, last))

    def _take(self) -> tuple[_Batch, int, int]:
        """Everything queued as the next batch (the condition held): (the batch, its last ticket, its first)."""
        batch = _Batch(list(self._queue.values()), self._operations)
        self._queue, self._operations = {}, []
        self._committing = True
        if self._gathering_until is not None:
            self._gathering_until = None
            self.gathered += 1
        self._taken_at = time.monotonic()
        return batch, self._submitted, self._durable + 1

    def _start_writer(self) -> _Writer | None:
        """The commit thread (started now if there is none); None when no thread can start."""
        with self._mutex:
            if self._writer is None:
                writer = _Writer(self._commit, self._after_batch, self._after_due)
                try:
                    writer.start()
                except RuntimeError:
                    return None
                self._writer = writer
            return self._writer

    def close(self) -> None:
        """End the commit thread of ``wait_async`` once it has written the batches handed to it (idle once nothing
        waits); a later ``wait_async`` starts another."""
        with self._mutex:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.put(None)

    def flush(self) -> None:
        """Store everything queued so far (the caller's later write then cannot overtake it)."""
        with self._mutex:
            ticket = self._submitted
        self.wait(ticket)

    def _commit(self, batch: _Batch, first: int, last: int) -> BaseException | None:
        """Write ``batch`` (tickets ``first``..``last``), settle its tickets and wake their waiters; the error its
        write raised (kept for every waiter of the batch), or None."""
        error: BaseException | None = None
        traced = (time.thread_time(), time.process_time()) if TRACE.enabled else None
        began = time.perf_counter()
        try:
            if batch.operations:
                assert self._write_operations is not None
                self._write_operations(batch.operations, batch.jobs)
            else:
                self._write(batch.jobs)
        except BaseException as exc:  # every waiter of the batch gets it
            error = exc
        ended = time.perf_counter()
        if traced is not None:
            thread_cpu, process_cpu = time.thread_time() - traced[0], time.process_time() - traced[1]
            TRACE.batches.append(
                (time.time() - (ended - began), ended - began, len(batch.jobs), thread_cpu, process_cpu)
            )
        self.long_batches.note(ended - began, f"{len(batch.jobs)} records, {last - first + 1} submissions")
        with self._mutex:
            self._committing = False
            self._durable = last
            self.batches += 1
            self.tickets += last - first + 1
            self.records += len(batch.jobs)
            if error is not None:
                self._failures.append((first, last, error))
                del self._failures[:-FAILURES_KEPT]
            if self._sleepers:  # (counted under the mutex: none can be going to sleep unseen)
                self._condition.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        if not waiters:
            return error
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[float]]] = {}
        for loop, future in waiters:
            by_loop.setdefault(loop, []).append(future)
        for loop, futures in by_loop.items():  # one wake-up per loop, not one per waiter (each is a write)
            try:
                loop.call_soon_threadsafe(resolve_all, futures, ended)  # they learn when it ended
            except RuntimeError:  # its loop is closed
                continue
        return error

    def _raise_if_failed(self, ticket: int) -> None:
        for first, last, error in self._failures:
            if first <= ticket <= last:
                raise error


class _Writer:
    """The group commit's thread: writes the batches put in its queue, in order, until it takes None; after each
    batch stored, asks ``after_batch`` of its own thread (``_After``), which it ends when it ends."""

    __slots__ = ("after", "after_due", "commit", "put", "queue", "thread")

    def __init__(
        self,
        commit: Callable[[_Batch, int, int], BaseException | None],
        after_batch: Callable[[], object] | None,
        after_due: Callable[[], bool] | None = None,
    ) -> None:
        self.commit = commit
        self.after_due = after_due
        self.queue: queue.SimpleQueue[tuple[_Batch, int, int] | None] = queue.SimpleQueue()
        self.put = self.queue.put
        """Hand a batch (``(batch, first ticket, last ticket)``) to the thread, or None to end it."""
        self.thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
        self.after = _After(after_batch) if after_batch is not None else None

    def start(self) -> None:
        if self.after is not None:
            self.after.thread.start()
        try:
            self.thread.start()
        except RuntimeError:
            if self.after is not None:
                self.after.end()
            raise

    def _run(self) -> None:
        take, commit, after, has_work = self.queue.get, self.commit, self.after, self.after_due
        due = after.due.set if after is not None else None
        while (item := take()) is not None:
            try:
                # the write's error is the batch's waiters' (``_commit`` keeps it for them)
                if commit(*item) is None and due is not None and (has_work is None or has_work()):
                    due()
            except Exception:  # anything else: logged, and the thread goes on with the next batch
                log.exception("the group commit's thread failed to settle a batch")
        if after is not None:
            after.end()


class _After:
    """The thread ``after_batch`` runs on: woken by ``due`` (requests made while it runs come to one run after),
    ended by ``end`` (a run under way finishes; one asked before is dropped)."""

    __slots__ = ("due", "ending", "run", "thread")

    def __init__(self, run: Callable[[], object]) -> None:
        self.run = run
        self.due = threading.Event()
        self.ending = False
        self.thread = threading.Thread(target=self._loop, name="group-commit-after", daemon=True)

    def end(self) -> None:
        self.ending = True
        self.due.set()

    def _loop(self) -> None:
        wait, clear, run = self.due.wait, self.due.clear, self.run
        while True:
            wait()
            clear()
            if self.ending:
                return
            try:
                run()
            except Exception:  # the thread goes on with the next request
                log.exception("the group commit's work after a batch failed")


class _Batch:
    """One transaction's worth of the queue: job records (one per job) and operation records (in order)."""

    __slots__ = ("jobs", "operations")

    def __init__(self, jobs: list[JobRecord], operations: list[OperationWrite]) -> None:
        self.jobs = jobs
        self.operations = operations
