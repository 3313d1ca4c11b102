"""The read process's body: ``python -m pooltree.reads.process --listen-fd L --pipe-fd P --upstream HOST:PORT``.

It is started by the scheduler (``host.ReadProcess``) with two inherited descriptors: the client-facing listening
socket (``L``) and its end of a socket pair to the scheduler (``P``), whose frames are those of
``shards/pipe.py``. The first message is ``("secret", hex)``, read before anything is served; then it accepts
the port's connections on its own event loop (uvloop) with ``relay.Relay``, says ``("ready",)``, and takes
``("install", spec)`` (a fresh replica, ``seam.make_replica``) and ``("feed", message)`` (the replica's ``apply``)
as they come. Every ``COUNTS_PERIOD`` seconds in which they moved it sends ``("counts", relayed, answered,
tunnelled)``.

It exits at its pipe's end (the scheduler died or closed it: no orphan serves a port no scheduler is behind), and
on SIGTERM after its connections with answers in flight end (at most ``STOP_GRACE`` seconds). SIGINT is ignored:
a terminal's Ctrl-C reaches the whole process group, and the scheduler stops its read process itself.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import uvloop

from pooltree.gc_policy import POLICY, tuning_enabled
from pooltree.reads.relay import Relay
from pooltree.reads.seam import NoReplica, make_replica
from pooltree.shards.pipe import Frames, LoopPipe

log = logging.getLogger(__name__)

SECRET_TIMEOUT = 30.0
"""Seconds the read process waits for its secret before it gives up."""
COUNTS_PERIOD = 1.0
STOP_GRACE = 5.0
"""Seconds a SIGTERM waits for answers in flight."""
BACKLOG = 2048


def read_secret(pipe: socket.socket, frames: Frames) -> tuple[bytes, list[Any]]:
    """The secret (the pipe's first message) and whatever whole messages came with it."""
    deadline = time.monotonic() + SECRET_TIMEOUT
    held: list[Any] = []
    while not held:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SystemExit("the read process got no secret from the scheduler")
        pipe.settimeout(remaining)
        try:
            data = pipe.recv(1 << 16)
        except TimeoutError:
            continue
        if not data:
            raise SystemExit(0)  # the scheduler went before it began
        held.extend(frames.feed(data))
    kind, secret = held[0][0], held[0][1]
    if kind != "secret" or not isinstance(secret, bytes):
        raise SystemExit(f"the read process's first message was {kind!r}, not its secret")
    return secret, held[1:]


class ReadProcess:
    """The running read process: its relay, its pipe, its stop."""

    def __init__(self, relay: Relay, loop: asyncio.AbstractEventLoop) -> None:
        self.relay = relay
        self.loop = loop
        self.pipe: LoopPipe | None = None
        self.stopped = loop.create_future()
        self.sent_counts = (0, 0, 0)

    def deliver(self, message: Any) -> None:
        kind = message[0]
        if kind == "feed":
            try:
                self.relay.replica.apply(message[1])
            except Exception:
                log.exception(
                    "the replica failed to apply a feed message; nothing is answered until the next one"
                )
                self.relay.install(NoReplica())
                return
            self.relay.fed()
        elif kind == "install":
            try:
                replica = make_replica(message[1])
            except Exception:
                log.exception("the replica %r could not be made; every request is relayed", message[1])
                replica = NoReplica()
            self.relay.install(replica)
        else:
            log.warning("the scheduler sent %r, which the read process does not know", kind)

    def ended(self) -> None:
        """The pipe's end: the scheduler is gone."""
        if not self.stopped.done():
            self.stopped.set_result("the scheduler's pipe ended")

    def terminate(self) -> None:
        if not self.stopped.done():
            self.stopped.set_result("SIGTERM")

    async def report_counts(self) -> None:
        while True:
            await asyncio.sleep(COUNTS_PERIOD)
            relay = self.relay
            counts = (relay.relayed, relay.answered, relay.tunnelled)
            if counts != self.sent_counts and self.pipe is not None:
                self.sent_counts = counts
                try:
                    self.pipe.send(("counts", *counts))
                except OSError:
                    return


def hold_collector() -> bool:
    """The collector as the batch shells hold it (``pooltree.gc_policy``, unless ``POOLTREE_GC_TUNING=0``): what
    start-up imported and made frozen now, and every full collection's survivors at its end, so no full collection
    walks the modules and the replica's templates again. Untuned, a loaded read process's full collections took
    72-93 ms each (every request in it waiting), the gets' p99 beside 1,000 nodes (``bench/RESULTS.md``, session
    36); whether it holds."""
    if not tuning_enabled():
        return False
    POLICY.acquire(at_collection=True)
    POLICY.settle()
    return True


async def serve(
    listen: socket.socket,
    conn: Connection,
    secret: bytes,
    held: list[Any],
    upstream: tuple[str, int],
) -> None:
    loop = asyncio.get_running_loop()
    relay = Relay(upstream, secret, loop)
    process = ReadProcess(relay, loop)
    for message in held:
        process.deliver(message)
    pipe = LoopPipe(conn, loop, process.deliver, process.ended)
    process.pipe = pipe
    loop.add_signal_handler(signal.SIGTERM, process.terminate)
    hold_collector()
    server = await loop.create_server(relay.protocol, sock=listen, backlog=BACKLOG)
    pipe.send(("ready",))
    tasks = [
        loop.create_task(relay.sweep_forever(), name="sweep"),
        loop.create_task(process.report_counts(), name="counts"),
    ]
    reason = await process.stopped
    server.close()
    if reason == "SIGTERM":
        deadline = loop.time() + STOP_GRACE
        while loop.time() < deadline and any(client.busy for client in relay.connections):
            await asyncio.sleep(0.02)
    for client in list(relay.connections):
        client.close()
    for task in tasks:
        task.cancel()
    pipe.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen-fd", type=int, required=True)
    parser.add_argument("--pipe-fd", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the scheduler's internal listener")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s read-process %(levelname)s %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    host, _, port = args.upstream.rpartition(":")
    listen = socket.socket(fileno=args.listen_fd)
    listen.setblocking(False)
    pipe_socket = socket.socket(fileno=os.dup(args.pipe_fd))
    frames = Frames()
    secret, held = read_secret(pipe_socket, frames)
    if frames.holding:
        raise SystemExit("the read process's pipe began with a cut frame")  # the scheduler sends whole frames
    pipe_socket.close()
    conn = Connection(args.pipe_fd)
    uvloop.run(serve(listen, conn, secret, held, (host, int(port))))
    sys.exit(0)


if __name__ == "__main__":
    main()
