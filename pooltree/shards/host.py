"""Node shards in processes, the leader's side: start them, carry their heartbeats to the scheduler, restart them.

``NodeShards(count, settings, service)`` spawns ``count`` shard processes (``process.py``). Each serves
``POST /internal/node_heartbeat`` on a port of its own: it authenticates the node, reads the body and sends it
over its pipe, which the leader's reader decodes (``messages.unpack``); the leader processes it with
the scheduler's ``answer_heartbeat_unwaited`` (what the leader's own HTTP route runs: same throttle, same lock, same
group commit, same strategy) on the thread that reads the shard's pipe, one heartbeat after the other, proving the
node's next heartbeat in the same hold of the scheduling lock, and a finisher thread waits for its job records to
be stored and sends the answer back as the node's JSON body (``messages.answer_body``), which the shard returns as
it is. A node is owned
by shard ``blake2b(address) % count``; the leader's answers name that shard's URL (``wire.HEARTBEAT_URL``) and the
node sends its next heartbeats there.

A heartbeat the leader proved empty after the node's previous one is answered by the shard itself
(``verdicts.py``): the leader's answer carries the state generation of its proof, a thread pushes every new
generation to the shards (``GENERATION_POLL``), and the shards send their notes of the heartbeats they answered,
which the reader applies in order before the shard's next heartbeat (``LeaderVerdicts.apply_skips``).

Shards hold no scheduler state but those proofs: a shard that dies loses only the answers it had not yet sent (a
started job's record is stored before its answer leaves the leader, so such a job is the node's missing job, lost
and run again by its controller after ``LOST_AFTER_MISSED_HEARTBEATS``; an unsent acknowledgement makes the node
report the finished job again, which is acknowledged once more). Its nodes' next heartbeats fail over to the
leader, which answers them itself until the shard is restarted and then names its new URL. When the leader dies,
each shard reads end-of-file on its pipe and exits.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, Metric

from pooltree.errors import PooltreeError
from pooltree.node.wire import HeartbeatRequest
from pooltree.server.live import LiveScheduler
from pooltree.shards.deltas import shard_of
from pooltree.shards.messages import answer_reply, unpack
from pooltree.shards.pipe import Frames, receive
from pooltree.shards.process import ShardSettings, run_shard
from pooltree.shards.verdicts import LeaderVerdicts, Proof

log = logging.getLogger(__name__)

MAX_NODE_SHARDS = 64
"""Node shard processes a scheduler may run (``--node-shards``)."""
SHARD_START_TIMEOUT = 60.0
"""Seconds a new shard process has to report its port."""
GENERATION_POLL = 0.01
"""Seconds between the leader's looks at its state generation; a new one is pushed to every shard at once (a
shard may answer a heartbeat on an older proof within that window: the node's work waits one heartbeat)."""
SYNC_TIMEOUT = 10.0
"""Seconds ``NodeShards.sync`` waits for every shard."""


class HeartbeatService(Protocol):
    """What the shards need of the scheduler service (``SchedulerService``)."""

    scheduler: LiveScheduler
    clock: Callable[[], float]

    def enter_heartbeat(self, heartbeat: HeartbeatRequest) -> str | None: ...

    def leave_heartbeat(self) -> None: ...

    def answer_heartbeat_unwaited(
        self,
        heartbeat: HeartbeatRequest,
        peer: str | None,
        throttled: bool,
        hostname: str | None,
        then: Callable[[dict[str, Any]], None] | None,
    ) -> tuple[dict[str, Any], int]: ...

    def render_error(self, error: BaseException, request_id: str) -> tuple[int, dict[str, str], bytes]: ...


class PassLinks(Protocol):
    """The leader's side of shards that start allocations in their processes (``remote.ProcessShardStarts``)."""

    def attach(self, index: int, conn: Connection) -> None: ...

    def detach(self, index: int) -> None: ...

    def carrying(self, index: int) -> contextlib.AbstractContextManager[None]: ...

    @property
    def shard_passes(self) -> list[int]: ...

    @property
    def granted_starts(self) -> int: ...

    @property
    def claims(self) -> int: ...

    @property
    def claims_refused(self) -> int: ...

    @property
    def grants_taken_back(self) -> int: ...


class _Finisher:
    """The leader thread that finishes the shards' processed heartbeats (``finish``: their records stored, their
    answers sent), fed by one `queue.SimpleQueue` (a C queue: a heartbeat handed over costs a put and a get). It
    takes everything queued at once, in the order submitted, so that the answers a commit settles together go
    to each shard in one message (``NodeShards._finish``). ``shutdown``: what is still queued is dropped, what
    runs ends."""

    def __init__(self, finish: Callable[[list[_Processed]], None], name: str) -> None:
        self._finish = finish
        self._work: queue.SimpleQueue[_Processed | None] = queue.SimpleQueue()
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name=f"{name}-0", daemon=True)
        self._thread.start()

    def submit(self, processed: _Processed) -> None:
        self._work.put(processed)

    def queued(self) -> int:
        """Heartbeats handed over and not yet taken."""
        return self._work.qsize()

    def _serve(self) -> None:
        work = self._work
        while True:
            item = work.get()
            taken: list[_Processed] = []
            while item is not None:
                taken.append(item)
                try:
                    item = work.get_nowait()
                except queue.Empty:
                    break
            if self._stopping:
                return
            try:
                self._finish(taken)
            except Exception:
                log.exception("node shards' heartbeats failed on their finishing thread")
            if item is None:  # shut down after what came before it
                return

    def shutdown(self) -> None:
        self._stopping = True
        self._work.put(None)


class _PipeReader:
    """A shard's pipe as its leader thread reads it: the whole messages of what one ``recv`` takes (``pipe.Frames``,
    the frames ``Connection.send`` writes), waiting for bytes (``block``) or never (``MSG_DONTWAIT``), on a
    duplicate of the pipe's socket that stays blocking (the leader's sends on the ``Connection`` block while the
    shard's buffer is full). ``Connection.recv`` read each message in two reads and ``Connection.poll`` made a
    selector for each look at the pipe between two heartbeats (~27 us of the leader live, 1.5 looks per
    forwarded heartbeat: ``bench/RESULTS.md``, session 32)."""

    def __init__(self, conn: Connection) -> None:
        self._sock = socket.socket(fileno=os.dup(conn.fileno()))
        self._frames = Frames()

    def take(self, block: bool) -> list[Any] | None:
        """The messages completed by what the pipe holds now (``block``: once it holds a byte); None once it
        ended (end of file, or the shard's end is gone)."""
        return receive(self._sock, self._frames, 0 if block else socket.MSG_DONTWAIT)

    def close(self) -> None:
        self._sock.close()


_Arrived = tuple[HeartbeatRequest | None, Any]
"""A shard's message waiting on its reader: (a heartbeat, (request id, peer, hostname, throttled)), or (None, the
notes of heartbeats the shard answered)."""


@dataclass
class _Shard:
    index: int
    process: Any
    conn: Connection
    port: int
    send_lock: threading.Lock
    alive: bool = True


_Processed = tuple[_Shard, int, dict[str, Any], Proof | None, int, float]
"""A heartbeat a shard's reader processed, for the finisher: (its shard, request id, answer, proof of the node's
next heartbeat, group commit ticket, when it arrived)."""


class NodeShards:
    """``count`` shard processes answering node heartbeats for ``service``; ``close()`` ends them."""

    def __init__(
        self,
        count: int,
        settings: ShardSettings,
        service: HeartbeatService,
        starts: PassLinks | None = None,
    ) -> None:
        if count < (1 if starts is not None else 2):
            raise ValueError(
                "node shards in processes need a count of at least 2 (1 when they start allocations)"
            )
        self.count = count
        self.settings = settings
        self.service = service
        self.starts = starts
        """Shards that start allocations: each process also runs its nodes' passes (``remote.py``) on a second
        pipe; None: the leader runs every pass (the shards answer the heartbeats proven empty)."""
        self._context = multiprocessing.get_context("spawn")
        self._finisher = _Finisher(self._finish, "node-shard-finish")
        """The thread that waits for the answers' job records to be stored, then sends them (``_finish``)."""
        self.reply_messages = 0
        """Messages the finisher sent the shards with answers (``("replies", [...])`` carries several)."""
        self.replies = 0
        """Answers the finisher sent the shards."""
        self._lock = threading.Lock()
        self._closing = False
        self._shards: list[_Shard | None] = [None] * count
        self.restarts = 0
        """Shard processes started again after one died."""
        self.answered = [0] * count
        """Heartbeats each shard carried to the scheduler (``pooltree_node_shard_heartbeats_total``)."""
        self.answered_locally = [0] * count
        """Heartbeats each shard answered itself, as far as its notes reached the leader
        (``pooltree_node_shard_local_answers_total``)."""
        self.verdicts = LeaderVerdicts(service.scheduler, service.clock)
        """The proofs that let shards answer empty heartbeats, and their notes applied (``verdicts.py``)."""
        service.scheduler.generation.watch_updates = True
        self._moved_lock = threading.Lock()
        """Held while the node stamps that moved are taken and sent (the pusher and ``sync``), so each shard gets
        them in the order they moved."""
        self._syncs: dict[int, tuple[threading.Event, set[int]]] = {}
        """Pending ``sync`` calls: token -> (done, the shards not yet synced)."""
        self._sync_serial = 0
        self._stopping = threading.Event()
        self._pusher = threading.Thread(
            target=self._push_generations, name="node-shard-generations", daemon=True
        )
        try:
            with ThreadPoolExecutor(count, thread_name_prefix="node-shard-start") as starting:
                list(starting.map(self._start, range(count)))
        except BaseException:
            self._shutdown_workers()
            raise
        self._pusher.start()

    # ------------------------------------------------------------------ processes

    def _start(self, index: int) -> None:
        """Spawn shard ``index`` and wait for its port; its reader thread then serves it."""
        parent, child = self._context.Pipe(duplex=True)
        passes_parent, passes_child = self._context.Pipe(duplex=True) if self.starts else (None, None)
        process = self._context.Process(
            target=run_shard,
            args=(child, index, self.settings, passes_child),
            name=f"pooltree-shard-{index}",
            daemon=True,
        )
        process.start()
        child.close()
        if passes_child is not None:
            passes_child.close()
        try:
            if not parent.poll(SHARD_START_TIMEOUT):
                raise RuntimeError(f"node shard {index} did not start within {SHARD_START_TIMEOUT} s")
            kind, port = parent.recv()
            if kind != "ready":
                raise RuntimeError(f"node shard {index} sent {kind!r} instead of its port")
        except BaseException:
            process.kill()
            parent.close()
            if passes_parent is not None:
                passes_parent.close()
            raise
        shard = _Shard(index, process, parent, int(port), threading.Lock())
        with self._lock:
            if self._closing:
                process.kill()
                parent.close()
                if passes_parent is not None:
                    passes_parent.close()
                return
            self._shards[index] = shard
        if self.starts is not None and passes_parent is not None:
            self.starts.attach(index, passes_parent)
        threading.Thread(
            target=self._read, args=(shard,), name=f"node-shard-{index}-reader", daemon=True
        ).start()
        log.info("node shard %d (pid %d) serves heartbeats on port %d", index, process.pid, shard.port)

    def _read(self, shard: _Shard) -> None:
        """Take the shard's messages until its pipe ends and process its heartbeats, in the order they came, on
        this thread; then restart the shard unless closing.

        Between two heartbeats it takes everything the pipe holds, so a heartbeat is counted in flight (the
        throttle) about when it arrives, as on the leader's own route, although it waits here for the ones before
        it. Processing them on the thread that reads them saves each heartbeat a hand-over to another thread
        (a wake-up, and a switch of the interpreter between the two; ``bench/RESULTS.md``, session 32); the
        heartbeats of one shard take the scheduling lock one after the other anyway."""
        pending: deque[_Arrived] = deque()
        pipe = _PipeReader(shard.conn)
        try:
            while self._take_arrived(shard, pipe, pending, block=not pending):
                if pending:
                    self._process(shard, pending.popleft())
        finally:
            pipe.close()
        for arrived in pending:  # the shard is gone: nobody waits for these answers (its nodes ask again)
            if arrived[0] is not None:
                self.service.leave_heartbeat()
        shard.alive = False
        if self.starts is not None:
            self.starts.detach(shard.index)
        with self._lock:
            self._not_syncing(shard.index)
            if self._closing:
                return
            if self._shards[shard.index] is shard:
                self._shards[shard.index] = None
        shard.process.join(timeout=5.0)
        log.warning(
            "node shard %d (pid %s) ended (exit code %s); its nodes heartbeat to the leader until it is back",
            shard.index,
            shard.process.pid,
            shard.process.exitcode,
        )
        shard.conn.close()
        self.restarts += 1
        try:
            self._start(shard.index)
        except Exception:  # the leader keeps answering the shard's nodes itself
            log.exception("node shard %d could not be restarted", shard.index)

    def _take_arrived(self, shard: _Shard, pipe: _PipeReader, pending: deque[_Arrived], block: bool) -> bool:
        """The shard's messages the pipe holds (with ``block``, once it holds any) taken: heartbeats counted in
        flight and queued in ``pending`` with the notes before them; False once the pipe ended."""
        messages = pipe.take(block)
        if messages is None:
            return False
        for message in messages:
            self._arrive(shard, message, pending)
        return True

    def _arrive(self, shard: _Shard, message: tuple[Any, ...], pending: deque[_Arrived]) -> None:
        """One message of the shard: notes queued to be applied in order (before the heartbeat that follows
        them), a sync answered, a heartbeat counted in flight (an error answered at once) and queued."""
        kind = message[0]
        if kind == "skips":
            pending.append((None, message[1]))
            return
        if kind == "synced":
            self._synced(shard, message[1])
            return
        self.answered[shard.index] += 1
        request_id, packed, peer, hostname, skips = message
        if skips:
            pending.append((None, skips))
        try:
            heartbeat = unpack(packed)
            # in flight from its arrival (the leader's HTTP route counts the same way): heartbeats waiting for
            # the ones before them count towards the throttle's limits
            limit = self.service.enter_heartbeat(heartbeat)
        except Exception as error:
            self._send(shard, self._error_reply(shard, request_id, error))
            return
        pending.append((heartbeat, (request_id, peer, hostname, limit is not None)))

    def _process(self, shard: _Shard, arrived: _Arrived) -> None:
        heartbeat, rest = arrived
        if heartbeat is None:
            self._apply_skips(shard, rest)
            return
        request_id, peer, hostname, throttled = rest
        try:
            self._answer(shard, request_id, heartbeat, peer, hostname, throttled)
        except Exception:
            log.exception("a node shard's heartbeat failed on its leader thread")

    def _answer(
        self,
        shard: _Shard,
        request_id: int,
        heartbeat: HeartbeatRequest,
        peer: str | None,
        hostname: str | None,
        throttled: bool,
    ) -> None:
        """Process one heartbeat on the shard's own leader thread (its reader; counted in flight when it arrived),
        the proof of the node's next heartbeat made in its hold of the scheduling lock, then hand it to a
        finisher (``_finish``), which waits for its job records to be stored before anything is sent.

        One thread per shard, not a pool: the heartbeats of a shard take the scheduling lock one after the other
        anyway, and several threads per shard contending for it (and for the interpreter) cost the leader CPU per
        heartbeat; with shards that start allocations, fewer passes of one shard in flight also let its passes
        take the allocations granted ahead instead of a claim's round trip (``bench/RESULTS.md``, session 30).
        The store's write is not waited for here, so the next heartbeat's memory work overlaps it and the group
        commit still batches the heartbeats of every shard."""
        began = time.perf_counter()
        proofs: list[Proof | None] = []

        def prove(answer: dict[str, Any]) -> None:  # in the heartbeat's hold of the scheduling lock
            proofs.append(self._proven(heartbeat, answer))

        try:
            with self.starts.carrying(shard.index) if self.starts is not None else contextlib.nullcontext():
                response, ticket = self.service.answer_heartbeat_unwaited(
                    heartbeat, peer, throttled, hostname, prove
                )
        except Exception as error:
            self._done(shard, self._error_reply(shard, request_id, error), began)
            return
        proof = proofs[-1] if proofs else None
        self._finisher.submit((shard, request_id, response, proof, ticket, began))

    def _finish(self, processed: list[_Processed]) -> None:
        """Processed heartbeats' ends, in order: each one's job records stored (a started job is stored before its
        node hears of it, an acknowledged one is durable; a failed write answers an error, as the leader's own
        route does), its answer made with the proof of the node's next heartbeat made in its hold. The answers
        ready go to each shard in one message before the finisher waits for the store, and at the end: a commit
        settles the records of several heartbeats, so their answers leave together (one pickling, one write and
        one wake-up of the shard, where each answer took its own)."""
        commits = self.service.scheduler.commits
        ready: dict[int, tuple[_Shard, list[tuple[Any, ...]]]] = {}
        for shard, request_id, response, proof, ticket, began in processed:
            if ready and not commits.settled(ticket):
                self._send_ready(ready)
            try:
                commits.wait(ticket)
                reply = answer_reply(request_id, response, proof, self.service.clock())
            except Exception as error:
                reply = self._error_reply(shard, request_id, error)
            self._leave(began)
            ready.setdefault(shard.index, (shard, []))[1].append(reply)
        self._send_ready(ready)

    def _send_ready(self, ready: dict[int, tuple[_Shard, list[tuple[Any, ...]]]]) -> None:
        """Each shard's ready answers in one message (one alone as itself, several as ``("replies", [...])``, in
        order)."""
        for shard, replies in ready.values():
            self._send(shard, replies[0] if len(replies) == 1 else ("replies", replies))
            self.reply_messages += 1
            self.replies += len(replies)
        ready.clear()

    def _leave(self, began: float) -> None:
        """A heartbeat leaves the leader: its duration accounted, out of flight."""
        self.service.scheduler.record_duration("heartbeat", time.perf_counter() - began)
        self.service.leave_heartbeat()

    def _done(self, shard: _Shard, reply: tuple[Any, ...], began: float) -> None:
        """The heartbeat leaves the leader with its reply sent at once (an error the reader answers)."""
        self._leave(began)
        self._send(shard, reply)

    def _proven(self, heartbeat: HeartbeatRequest, answer: dict[str, Any]) -> Proof | None:
        """The proof that the node's next equal heartbeat is empty, the scheduling lock held (None: not proven; a
        failed proof only sends that heartbeat to the leader)."""
        try:
            return self.verdicts.prove(heartbeat, answer)
        except Exception:
            log.exception("no proof for node %s's next heartbeat", heartbeat.address)
            return None

    def _apply_skips(self, shard: _Shard, skips: list[Any]) -> None:
        """A shard's notes of heartbeats it answered, applied in the order they came (the reader's thread)."""
        if not skips:
            return
        try:
            self.verdicts.apply_skips(skips)
        except Exception:
            log.exception(
                "notes of %d heartbeats answered by node shard %d not applied", len(skips), shard.index
            )
        self.answered_locally[shard.index] += len(skips)

    def _push_generations(self) -> None:
        """Every new state generation to every live shard, with the leader's clock, its ``coarse`` counter and
        the node stamps that moved (``StateGeneration.bump_node``)."""
        generation = self.service.scheduler.generation
        last = -1
        while not self._stopping.wait(GENERATION_POLL):
            value = generation.value
            if value == last:
                continue
            last = value
            with self._moved_lock:
                # every shard gets every moved stamp: a node heartbeating to another shard than its own (a
                # stale URL) leaves its proof there
                message = (
                    "generation",
                    value,
                    self.service.clock(),
                    generation.coarse,
                    generation.take_moved(),
                )
                for shard in list(self._shards):
                    if shard is not None and shard.alive:
                        self._send(shard, message)

    def sync(self, timeout: float = SYNC_TIMEOUT) -> None:
        """Wait until every live shard has the leader's current generation and clock (a caller that feeds the
        scheduler inputs in order, as a replay does, then sees no answer on an older proof)."""
        with self._lock:
            self._sync_serial += 1
            token = self._sync_serial
            shards = [shard for shard in self._shards if shard is not None and shard.alive]
            done = threading.Event()
            self._syncs[token] = (done, {shard.index for shard in shards})
            if not shards:
                done.set()
        try:
            generation = self.service.scheduler.generation
            with self._moved_lock:
                moved = generation.take_moved()
                message = ("sync", token, generation.value, self.service.clock(), generation.coarse, moved)
                for shard in shards:
                    self._send(shard, message)
            if not done.wait(timeout):
                raise TimeoutError(f"node shards did not sync within {timeout} s")
        finally:
            with self._lock:
                self._syncs.pop(token, None)

    def _synced(self, shard: _Shard, token: int) -> None:
        with self._lock:
            entry = self._syncs.get(token)
            if entry is not None:
                entry[1].discard(shard.index)
                if not entry[1]:
                    entry[0].set()

    def _not_syncing(self, index: int) -> None:
        """Shard ``index`` ended (lock held): the syncs waiting for it stop waiting (it is not a live shard any
        more; its restarted process starts with the leader's state and no verdict). Else a sync that counted it
        before its reader saw the end waited its whole timeout for an answer that never comes."""
        for done, waiting in self._syncs.values():
            if index in waiting:
                waiting.discard(index)
                if not waiting:
                    done.set()

    def _error_reply(self, shard: _Shard, request_id: int, error: Exception) -> tuple[Any, ...]:
        if not isinstance(error, PooltreeError):
            log.exception("node heartbeat from shard %d failed unexpectedly", shard.index)
        status, headers, body = self.service.render_error(error, str(request_id))
        return (request_id, status, headers, body)

    @staticmethod
    def _send(shard: _Shard, reply: tuple[Any, ...]) -> None:
        try:
            with shard.send_lock:
                shard.conn.send(reply)
        except (OSError, ValueError):  # the shard died meanwhile: its node asks the leader next time
            pass

    # ------------------------------------------------------------------ the nodes' side

    def url_for(self, address: str, hostname: str | None) -> str | None:
        """The heartbeat URL of the shard owning ``address`` on ``hostname`` (the host the node reached the
        scheduler at); None while that shard is down."""
        shard = self._shards[shard_of(address, self.count)]
        if shard is None or not shard.alive:
            return None
        host = hostname or self.settings.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{shard.port}"

    def pids(self) -> list[int | None]:
        """The shard processes' pids by index (None while one is down)."""
        return [shard.process.pid if shard is not None else None for shard in self._shards]

    def close(self) -> None:
        """End every shard process (their nodes heartbeat to the leader's list again)."""
        self._stopping.set()
        with self._lock:
            self._closing = True
            shards = [shard for shard in self._shards if shard is not None]
            self._shards = [None] * self.count
        for shard in shards:
            shard.alive = False
            shard.conn.close()
            shard.process.terminate()
        for shard in shards:
            shard.process.join(timeout=5.0)
            if shard.process.is_alive():
                shard.process.kill()
                shard.process.join(timeout=5.0)
            if self.starts is not None:
                self.starts.detach(shard.index)
        self._shutdown_workers()

    def _shutdown_workers(self) -> None:
        self._finisher.shutdown()


class ShardMetrics:
    """Prometheus collector of the node shards: heartbeats each carried and answered itself, restarts."""

    def __init__(self, shards: Callable[[], NodeShards | None]) -> None:
        self.shards = shards

    def collect(self) -> Iterator[Metric]:
        shards = self.shards()
        if shards is None:
            return
        carried = CounterMetricFamily(
            "pooltree_node_shard_heartbeats", "Node heartbeats a shard process carried", labels=["shard"]
        )
        for index, count in enumerate(shards.answered):
            carried.add_metric([str(index)], count)
        local = CounterMetricFamily(
            "pooltree_node_shard_local_answers",
            "Node heartbeats a shard process answered itself (proven empty by the leader)",
            labels=["shard"],
        )
        for index, count in enumerate(shards.answered_locally):
            local.add_metric([str(index)], count)
        spared = CounterMetricFamily(
            "pooltree_node_shard_proofs_spared",
            "Quiet heartbeats the leader did not prove empty because the node's last proofs went unused",
        )
        spared.add_metric([], shards.verdicts.proofs_spared)
        made = CounterMetricFamily(
            "pooltree_node_shard_proofs_made",
            "Proofs the leader made that a node's next heartbeat changes nothing (each used by the node's shard "
            "for the heartbeats it answers until the state generation moves)",
        )
        made.add_metric([], shards.verdicts.proofs_made)
        yield from (spared, made)
        if shards.starts is not None:
            passes = CounterMetricFamily(
                "pooltree_node_shard_passes",
                "Node heartbeats' scheduling passes a shard process ran (shards that start allocations)",
                labels=["shard"],
            )
            for index, count in enumerate(shards.starts.shard_passes):
                passes.add_metric([str(index)], count)
            yield passes
            starts = CounterMetricFamily(
                "pooltree_node_shard_starts",
                "Allocations the shard processes' passes started: granted ahead with the pass's request, or "
                "claimed (one round trip to the leader each)",
                labels=["way"],
            )
            starts.add_metric(["granted"], shards.starts.granted_starts)
            starts.add_metric(["claimed"], shards.starts.claims - shards.starts.claims_refused)
            taken_back = CounterMetricFamily(
                "pooltree_node_shard_grants_taken_back",
                "Allocations granted ahead that no start of their pass took (back to their controllers)",
            )
            taken_back.add_metric([], shards.starts.grants_taken_back)
            yield from (starts, taken_back)
        restarts = CounterMetricFamily(
            "pooltree_node_shard_restarts", "Shard processes started again after dying"
        )
        restarts.add_metric([], shards.restarts)
        yield from (carried, local, restarts)


__all__ = ["MAX_NODE_SHARDS", "HeartbeatService", "NodeShards", "ShardMetrics", "ShardSettings", "shard_of"]
