"""Node heartbeats on a listener and an event loop of their own: a thread of the scheduler's process.

With one event loop for everything, an API request that arrives while 1,000 nodes heartbeat every second waits for
its turn behind the loop's backlog of heartbeats: py-spy found the loop's thread busy 85-93% of the time,
heartbeats 55-65% of it, while the worker threads idled and no read waited for the scheduling lock. Here the
heartbeats' HTTP (parsing, the body, the answer's write) and their processing run on a second loop in a thread,
so each loop is a thread the interpreter shares its time between (``sys.setswitchinterval``): an API request
waits at most a switch interval or two for the interpreter, not for a queue of heartbeats.

The nodes need no second address: they are configured with the scheduler's API URL, and the answer to a heartbeat
sent there names this listener (``wire.HEARTBEAT_URL``, on the host the node reached the scheduler at, the way
node shards are named), which the node agent follows; a heartbeat the listener does not answer (connection
refused, 502/503) goes back to the API's port, which answers it and names the listener again. The same handler
(``heartbeat_flight.HeartbeatFlight``) answers both ports: the same authentication, errors, throttling and
scheduling; on the listener, plain heartbeats reach it past ASGI (``SchedulerService.direct_heartbeat``, through
``leader.HeartbeatEntry``: ``heartbeat_protocol.DirectHeartbeats``), with no task, scope or coroutine chain per
heartbeat.
"""

from __future__ import annotations

import resource
import socket
import threading
import time

import uvicorn

from pooltree.node import wire

START_TIMEOUT = 30.0
"""Seconds the listener's thread has to start serving."""
STOP_TIMEOUT = 10.0
"""Seconds ``stop`` waits for the thread to end its connections."""


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound on ``host``:``port`` (0: a free port), ready for uvicorn to listen on."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


LISTEN_BACKLOG = 8192
"""Connections a heartbeat listener lets wait for its accept (the kernel caps it at ``net.core.somaxconn``):
uvicorn's 2,048 was overrun when thousands of nodes came back at once, and a connection the queue had no room for
was reset at its first heartbeat."""


def listener_settings(config: uvicorn.Config) -> uvicorn.Config:
    """``config`` as a heartbeat listener's (the scheduler's own, each node shard's): idle connections kept longer
    than a node keeps them (``wire.LISTENER_KEEP_ALIVE``), so a node's heartbeat never meets the listener's close
    of its connection, and `LISTEN_BACKLOG`."""
    config.timeout_keep_alive = int(wire.LISTENER_KEEP_ALIVE)
    config.backlog = LISTEN_BACKLOG
    return config


OPEN_FILES_CAP = 1 << 20
"""The highest soft limit `open_files_for_nodes` sets (also when the hard limit is unlimited)."""


def open_files_for_nodes() -> tuple[int, int]:
    """Raise the process's soft limit of open files to its hard limit (at most `OPEN_FILES_CAP`); (before, after).
    Every node holds a connection to its listener for as long as it heartbeats (`listener_settings`), so a
    scheduler or node shard holds a descriptor per node: at the soft limit many systems start processes with
    (1,024) the listener could not accept the thousandth node. The hard limit is the administrator's bound."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_CAP if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_CAP)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (OSError, ValueError):
            return soft, soft
        return soft, wanted
    return soft, soft


def url_for(hostname: str, port: int) -> str:
    """``http://hostname:port`` (an IPv6 address in brackets)."""
    return f"http://[{hostname}]:{port}" if ":" in hostname else f"http://{hostname}:{port}"


class HeartbeatListener:
    """uvicorn serving ``config``'s app on a socket of its own, on an event loop in a thread of its own.

    ``config`` is the listener's uvicorn configuration (the API's, made for ``sock``'s port); ``sock`` is bound by
    the caller, so a port in use fails before anything starts."""

    def __init__(self, config: uvicorn.Config, sock: socket.socket) -> None:
        self.socket = sock
        self.port = int(sock.getsockname()[1])
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, name="heartbeat-loop", daemon=True
        )

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Serve; returns once the listener accepts connections (RuntimeError if it did not within ``timeout``)."""
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the heartbeat listener did not start on port {self.port}")
            time.sleep(0.005)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """End the loop (its open connections closed by uvicorn) and wait for the thread, at most ``timeout``."""
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(timeout)
        self.socket.close()
