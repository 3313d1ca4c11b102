"""A node shard process's end of its pipe to the leader, read and written on the shard's event loop.

The leader's end is a ``multiprocessing.connection.Connection`` (``host.NodeShards``); its frames are a 4-byte
big-endian signed length (-1: an 8-byte unsigned length follows) and a pickle of the message. ``LoopPipe`` reads
them on the event loop as the pipe becomes readable (``loop.add_reader``; each wake-up takes what is there in one
``recv`` that never blocks, ``MSG_DONTWAIT``, and hands every whole message to ``deliver`` in order), so a reply
reaches its waiting heartbeat without a reader thread, its hand-over to the loop (``call_soon_threadsafe``, the
loop's self-pipe) and the two threads' contention for the interpreter. ``send`` writes a message as the one frame
``Connection.send`` writes, pickled by ``pickle.dumps`` (C) instead of ``Connection.send``'s Python pickler set up
per message; the leader's ``Connection.recv`` reads it alike. End of file (the leader died or closed the shard)
calls ``ended``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import pickle
import socket
import struct
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger(__name__)

READ_BYTES = 1 << 18
"""The most one wake-up reads off the pipe (what is left is read at the next one)."""
_SIZE = struct.Struct("!i")
_LONG_SIZE = struct.Struct("!Q")
_LONG = -1
"""The 4-byte length of a frame whose length is in the 8 bytes that follow (a payload over 2 GiB)."""
_BIG = 0x7FFFFFFF


def frame(message: Any) -> bytes:
    """``message`` as ``Connection.send`` frames it (header and pickle; a payload past ``_BIG`` as the long form)."""
    payload = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    if len(payload) > _BIG:
        return _SIZE.pack(_LONG) + _LONG_SIZE.pack(len(payload)) + payload
    return _SIZE.pack(len(payload)) + payload


class Frames:
    """Whole messages out of the bytes read so far (``feed``); a frame cut by a read waits for the rest."""

    def __init__(self) -> None:
        self._held = b""

    def feed(self, data: bytes) -> list[Any]:
        """The messages that ``data`` completes, in order."""
        if self._held:
            data = self._held + data
        messages = []
        view = memoryview(data)
        end = len(data)
        at = 0
        while end - at >= 4:
            (size,) = _SIZE.unpack_from(data, at)
            head = 4
            if size == _LONG:
                if end - at < 12:
                    break
                (size,) = _LONG_SIZE.unpack_from(data, at + 4)
                head = 12
            elif size < 0:
                raise ValueError(f"a frame of negative length {size} on the leader's pipe")
            if end - at - head < size:
                break
            messages.append(pickle.loads(view[at + head : at + head + size]))
            at += head + size
        view.release()
        self._held = data[at:] if at < end else b""
        return messages

    @property
    def holding(self) -> int:
        """Bytes of a frame not yet whole."""
        return len(self._held)


def receive(sock: socket.socket, frames: Frames, flags: int = 0) -> list[Any] | None:
    """One ``recv`` of the pipe's socket (``flags``: ``MSG_DONTWAIT`` never waits) fed to ``frames``: the messages
    it completes ([] when nothing was there to read), None once the pipe ended (end of file, or the other end is
    gone). A payload that is not frames raises (``Frames.feed``). Both ends read so: the shard's ``LoopPipe`` and
    the leader's reader thread (``host.NodeShards``)."""
    try:
        data = sock.recv(READ_BYTES, flags)
    except (BlockingIOError, InterruptedError):
        return []
    except OSError:
        return None
    if not data:
        return None
    return frames.feed(data)


class LoopPipe:
    """The shard's end of ``conn`` on ``loop``: messages to ``deliver`` as they arrive, ``ended()`` at end of file
    or a broken pipe; ``send`` writes without blocking the loop, in order.

    The pipe is non-blocking (uvloop's ``add_reader`` makes the file description so anyway, and a write that
    blocked would stop the shard's loop). While the leader is slow to read (its reader thread processes a
    heartbeat between two reads; a fair-share update holds the lock) the pipe's buffer fills: what it cannot take
    waits here, whole frames after the part written, and goes out as the pipe becomes writable
    (``loop.add_writer``). A write that failed for a full buffer once answered the node 503 and could leave half a
    frame in the pipe. What waits is bounded by the heartbeats in flight (a node waits for its answer before its
    next heartbeat) and the shard's few messages of its own."""

    def __init__(
        self,
        conn: Connection,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[Any], None],
        ended: Callable[[], None],
    ) -> None:
        self._sock = socket.socket(fileno=os.dup(conn.fileno()))
        self._loop = loop
        self._deliver = deliver
        self._ended = ended
        self._frames = Frames()
        self._unsent: collections.deque[memoryview] = collections.deque()
        """What the pipe could not take yet, in order (the first entry may be the rest of a frame)."""
        self._broken: OSError | None = None
        """Why a write failed (the leader's end is gone): every later ``send`` raises it."""
        self._sock.setblocking(False)
        loop.add_reader(self._sock.fileno(), self._readable)

    def send(self, message: Any) -> None:
        """``message`` to the leader, now or queued behind what waits; OSError when the pipe is broken."""
        if self._broken is not None:
            raise BrokenPipeError(f"the pipe to the leader is broken: {self._broken}")
        data = frame(message)
        if self._unsent:
            self._unsent.append(memoryview(data))
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        if sent < len(data):
            self._unsent.append(memoryview(data)[sent:])
            self._loop.add_writer(self._sock.fileno(), self._writable)

    @property
    def unsent(self) -> int:
        """Bytes waiting for the pipe to take them."""
        return sum(len(chunk) for chunk in self._unsent)

    def close(self) -> None:
        fd = self._sock.fileno()
        self._loop.remove_reader(fd)
        if self._unsent:
            self._loop.remove_writer(fd)
            self._unsent.clear()
        self._sock.close()

    def _writable(self) -> None:
        """The pipe takes more: what waits, in order, until it is full again or nothing waits."""
        unsent = self._unsent
        while unsent:
            chunk = unsent[0]
            try:
                sent = self._sock.send(chunk)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # the leader's end is gone
                self._broken = error
                unsent.clear()
                self._loop.remove_writer(self._sock.fileno())
                self._ended()
                return
            if sent < len(chunk):
                unsent[0] = chunk[sent:]
                return
            unsent.popleft()
        self._loop.remove_writer(self._sock.fileno())

    def _readable(self) -> None:
        try:
            messages = receive(self._sock, self._frames, socket.MSG_DONTWAIT)
        except Exception:  # not the leader's frames: nothing after it can be read
            log.exception("the leader's pipe carried what is not a message")
            messages = None
        if messages is None:
            self._loop.remove_reader(self._sock.fileno())
            self._ended()
            return
        for message in messages:
            try:
                self._deliver(message)
            except Exception:
                log.exception("a message from the leader failed in the shard")
