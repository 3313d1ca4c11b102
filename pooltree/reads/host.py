"""The scheduler's side of its read process: the port, the child, its pipe, the feed, its death.

``ReadPort`` (made by ``server/leader.SchedulerRunner`` with ``--read-process``) binds the client-facing port and
an internal listener on 127.0.0.1 for the scheduler's own uvicorn, and starts a ``ReadProcess``: ``python -m
pooltree.reads.process`` with the port's listening socket and its end of a socket pair inherited (``pass_fds``),
the environment without the scheduler's secrets, and the run's peer-line secret as the pipe's first message.
A thread reads the pipe (``("ready",)``, the counts); ``send`` writes a feed frame on the pipe itself when the
pipe takes it whole without waiting, else another thread writes it (and all after it, in order), so ``send`` never
blocks the scheduler's thread that calls it.

When the pipe ends and the scheduler did not stop the child, the read process died: the thread reaps it, and on the
scheduler's event loop the port is served by the scheduler itself (a listener of the same uvicorn server on a
duplicate of the listening socket: the same protocol and app as without a read process; connections waiting in the
backlog are kept), the death is logged, counted and alerted (``health.py``), the feed detached, and a new read
process is started after the back-off (``health.RESTART_DELAY``, doubling per death in a row up to a minute): a
read process is what keeps gets off the scheduler's event loop, and one bad request that killed it should not
leave the cluster on the slow path until a restart, while a read process that keeps dying costs its clients'
connections only once a minute. Once the new one serves, the scheduler stops accepting on the port and makes the
next answer on each of its own connections the last (``Connection: close``), so that keep-alive clients come back
to the read process without a request cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import uvicorn

from pooltree.reads.health import ReadProcessHealth
from pooltree.reads.seam import ReadFeed
from pooltree.shards.pipe import Frames, frame, receive

log = logging.getLogger(__name__)

READY_TIMEOUT = 30.0
"""Seconds a new read process has to serve the port."""
STOP_TIMEOUT = 10.0
"""Seconds ``ReadProcess.stop`` waits after SIGTERM (the read process ends its answers in flight) before SIGKILL."""
BACKLOG = 2048
FEED_BACKLOG_MAX = 256 * 1024 * 1024
"""Bytes of feed messages that may wait for a read process to take them; past that it is stuck (its event loop
does not read its pipe) and is killed: the scheduler serves the port and a new one starts with a fresh replica."""
SECRET_ENVIRONMENT = ("POOLTREE_TOKEN", "POOLTREE_NODE_SECRET")
"""Variables the read process is started without: it needs no secret (``cli/secrets_options.py``'s ``TOKEN_ENV``,
``NODE_SECRET_ENV``; the command line's package is not imported by the scheduler's shell)."""


class ReadProcess:
    """One read process serving ``listen`` by relaying to ``upstream``; ``on_end(reason)`` is called on the
    watcher thread when it ends without ``stop`` (a death)."""

    def __init__(
        self,
        listen: socket.socket,
        upstream: tuple[str, int],
        secret: bytes,
        on_end: Callable[[str], None],
        on_counts: Callable[[int, int], None],
    ) -> None:
        self.listen = listen
        self.upstream = upstream
        self.secret = secret
        self.on_end = on_end
        self.on_counts = on_counts
        self.process: subprocess.Popen[bytes] | None = None
        self.pipe: socket.socket | None = None
        self.ready = threading.Event()
        self.stopping = False
        self.ended = threading.Event()
        self._frames = Frames()
        self._out: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._queued = 0
        """Bytes put on ``_out`` and not yet written (while any wait, ``send`` leaves the pipe to the writer)."""
        self.direct = 0
        """Messages ``send`` began to write itself (the rest of one the pipe did not take went to the writer)."""
        self._queued_lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self, timeout: float = READY_TIMEOUT) -> None:
        """Spawn it and wait until it serves the port (RuntimeError if it did not within ``timeout``)."""
        ours, theirs = socket.socketpair()
        environment = {key: value for key, value in os.environ.items() if key not in SECRET_ENVIRONMENT}
        command = [
            sys.executable,
            "-m",
            "pooltree.reads.process",
            "--listen-fd",
            str(self.listen.fileno()),
            "--pipe-fd",
            str(theirs.fileno()),
            "--upstream",
            f"{self.upstream[0]}:{self.upstream[1]}",
        ]
        try:
            self.process = subprocess.Popen(
                command,
                pass_fds=(self.listen.fileno(), theirs.fileno()),
                env=environment,
                stdin=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        self.pipe = ours
        ours.sendall(frame(("secret", self.secret)))
        self._threads = [
            threading.Thread(target=self._read, name="read-process-watch", daemon=True),
            threading.Thread(target=self._write, name="read-process-feed", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        if not self.ready.wait(timeout) or self.ended.is_set():
            self.stop()
            raise RuntimeError(f"the read process did not serve the port within {timeout} s")
        log.info("the read process (pid %d) serves the API port", self.process.pid)

    def send(self, message: Any) -> None:
        """``message`` to the read process (never blocks; dropped once it ended). Written on the pipe here and now
        when nothing waits for the writer thread and the pipe's buffer takes it whole (the common case: a tick's
        message reaches the read process without another thread's turn for the interpreter); else what is left
        waits, in order, for the writer thread."""
        if self.ended.is_set():
            return
        data = frame(message)
        with self._queued_lock:
            if self._queued == 0 and self.pipe is not None:
                try:
                    sent = self.pipe.send(data, socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    sent = 0
                except OSError:
                    return  # it ended: the reader sees the end
                self.direct += 1
                if sent == len(data):
                    return
                data = data[sent:]  # the rest of the frame first, before anything sent after it
            self._queued += len(data)
            stuck = self._queued > FEED_BACKLOG_MAX
        if stuck:
            log.error("the read process took no feed while %d bytes waited: killed as stuck", self._queued)
            self.kill()
            return
        self._out.put(data)

    def kill(self) -> None:
        """SIGKILL (a stuck read process: its death is taken over as any other)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()

    def _write(self) -> None:
        pipe = self.pipe
        assert pipe is not None
        while True:
            data = self._out.get()
            if data is None:
                return
            try:
                pipe.sendall(data)
            except OSError:
                return  # it ended: the reader sees the end
            with self._queued_lock:
                self._queued -= len(data)

    def _read(self) -> None:
        pipe = self.pipe
        assert pipe is not None
        while True:
            try:
                messages = receive(pipe, self._frames)
            except Exception:
                log.exception("the read process's pipe carried what is not a message")
                messages = None
            if messages is None:
                break
            for message in messages:
                if message[0] == "ready":
                    self.ready.set()
                elif message[0] == "counts":
                    self.on_counts(int(message[1]), int(message[2]))
        self._out.put(None)
        reason = self._reap()
        self.ended.set()
        if not self.stopping:
            self.on_end(reason)

    def _reap(self) -> str:
        """Wait for the ended process; how it ended."""
        process = self.process
        assert process is not None
        try:
            code = process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:  # its pipe ended but it lives on: it is no read process any more
            process.kill()
            code = process.wait()
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
            return f"killed by signal {-code}"
        return f"exited with status {code}"

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """End it (SIGTERM: it finishes the answers in flight; SIGKILL after ``timeout``) and wait for it."""
        self.stopping = True
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.pipe is not None:
            with contextlib.suppress(OSError):
                self.pipe.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(timeout)
        if self.pipe is not None:
            self.pipe.close()
        self.ended.set()


def last_answer_protocol(base: type[Any]) -> type[Any]:
    """uvicorn's HTTP protocol ``base`` whose next answer can be made its connection's last (``last_answer_next``:
    the next request's cycle is not kept alive, uvicorn answers it with ``Connection: close`` and closes)."""

    class LastAnswer(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.last_answer_next = False

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            if self.last_answer_next and self.cycle is not None:
                self.cycle.keep_alive = False

    return LastAnswer


class ReadPort:
    """The client-facing port while a read process owns it: the sockets, the read process, the scheduler's own
    serving of the port after a death, the feed of the leading service.

    ``public_config``: the uvicorn configuration the scheduler serves the port with itself (the API's, without a
    read process); the internal listener's uvicorn server is given to ``start``."""

    def __init__(self, host: str, port: int, bind: Callable[[str, int], socket.socket]) -> None:
        self.host = host
        self.listen = bind(host, port)
        self.listen.listen(BACKLOG)
        self.port = int(self.listen.getsockname()[1])
        self.internal = bind("127.0.0.1", 0)
        self.internal_port = int(self.internal.getsockname()[1])
        self.secret = secrets.token_hex(16).encode("ascii")
        self.health = ReadProcessHealth()
        self.process: ReadProcess | None = None
        self.feed: ReadFeed | None = None
        """The leading service's feed while attached to the running read process."""
        self.leading: Any = None
        """The service that leads (``lead``), whose feed a new read process is given."""
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server: uvicorn.Server | None = None
        self.public_config: uvicorn.Config | None = None
        self.own: asyncio.base_events.Server | None = None
        """The scheduler's own listener on the port while no read process serves it."""
        self.own_connections: weakref.WeakSet[Any] = weakref.WeakSet()
        """The protocols of the connections the scheduler's own listener accepted (``_hand_back``)."""
        self.closing = False
        self._restart: asyncio.TimerHandle | None = None

    async def start(self, server: uvicorn.Server, public_config: uvicorn.Config) -> None:
        """The read process serves the port (the internal listener's ``server`` is up)."""
        self.loop = asyncio.get_running_loop()
        self.server = server
        self.public_config = public_config
        try:
            await self._spawn(restarted=False)
        except Exception as error:  # the scheduler serves its port all the same
            await self._take_over(f"did not start: {error}")

    async def _spawn(self, restarted: bool) -> None:
        process = ReadProcess(
            self.listen,
            ("127.0.0.1", self.internal_port),
            self.secret,
            lambda reason: self._died(process, reason),
            self.health.counted,
        )
        await asyncio.to_thread(process.start)
        if self.closing:
            await asyncio.to_thread(process.stop)
            return
        self.process = process
        self.health.serving(time.monotonic(), restarted)
        if process.ended.is_set() and not process.stopping:  # it died before it was taken as the port's
            await self._take_over("ended as it began to serve")
            return
        if (
            self.own is not None
        ):  # the scheduler served the port since the last death: the new process takes it
            self._hand_back()
            log.warning("a new read process (pid %d) serves the API port again", process.pid)
        self._attach()

    def _hand_back(self) -> None:
        """Stop accepting on the port, and make the next answer on each of the scheduler's own connections its
        last (``Connection: close``; the one being answered, or the next request's; an idle one left unused ends
        at uvicorn's keep-alive timeout): their clients' next connections reach the read process, and no client
        has a request cut by it. Without it a keep-alive client stayed on the scheduler's event loop as long as it
        kept its connection; closing idle connections at once cut requests sent as they closed."""
        own, self.own = self.own, None
        if own is not None:
            own.close()
        for protocol in list(self.own_connections):
            cycle = protocol.cycle
            if cycle is not None and not cycle.response_complete:
                cycle.keep_alive = False
            else:
                protocol.last_answer_next = True

    def lead(self, service: Any) -> None:
        """``service`` leads: its alert and metrics follow the read process, its feed goes to it."""
        self._detach()
        self.leading = service
        service.watch_read_process(self.health)
        self._attach()

    def unlead(self) -> None:
        """The leading service stopped leading: its feed is detached, the read process's replica emptied."""
        self._detach()
        self.leading = None

    def _attach(self) -> None:
        feed = getattr(self.leading, "read_feed", None) if self.leading is not None else None
        process = self.process
        if feed is None or process is None:
            return
        process.send(("install", feed.replica))
        feed.attach(lambda message: process.send(("feed", message)))  # the pipe's ("feed", message)
        self.feed = feed

    def _detach(self) -> None:
        feed, self.feed = self.feed, None
        if feed is not None:
            feed.detach()
            if self.process is not None:
                self.process.send(("install", None))

    def _died(self, process: ReadProcess, reason: str) -> None:
        """On the watcher thread: ``process`` died (one that died before it served is its starter's to report)."""
        loop = self.loop
        if loop is not None and not self.closing:
            with contextlib.suppress(RuntimeError):  # the loop closed
                loop.call_soon_threadsafe(lambda: loop.create_task(self._lost(process, reason)))

    async def _lost(self, process: ReadProcess, reason: str) -> None:
        if process is self.process:
            await self._take_over(reason)

    async def _take_over(self, reason: str) -> None:
        """Serve the port ourselves, then start a new read process after the back-off."""
        if self.closing:
            return
        feed, self.feed = self.feed, None
        if feed is not None:
            feed.detach()
        self.process = None
        delay = self.health.died(reason, time.time(), time.monotonic())
        await self._serve_port()
        log.error(
            "the read process died (%s): the scheduler serves the API port %s:%d itself; a new read process in %.0f s",
            reason,
            self.host,
            self.port,
            delay,
        )
        assert self.loop is not None
        self._restart = self.loop.call_later(
            delay, lambda: self.loop and self.loop.create_task(self._respawn())
        )

    async def _serve_port(self) -> None:
        server, config = self.server, self.public_config
        assert server is not None and config is not None and self.loop is not None
        if self.own is not None:  # serving it already (a new read process ended as it began)
            return
        if not config.loaded:
            config.load()
        http = last_answer_protocol(config.http_protocol_class)

        def protocol() -> asyncio.Protocol:
            made = http(config=config, server_state=server.server_state, app_state={})  # type: ignore[call-arg]
            self.own_connections.add(made)
            return made

        own = await self.loop.create_server(protocol, sock=self.listen.dup(), backlog=BACKLOG)
        self.own = own
        server.servers.append(own)  # closed with the server (uvicorn's shutdown)

    async def _respawn(self) -> None:
        self._restart = None
        if self.closing:
            return
        try:
            await self._spawn(restarted=True)
        except Exception as error:
            delay = self.health.died(f"did not start: {error}", time.time(), time.monotonic())
            log.error("a new read process did not start (%s); the next try in %.0f s", error, delay)
            assert self.loop is not None
            self._restart = self.loop.call_later(
                delay, lambda: self.loop and self.loop.create_task(self._respawn())
            )

    async def close(self) -> None:
        """End the read process (before the scheduler's HTTP stops: its answers in flight are still served)."""
        self.closing = True
        if self._restart is not None:
            self._restart.cancel()
        self._detach()
        process, self.process = self.process, None
        if process is not None:
            await asyncio.to_thread(process.stop)
            self.health.stopped()

    def close_sockets(self) -> None:
        self.listen.close()
        self.internal.close()
